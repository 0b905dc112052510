"""The hook entries that wire `oms hook` into each client's config, as data.

Claude Code (settings.json `hooks`, https://code.claude.com/docs/en/hooks): per event a
list of `{matcher, hooks: [{type: "command", command, timeout}]}`; `timeout` in seconds;
the command runs in a shell. Codex (config.toml `[[hooks.EVENT]]` with
`[[hooks.EVENT.hooks]]`, https://developers.openai.com/codex/hooks): the same shape,
`timeout_sec` for the time-out. The `oms mcp`/install helper and `oms agent run` both write
these.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Any

from gatekeeper.integrations.hooks import claude, codex

# Seconds: a PreToolUse scan is both scanners over one write; Stop runs the whole gate.
TOOL_TIMEOUT_S = 120
SESSION_TIMEOUT_S = 30


def hook_command(oms_argv: Sequence[str], client: str, event: str) -> str:
    """The shell command line the client runs for `event`: `<oms> hook CLIENT EVENT`."""
    return shlex.join([*oms_argv, "hook", client, event])


def _entries(
    oms_argv: Sequence[str], client: str, pre: str, post: str, stop_timeout_s: int, key: str
) -> dict[str, list[dict[str, Any]]]:
    def one(event: str, timeout: int, matcher: str | None = None) -> dict[str, Any]:
        handler = {"type": "command", "command": hook_command(oms_argv, client, event),
                   key: timeout}  # fmt: skip
        group: dict[str, Any] = {} if matcher is None else {"matcher": matcher}
        group["hooks"] = [handler]
        return group

    return {
        "PreToolUse": [one("PreToolUse", TOOL_TIMEOUT_S, pre)],
        "PostToolUse": [one("PostToolUse", TOOL_TIMEOUT_S, post)],
        "Stop": [one("Stop", stop_timeout_s)],
        "SubagentStop": [one("SubagentStop", stop_timeout_s)],
        "SessionStart": [one("SessionStart", SESSION_TIMEOUT_S)],
    }


def claude_hooks(oms_argv: Sequence[str], stop_timeout_s: int) -> dict[str, Any]:
    """The value of Claude Code's settings.json `hooks` for oms."""
    return _entries(oms_argv, "claude-code", claude.PRE_MATCHER, claude.WRITE_MATCHER,
                    stop_timeout_s, "timeout")  # fmt: skip


def codex_hooks(oms_argv: Sequence[str], stop_timeout_s: int) -> dict[str, Any]:
    """The value of Codex's config.toml `hooks` table for oms."""
    return _entries(oms_argv, "codex", codex.PRE_MATCHER, codex.WRITE_MATCHER,
                    stop_timeout_s, "timeout_sec")  # fmt: skip
