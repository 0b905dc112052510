"""One hook call answered: the event's check, then the answer in the client's form.

- PreToolUse, a file tool: a protected path, the state root, a secret in the new text;
  refused with `permissionDecision: deny`; a call that passes is answered `allow` for
  Claude Code inside an unattended worker's oms agent sandbox only (silent elsewhere,
  and always on the host). A read tool: a secret-looking path or glob, the
  state root, a secret in the file (checks.check_read); the same. The shell tool: bash.py's
  table; the same.
- PostToolUse, a file tool: a secret in the file now on disk; `decision: block` (feedback).
- Stop, SubagentStop: the result gate (stop.py); `decision: block` keeps the agent working.
- SessionStart: no check; `additionalContext` saying oms is active, or, in a repository
  never `oms init`ed, a `systemMessage` telling the user so (the gate does not run there).

Fail closed: a check that cannot run refuses in the event's own form with the one-line
reason; an unknown event exits 2 with the reason on stderr.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gatekeeper.integrations.hooks import protocol
from gatekeeper.integrations.hooks.checks import (
    Session,
    check_command,
    check_read,
    check_writes,
    check_written,
    set_up,
)
from gatekeeper.integrations.hooks.protocol import HookAnswer, HookInput
from gatekeeper.integrations.hooks.reads import PlannedRead
from gatekeeper.integrations.hooks.writes import PlannedWrite, shell_command

ACTIVE = (
    "oms is active in this repository. Writes that hold a secret or touch a protected path "
    "(oms.toml, CI config, agent config such as .claude/ or AGENTS.md, .git/) are denied; "
    "commands that read oms' state, approve transfers, force-push or change git hooks are "
    "denied. Commit your work: before you stop, oms' result gate judges your commits and "
    "tells you what to fix. Approvals are for the human at their own terminal."
)
ACTIVE_INSIDE = (
    "oms is active: you run inside an oms agent sandbox. Writes that hold a secret or touch "
    "a protected path are denied; the result gate judges your commits outside when the run "
    "ends. Use the oms MCP tools to ask for anything that needs the human."
)
INSIDE_ALLOW = "oms checked this call inside its agent sandbox"
NOT_SET_UP = (
    "oms is installed but this repository is not set up: reads and writes of secrets and "
    "protected paths are still denied, but no result gate judges the agent's commits. Run "
    "`oms init` here to set it up."
)


@dataclass(frozen=True)
class ClientSpec:
    """What differs between the clients: which tools write or read files or run shell
    commands."""

    name: protocol.Client
    shell_tools: frozenset[str]
    # The writes a tool call makes; None for a tool that is not a file tool.
    writes: Callable[[str, object], tuple[PlannedWrite, ...] | None]
    # The read a tool call makes; None for a tool that does not read files.
    reads: Callable[[str, object], PlannedRead | None]


def _pre_tool_use(spec: ClientSpec, hook: HookInput, session: Session) -> HookAnswer:
    writes = spec.writes(hook.tool_name, hook.tool_input)
    if writes:
        reason = check_writes(session, writes)
        if reason is not None:
            return protocol.deny_tool(reason)
    read = spec.reads(hook.tool_name, hook.tool_input)
    if read is not None:
        reason = check_read(session, read)
        if reason is not None:
            return protocol.deny_tool(reason)
    if hook.tool_name in spec.shell_tools:
        reason = check_command(session, shell_command(hook.tool_input))
        if reason is not None:
            return protocol.deny_tool(reason)
    if spec.name == "claude-code" and session.in_sandbox and session.may_allow:
        # Inside the sandbox the CLI's own prompt protects nothing oms does not: oms decides.
        return protocol.allow_tool(INSIDE_ALLOW)
    return protocol.allow()  # on the host: silent, never an allow


def _post_tool_use(spec: ClientSpec, hook: HookInput, session: Session) -> HookAnswer:
    writes = spec.writes(hook.tool_name, hook.tool_input)
    paths = [w.path for w in writes or () if not w.deleted]
    reason = check_written(session, paths) if paths else None
    return protocol.allow() if reason is None else protocol.block(reason)


def _stop(spec: ClientSpec, hook: HookInput, session: Session) -> HookAnswer:
    # The result gate, imported where it runs: a tool call's hook never loads it.
    from gatekeeper.integrations.hooks.stop import stop_decision

    outcome = stop_decision(session, hook.session_id, hook.stop_hook_active)
    if outcome.block:
        return protocol.block(outcome.reason, outcome.output)
    return protocol.stop_allowed(outcome.note)


def _session_start(spec: ClientSpec, hook: HookInput, session: Session) -> HookAnswer:
    if session.in_sandbox:
        return protocol.context("SessionStart", ACTIVE_INSIDE)
    if session.top is None:
        return protocol.allow()  # not a repository: nothing of oms' to say
    if not set_up(session):
        return protocol.stop_allowed(NOT_SET_UP)  # to the user, not an instruction to the agent
    return protocol.context("SessionStart", ACTIVE)


HANDLERS: dict[str, Callable[[ClientSpec, HookInput, Session], HookAnswer]] = {
    "PreToolUse": _pre_tool_use,
    "PostToolUse": _post_tool_use,
    "Stop": _stop,
    "SubagentStop": _stop,
    "SessionStart": _session_start,
}


def refusal(event: str, reason: str) -> HookAnswer:
    """The event's own way to refuse, for a check that could not run."""
    if event == "PreToolUse":
        return protocol.deny_tool(reason)
    if event in ("PostToolUse", "Stop", "SubagentStop"):
        return protocol.block(reason)
    return protocol.blocking_error(reason)
