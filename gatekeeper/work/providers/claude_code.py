"""`claude-code` roles. An interactive role is a session in the conductor's panes (a later
issue), never run here. An exec role is `claude -p --output-format json` under `oms agent
run --agent claude-code`, and only with `auth = "api-key"`: never a subscription login.

The argv is fixed here: the role's model and the output format; the document is the
prompt on stdin (and `$OMS_TASK_FILE`), never argv. A worktree-write role may use its
tools without asking (no one is there to answer; oms' sandbox is the boundary, and
`oms agent run` records IS_SANDBOX=1); a read-only role keeps Claude Code's default
permissions on a read-only workspace. The one JSON object it prints gives `result` (the
receipt's output) and `usage`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from gatekeeper.agent.run import AgentRunRequest, agent_run
from gatekeeper.work.providers.base import (
    Adapter,
    ProviderReceipt,
    ProviderRequest,
    Role,
    RoleUnavailable,
    receipt,
    stdout_of,
)

CLAUDE = "claude"  # resolved on PATH to the npm package's binary (agent/kinds.py)


@dataclass(frozen=True)
class ClaudeResult:
    """What oms reads of `claude -p --output-format json`."""

    result: str | None
    usage: dict[str, int] | None
    is_error: bool


def claude_argv(role: Role) -> tuple[str, ...]:
    """`claude -p` for an api-key exec role; RoleUnavailable for any other."""
    if role.provider != "claude-code":
        raise RoleUnavailable(f"role {role.name}: not a claude-code role")
    if role.transport == "interactive":
        raise RoleUnavailable(f"role {role.name}: interactive sessions run in the conductor's "
                              "panes, not through a provider adapter")  # fmt: skip
    if role.auth != "api-key":
        raise RoleUnavailable(f'role {role.name}: claude -p runs only with auth = "api-key", '
                              "never a subscription login")  # fmt: skip
    argv = [CLAUDE, "-p", "--output-format", "json", f"--model={role.model}"]
    if role.authority == "worktree-write":
        argv += ["--permission-mode", "bypassPermissions"]
    return tuple(argv)


def claude_adapter(role: Role) -> Adapter:
    """The run function of a claude-code role; refuses an interactive or non-api-key role
    now, before anything starts."""
    claude_argv(role)
    return run_claude


def claude_request(req: ProviderRequest) -> AgentRunRequest:
    role = req.role
    return AgentRunRequest(
        repo_dir=req.repo_dir, cmd=claude_argv(role), agent="claude-code", egress="api",
        base_ref=req.base, capture=True, run_id=req.run_id, stdin=req.document,
        task_file=req.document, timeout_s=req.timeout_s or role.timeout_s,
        read_only=role.authority == "read-only", budget=req.budget,
    )  # fmt: skip


def run_claude(req: ProviderRequest) -> ProviderReceipt:
    """Run `claude -p` for `req.role`; the output is its `result` (bounded)."""
    out = agent_run(claude_request(req))
    parsed = parse_result(stdout_of(out))
    return receipt(req.role, req.loaded, out, (parsed.result or "").encode(), parsed.usage)


def parse_result(data: bytes) -> ClaudeResult:
    """The `result` text and integer `usage` counts of the one JSON object on stdout (the
    last line that is one, when something else was printed first); nothing on garbage."""
    for line in reversed(data.strip().splitlines() or [b""]):
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if isinstance(obj, dict) and obj.get("type") == "result":
            return _result(obj)
    return ClaudeResult(None, None, True)


def _result(obj: dict[str, object]) -> ClaudeResult:
    text = obj.get("result")
    raw = obj.get("usage")
    usage = None
    if isinstance(raw, dict):
        usage = {k[:64]: v for k, v in raw.items()
                 if isinstance(k, str) and type(v) is int and v >= 0} or None  # fmt: skip
    return ClaudeResult(text if isinstance(text, str) else None, usage,
                        obj.get("is_error") is not False)  # fmt: skip
