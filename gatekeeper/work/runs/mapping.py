"""Which `[roles.<name>]` of the default branch's policy plays each run role.

A mapping value is a policy role's name or its `provider:model` (e.g. `command:impl:scripted`,
`codex-cli:gpt-5.5`); either way it can only choose among the roles the policy defines, so a
mapping never widens policy. Order: the run's own mapping (from `role_mapping` when it was
created), else the assignment persisted in `$OMS_HOME` (`oms_assign_roles`), else the
policy role named after the run role; a planner falls back to the orchestrator.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from evidence import state_root
from gatekeeper.errors import UsageError
from gatekeeper.work import roles
from gatekeeper.work.providers.base import Role, RoleUnavailable
from gatekeeper.work.runs.model import RUN_ROLES
from policy import LoadedPolicy

ASSIGNMENTS_FILE = "run-roles.json"
MAX_FILE_BYTES = 64 << 10
FALLBACK: Mapping[str, str] = {"planner": "orchestrator", "orchestrator": "planner"}


def assignments_path(repo_id: str, root: Path | None = None) -> Path:
    return (root or state_root()) / "repos" / repo_id / ASSIGNMENTS_FILE


def assigned(repo_id: str) -> dict[str, str]:
    """The persisted assignments (run role -> policy role name); {} when there are none.
    A file that cannot be read as such is a configuration error, never ignored."""
    path = assignments_path(repo_id)
    try:
        # never through a symlink: the state root's files are oms' own, read as they are
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise UsageError(f"cannot read the role assignments: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        raw = f.read(MAX_FILE_BYTES + 1)
    if len(raw) > MAX_FILE_BYTES:
        raise UsageError(f"{ASSIGNMENTS_FILE} is larger than {MAX_FILE_BYTES} bytes")
    try:
        doc = json.loads(raw)
        found = doc["roles"]
        if doc.get("version") != 1 or not isinstance(found, dict):
            raise ValueError
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
            raise ValueError
    except (ValueError, KeyError, TypeError):
        raise UsageError(f"{ASSIGNMENTS_FILE} in the state root is not a role assignment file; "
                         "assign the roles again") from None  # fmt: skip
    return {k: v for k, v in found.items() if k in RUN_ROLES}


def policy_role(loaded: LoadedPolicy, value: str) -> str:
    """The policy role a mapping value names: a role name, or `provider:model` matching
    exactly one role (the one named as the value's run role wins a tie). RoleUnavailable
    for anything the policy does not define."""
    if value in loaded.policy.roles:
        return value
    provider, sep, model = value.rpartition(":")
    if sep and provider and model:
        found = sorted(name for name, r in loaded.policy.roles.items()
                       if r.provider == provider and r.model == model)  # fmt: skip
        if found:
            return found[0]
    known = ", ".join(sorted(loaded.policy.roles)) or "none"
    raise RoleUnavailable(f"{value[:80]!r} is no role of the policy and no role's "
                          f"provider:model (defined: {known})")  # fmt: skip


def run_mapping(loaded: LoadedPolicy, repo_id: str,
                given: Mapping[str, str] | None = None) -> dict[str, str]:  # fmt: skip
    """The mapping a new run records: every run role that resolves to a policy role."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(RUN_ROLES))
    if unknown:
        raise UsageError(f"not a run role: {unknown[0][:40]!r} (roles: {', '.join(RUN_ROLES)})")
    saved = assigned(repo_id)
    out: dict[str, str] = {}
    for run_role in RUN_ROLES:
        if run_role in given:
            out[run_role] = policy_role(loaded, given[run_role])
        elif run_role in saved and saved[run_role] in loaded.policy.roles:
            out[run_role] = saved[run_role]
        elif run_role in loaded.policy.roles:
            out[run_role] = run_role
    for run_role, other in FALLBACK.items():
        if run_role not in out and other in out:
            out[run_role] = out[other]
    return out


def role_of(loaded: LoadedPolicy, mapping: Mapping[str, str], run_role: str,
            agent: str | None = None) -> Role:  # fmt: skip
    """The resolved role for `run_role`: a one-call `agent` override (a policy role or its
    provider:model; it does not change the run's mapping), else the run's mapping."""
    if agent is not None:
        return roles.resolve(loaded, policy_role(loaded, agent))
    name = mapping.get(run_role)
    if name is None:
        raise RoleUnavailable(f"no role plays {run_role} in this run: add [roles.{run_role}] to "
                              "oms.toml, assign one, or pass a role_mapping")  # fmt: skip
    return roles.resolve(loaded, name)
