"""Roles from policy: `resolve` a `[roles.<name>]` entry, `check` whether it may run, and
`require` it before anything starts.

Fail closed, every reason listed (DESIGN.md "Orchestration", issue 16): an unknown
provider, a `command:` provider no `[providers.<name>]` defines, an undeclared auth or
billing (oms never infers them from a model name), credits not explicitly enabled,
`claude -p` without an API key, an unattended run of a role that is not eligible for one,
a CLI that is not installed, an api-key role whose key oms' broker does not have. Each is
exit 4 (`RoleUnavailable`), nothing having run.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidence import state_root
from gatekeeper.agent.egress_config import KEY_ENV, Provider, provider_keys
from gatekeeper.agent.kinds import Kind, installed_cli
from gatekeeper.errors import ConfigError, UsageError
from gatekeeper.gates.mark import policy_commit
from gatekeeper.repo.git import open_repo
from gatekeeper.repo.policy import read_committed_file, read_policy_at
from gatekeeper.work.providers.base import Role, RoleUnavailable
from policy import LoadedPolicy, PolicyError, RolePolicy

__all__ = ["Eligibility", "RoleStatus", "RoleUnavailable", "check", "require", "resolve",
           "roster", "schema_of", "status", "statuses", "trusted_policy"]  # fmt: skip

CLAUDE = "claude-code"
CODEX = "codex-cli"
COMMAND_PREFIX = "command:"
# The CLI each real provider runs, as `oms agent run` finds it (kinds.py), and its kind.
CLI: dict[str, tuple[str, Kind]] = {CLAUDE: ("claude", "claude-code"), CODEX: ("codex", "codex")}
KEY_OF: dict[str, Provider] = {CLAUDE: "anthropic", CODEX: "openai"}
UNDECLARED = "undeclared"
UNATTENDED_AUTH = ("api-key", "none")  # a subscription login never runs unattended


@dataclass(frozen=True)
class Eligibility:
    eligible: bool
    reasons: tuple[str, ...]


def resolve(loaded: LoadedPolicy, name: str) -> Role:
    """The role `name` of the trusted policy; RoleUnavailable if no such role exists.

    A role whose provider is unknown or undefined still resolves (with no argv), so that
    `oms role list` can show why it cannot run; `check` refuses it."""
    pol = loaded.policy.roles.get(name)
    if pol is None:
        known = ", ".join(sorted(loaded.policy.roles)) or "none"
        raise RoleUnavailable(f"no role {name[:64]!r} in the policy ([roles.<name>]; "
                              f"defined: {known})")  # fmt: skip
    return _role(loaded, name, pol)


def roster(loaded: LoadedPolicy) -> list[Role]:
    """Every role of the policy, sorted by name."""
    return [_role(loaded, n, loaded.policy.roles[n]) for n in sorted(loaded.policy.roles)]


def _role(loaded: LoadedPolicy, name: str, pol: RolePolicy) -> Role:
    cmd: tuple[str, ...] = ()
    schema, egress = None, "none"
    external = pol.provider in CLI
    if pol.provider.startswith(COMMAND_PREFIX):
        prov = loaded.policy.providers.get(pol.provider[len(COMMAND_PREFIX) :])
        if prov is not None:
            cmd, schema, external = tuple(prov.cmd), prov.output_schema, prov.external
            egress = prov.egress
    return Role(
        name=name, provider=pol.provider, engine=pol.provider, model=pol.model,
        auth=pol.auth or UNDECLARED, billing=pol.billing or UNDECLARED,
        unattended=pol.unattended, transport=pol.transport, authority=pol.authority,
        external=external, allow_usage_billing=pol.allow_usage_billing,
        timeout_s=pol.timeout_s, cmd=cmd, output_schema=schema, egress=egress,
    )  # fmt: skip


def check(role: Role, *, unattended: bool, search_path: str | None = None,
          worker_pane: bool = False) -> Eligibility:  # fmt: skip
    """Whether `role` may run now (`unattended`: with nobody at a terminal), and why not.
    `worker_pane`: as a conductor's worker, in its pane, under `oms agent run` (the only
    place an interactive role may run unattended: `_unattended`)."""
    path = os.environ.get("PATH", os.defpath) if search_path is None else search_path
    reasons = [*_declared(role), *_provider(role, path), *_transport(role)]
    if unattended:
        reasons += _unattended(role, worker_pane)
    return Eligibility(not reasons, tuple(reasons))


def require(role: Role, *, unattended: bool, search_path: str | None = None,
            worker_pane: bool = False) -> Role:  # fmt: skip
    """`role` if `check` passes; RoleUnavailable naming the role and every reason if not."""
    found = check(role, unattended=unattended, search_path=search_path,
                  worker_pane=worker_pane)  # fmt: skip
    if not found.eligible:
        raise RoleUnavailable(f"role {role.name} cannot run: {'; '.join(found.reasons)}")
    return role


def _declared(role: Role) -> list[str]:
    out = []
    if role.auth == UNDECLARED:
        out.append("auth is not declared (subscription, api-key or none); oms never infers it")
    if role.billing == UNDECLARED:
        out.append("billing is not declared (subscription, usage or none); oms never infers it")
    if role.billing == "usage" and not role.allow_usage_billing:
        out.append("credit-billed models not explicitly enabled (allow_usage_billing = true)")
    return out


def _provider(role: Role, search_path: str) -> list[str]:
    if role.provider in CLI:
        cmd0, kind = CLI[role.provider]
        out = [] if role.auth != "api-key" else _key(role.provider)
        try:
            installed_cli(kind, cmd0, search_path)
        except UsageError as exc:
            out.append(f"the {role.provider} CLI is not installed: {exc}")
        return out
    if not role.provider.startswith(COMMAND_PREFIX):
        return [f"unknown provider {role.provider!r} (claude-code, codex-cli or command:<name>)"]
    if not role.cmd:
        name = role.provider[len(COMMAND_PREFIX) :]
        return [f"provider {role.provider} names no [providers.{name}] in the policy"]
    if not _installed(role.cmd[0], search_path):
        return [f"the command of {role.provider} is not installed: {role.cmd[0][:200]}"]
    return []


def _key(provider: str) -> list[str]:
    """An api-key role's key must be there for oms' broker to inject (never the agent's)."""
    name = KEY_OF[provider]
    try:
        keys = provider_keys(os.environ, state_root())
    except ConfigError as exc:
        return [f"the {name} key cannot be used: {exc}"]
    if (keys.anthropic if provider == CLAUDE else keys.openai) is None:
        return [f"no API key for oms' egress broker: set {KEY_ENV[name]} in oms' environment "
                f"or write $OMS_HOME/providers/{name}"]  # fmt: skip
    return []


def _installed(cmd0: str, search_path: str) -> bool:
    if "/" in cmd0:
        return os.path.isabs(cmd0) and os.path.isfile(cmd0) and os.access(cmd0, os.X_OK)
    return shutil.which(cmd0, path=search_path) is not None


def _transport(role: Role) -> list[str]:
    if role.provider == CLAUDE and role.transport == "exec" and role.auth != "api-key":
        return ['claude -p (transport = "exec") runs only with auth = "api-key", never a '
                "subscription login"]  # fmt: skip
    if (role.provider == CODEX and role.transport == "exec"
            and role.authority == "worktree-write" and role.auth != "api-key"):  # fmt: skip
        return ['a worktree-write codex exec role needs auth = "api-key"']
    return []


def _unattended(role: Role, worker_pane: bool = False) -> list[str]:
    """An exec role runs unattended anywhere it is dispatched; an interactive Claude Code
    role only as a conductor's worker in its pane under `oms agent run` (`worker_pane`),
    where oms' hooks decide its permissions inside the sandbox (docs/conductor.md)."""
    out = []
    if not role.unattended:
        out.append("the role is not marked unattended = true")
    if role.auth not in (*UNATTENDED_AUTH, UNDECLARED):  # undeclared: said once already
        out.append(f"auth {role.auth} never runs unattended (api-key or none only)")
    if role.transport != "exec" and not (worker_pane and role.provider == CLAUDE):
        out.append("an interactive role runs unattended only as a conductor's Claude Code "
                   "worker, in its pane under oms agent run")  # fmt: skip
    return out


@dataclass(frozen=True)
class RoleStatus:
    """A role as `oms role list|check` shows it: display only, no authority."""

    role: Role
    eligibility: Eligibility

    def to_json(self) -> dict[str, Any]:
        return {**self.role.to_json(), "eligible": self.eligibility.eligible,
                "reasons": list(self.eligibility.reasons)}  # fmt: skip


def trusted_policy(repo_dir: Path) -> LoadedPolicy:
    """The policy at the default branch's trusted mark: roles never come from a worktree."""
    repo = open_repo(repo_dir)
    return read_policy_at(repo.top, policy_commit(repo))


def statuses(repo_dir: Path, *, unattended: bool = False) -> list[RoleStatus]:
    """`oms role list`: every role of the trusted policy with its eligibility."""
    return [RoleStatus(r, check(r, unattended=unattended))
            for r in roster(trusted_policy(repo_dir))]  # fmt: skip


def status(repo_dir: Path, name: str, *, unattended: bool = False) -> RoleStatus:
    """`oms role check NAME`: one role of the trusted policy with its eligibility."""
    role = resolve(trusted_policy(repo_dir), name)
    return RoleStatus(role, check(role, unattended=unattended))


MAX_SCHEMA_BYTES = 64 << 10


def schema_of(repo_dir: Path, role: Role) -> dict[str, Any] | None:
    """A command provider's `output_schema`, read from the default branch's commit (never
    the worktree) as a JSON object; None when it names none. RoleUnavailable when the
    file is missing, too large or not a JSON object: a grader then cannot run."""
    if role.output_schema is None:
        return None
    repo = open_repo(repo_dir)
    sha = policy_commit(repo)
    where = f"{sha[:12]}:{role.output_schema}"
    try:
        data = read_committed_file(repo.top, sha, role.output_schema)
    except PolicyError as exc:
        raise RoleUnavailable(f"role {role.name}: output schema {exc}") from None
    if data is None or len(data) > MAX_SCHEMA_BYTES:
        raise RoleUnavailable(f"role {role.name}: output schema {where} is missing or over "
                              f"{MAX_SCHEMA_BYTES} bytes")  # fmt: skip
    try:
        schema = json.loads(data)
    except ValueError:
        schema = None
    if not isinstance(schema, dict):
        raise RoleUnavailable(f"role {role.name}: output schema {where} is not a JSON object")
    return schema
