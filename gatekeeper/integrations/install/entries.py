"""What `oms install` writes, client-neutral: the MCP server entry, the hooks with their
time-outs, and how an entry is recognised as oms' own (so uninstall removes only those)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath

from policy import Policy

SERVER_NAME = "oms"
# How long a client waits for `oms mcp` to answer initialize and tools/list (Codex's
# default is 10 s; oms' first start imports pydantic and the MCP SDK).
STARTUP_TIMEOUT_S = 30
# Headroom over the checks and both scanners: staging the scratch copy, probing the
# sandbox, signing the verdict.
GATE_MARGIN_S = 120
MIN_GATE_BUDGET_S = 600
SESSION_START_TIMEOUT_S = 30


@dataclass(frozen=True)
class McpServer:
    """`oms mcp` as a client starts it: no `--repo` (it serves the repository it is
    started in, DESIGN's contract), the state root passed on when oms' own is set."""

    command: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Hook:
    """One hook event: the client's event name, its matcher (None: every occurrence) and
    the time-out the client enforces, in seconds."""

    event: str
    matcher: str | None
    timeout_s: int


def mcp_server(prefix: Sequence[str]) -> McpServer:
    home = os.environ.get("OMS_HOME")
    env = (("OMS_HOME", home),) if home else ()
    return McpServer(prefix[0], (*prefix[1:], "mcp"), env)


def gate_budget_s(policy: Policy) -> int:
    """The longest the result gate may take under `policy`: its checks run one after the
    other, then both scanners; at least ten minutes."""
    checks = sum(check.timeout_s for check in policy.checks)
    return max(MIN_GATE_BUDGET_S, checks + 2 * policy.scanners.timeout_s + GATE_MARGIN_S)


def scan_budget_s(policy: Policy) -> int:
    """A write or command hook runs both scanners on one payload."""
    return 2 * policy.scanners.timeout_s + 60


def hooks_for(client: str, policy: Policy) -> tuple[Hook, ...]:
    """The events each client's docs define, with the hooks' own matchers (the ones `oms
    agent run` writes too): before a file tool or the shell, after a file tool."""
    # Imported here: the hooks package (the checks, the result gate behind Stop) is for
    # writing hooks, not for `oms mcp config`, which reads this module's server entry.
    from gatekeeper.integrations.hooks import claude, codex

    kind = claude if client == "claude-code" else codex
    scan, gate = scan_budget_s(policy), gate_budget_s(policy)
    return (
        Hook("PreToolUse", kind.PRE_MATCHER, scan),
        Hook("PostToolUse", kind.WRITE_MATCHER, scan),
        Hook("Stop", None, gate),
        Hook("SubagentStop", None, gate),
        Hook("SessionStart", None, SESSION_START_TIMEOUT_S),
    )


def hooks_summary(hooks: Sequence[Hook]) -> str:
    """The hooks as `oms install` names them, matchers included (so a dry run shows which
    tools each event watches)."""
    return "hooks " + ", ".join(
        h.event if h.matcher is None else f"{h.event} ({h.matcher})" for h in hooks
    )


def is_oms_program(argv: Sequence[str]) -> bool:
    """An argv that starts an oms, wherever it is installed: a program named `oms`, or a
    Python running `-m gatekeeper` (the fallback of `oms_command()`)."""
    if not argv:
        return False
    if len(argv) == 1:
        return PurePath(argv[0]).name == "oms"
    return list(argv[-2:]) == ["-m", "gatekeeper"]


def is_oms_hook(command: object, client: str) -> bool:
    """A hook command oms installed: an oms program, then `hook CLIENT EVENT`."""
    if not isinstance(command, str):
        return False
    try:
        argv = shlex.split(command)
    except ValueError:
        return False
    return len(argv) >= 4 and argv[-3:-1] == ["hook", client] and is_oms_program(argv[:-3])


def is_oms_server(entry: object) -> bool:
    """An MCP server entry that starts `oms mcp` (the `oms` name alone is not enough: a
    user's own server under that name is left alone)."""
    if not isinstance(entry, Mapping):
        return False
    command, args = entry.get("command"), entry.get("args", [])
    if not isinstance(command, str) or isinstance(args, str) or not isinstance(args, Sequence):
        return False
    argv = [command, *(str(a) for a in args)]
    return "mcp" in argv and is_oms_program(argv[: argv.index("mcp")])
