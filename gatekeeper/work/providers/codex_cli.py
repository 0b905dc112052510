"""`codex-cli` roles: `codex exec --json` under `oms agent run --agent codex` (advisors,
graders; worktree-write executors with an API key).

The argv is fixed here: the role's model (from the default branch's policy) and, for a
grader, `--output-schema` naming the read-only /run/oms/schema.json; the document is read
from stdin (`-`) and is also `$OMS_TASK_FILE`; it is never argv. Codex's JSONL event
stream (`thread.*`, `turn.*`, `item.*` lines) gives the final agent message, which is the
receipt's output, and the token counts of each `turn.completed`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper.agent.codex_sessions import SESSION_RE
from gatekeeper.agent.inside import SCHEMA_FILE
from gatekeeper.agent.payloads import EgressMode
from gatekeeper.agent.run import AgentRunRequest, agent_run
from gatekeeper.work.providers.base import (
    ProviderReceipt,
    ProviderRequest,
    Role,
    RoleUnavailable,
    receipt,
    stdout_of,
)

CODEX = "codex"  # resolved on PATH to the npm package's native binary (agent/kinds.py)
# The egress each declared auth gets: the broker injects an API key; a subscription login
# goes through the recorded CONNECT tunnel; no auth, no network.
EGRESS: Mapping[str, EgressMode] = {"api-key": "api", "subscription": "tunnel", "none": "none"}


@dataclass(frozen=True)
class CodexEvents:
    """What oms reads of one `codex exec --json` stream."""

    final: str | None  # the last agent message
    usage: dict[str, int] | None  # summed over the turns
    error: str | None  # the last turn.failed / error message


def codex_argv(role: Role, *, schema: bool) -> tuple[str, ...]:
    """`codex exec` for `role`: nothing of the document, only the model and fixed flags."""
    if role.provider != "codex-cli" or role.transport != "exec":
        raise RoleUnavailable(f"role {role.name}: the codex-cli adapter runs exec roles only")
    return exec_argv(role, schema=schema)


def exec_argv(role: Role, *, schema: bool = False, events: bool = True, prompt: str = "-",
              resume: str | None = None) -> tuple[str, ...]:  # fmt: skip
    """`codex exec [resume SESSION]` with oms' fixed flags, the role's model and a fixed
    `prompt` (`-`: stdin); `events`: the JSONL stream (`--json`), else Codex's own text.
    A session id is a UUID, checked here: whatever is stored never becomes a flag."""
    argv = [CODEX, "exec"]
    if resume is not None:
        if not SESSION_RE.fullmatch(resume):
            raise RoleUnavailable(f"role {role.name}: not a Codex session id: {resume[:40]!r}")
        argv.append("resume")
    if events:
        argv.append("--json")
    argv += ["--skip-git-repo-check", f"--model={role.model}"]
    if schema:
        argv += ["--output-schema", SCHEMA_FILE]
    if resume is not None:
        argv.append(resume)
    return (*argv, prompt)


def codex_request(req: ProviderRequest) -> AgentRunRequest:
    role = req.role
    egress = EGRESS.get(role.auth)
    if egress is None:
        raise RoleUnavailable(f"role {role.name}: auth {role.auth} cannot run codex exec")
    schema = None
    if req.output_schema is not None:
        schema = json.dumps(req.output_schema, sort_keys=True).encode()
    return AgentRunRequest(
        repo_dir=req.repo_dir, cmd=codex_argv(role, schema=schema is not None), agent="codex",
        egress=egress, base_ref=req.base, capture=True, run_id=req.run_id,
        stdin=req.document, task_file=req.document, schema_file=schema,
        timeout_s=req.timeout_s or role.timeout_s, read_only=role.authority == "read-only",
        budget=req.budget,
    )  # fmt: skip


def run_codex(req: ProviderRequest) -> ProviderReceipt:
    """Run `codex exec` for `req.role`; the output is its final message (bounded)."""
    out = agent_run(codex_request(req))
    events = parse_events(stdout_of(out).splitlines())
    return receipt(req.role, req.loaded, out, (events.final or "").encode(), events.usage)


def _objects(lines: Iterable[bytes]) -> Iterable[dict[str, Any]]:
    """The lines that are JSON objects; anything else (a cut last line, noise) is skipped."""
    for line in lines:
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def parse_events(lines: Iterable[bytes]) -> CodexEvents:
    """The final agent message, the summed usage and the last error of a JSONL stream."""
    final = error = None
    usage: dict[str, int] = {}
    for ev in _objects(lines):
        kind = ev.get("type")
        item = ev.get("item")
        if kind == "item.completed" and isinstance(item, dict):
            if item.get("type") == "agent_message" and isinstance(item.get("text"), str):
                final = item["text"]
        elif kind == "turn.completed":
            _add_usage(usage, ev.get("usage"))
        elif kind == "turn.failed" and isinstance(ev.get("error"), dict):
            error = _text(ev["error"].get("message"))
        elif kind == "error":
            error = _text(ev.get("message"))
    return CodexEvents(final, usage or None, error)


def _add_usage(into: dict[str, int], usage: object) -> None:
    if not isinstance(usage, dict):
        return
    for key, value in usage.items():
        # `type() is int`: a bool is an int to Python, and a count is not a bool.
        if isinstance(key, str) and type(value) is int and value >= 0:
            into[key[:64]] = into.get(key[:64], 0) + value


def _text(value: object) -> str | None:
    return value[:2000] if isinstance(value, str) else None
