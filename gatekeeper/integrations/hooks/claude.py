"""Claude Code's side of the hooks: its file tools and its shell tool.

Tool inputs as the hooks reference gives them (https://code.claude.com/docs/en/hooks):
Write `file_path`+`content`, Edit `file_path`+`new_string`, MultiEdit
`file_path`+`edits[].new_string`, NotebookEdit `notebook_path`+`new_source`, Bash `command`;
Read `file_path`, Grep `path`+`glob`, Glob `path`+`pattern`.
"""

from __future__ import annotations

from gatekeeper.integrations.hooks.events import ClientSpec
from gatekeeper.integrations.hooks.reads import CLAUDE_READERS, PlannedRead, claude_reads
from gatekeeper.integrations.hooks.writes import CLAUDE_WRITERS, PlannedWrite, claude_writes

SHELL_TOOLS = frozenset({"Bash"})
# The matchers oms installs (regular expressions over the tool name).
WRITE_MATCHER = "Write|Edit|MultiEdit|NotebookEdit"
PRE_MATCHER = f"{WRITE_MATCHER}|Bash|Read|Grep|Glob"


def _writes(tool_name: str, tool_input: object) -> tuple[PlannedWrite, ...] | None:
    return claude_writes(tool_name, tool_input) if tool_name in CLAUDE_WRITERS else None


def _reads(tool_name: str, tool_input: object) -> PlannedRead | None:
    return claude_reads(tool_name, tool_input) if tool_name in CLAUDE_READERS else None


CLAUDE = ClientSpec("claude-code", SHELL_TOOLS, _writes, _reads)
