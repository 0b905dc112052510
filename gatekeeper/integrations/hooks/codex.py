"""Codex's side of the hooks: `apply_patch` writes files, `Bash` runs shell commands.

Codex names its shell tool `Bash` in hook input and gives `apply_patch` its patch in
`tool_input.command` (codex-rs/hooks: pre_tool_use.rs; https://developers.openai.com/codex/hooks).
A shell command that pipes a patch into `apply_patch` is judged as that patch too. Codex
has no file-reading tool: it reads with its shell, which the shell table judges.
"""

from __future__ import annotations

from gatekeeper.integrations.hooks.events import ClientSpec
from gatekeeper.integrations.hooks.reads import PlannedRead
from gatekeeper.integrations.hooks.writes import CODEX_PATCH, PlannedWrite, codex_writes

SHELL_TOOLS = frozenset({"Bash"})
# Codex matchers are regular expressions: anchored, so that only these tool names match.
WRITE_MATCHER = f"^{CODEX_PATCH}$"
PRE_MATCHER = f"^(Bash|{CODEX_PATCH})$"


def _writes(tool_name: str, tool_input: object) -> tuple[PlannedWrite, ...] | None:
    if tool_name != CODEX_PATCH and tool_name not in SHELL_TOOLS:
        return None
    return codex_writes(tool_name, tool_input) or None


def _reads(tool_name: str, tool_input: object) -> PlannedRead | None:
    return None


CODEX = ClientSpec("codex", SHELL_TOOLS, _writes, _reads)
