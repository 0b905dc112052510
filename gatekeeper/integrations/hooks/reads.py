"""What a file-reading tool call would read: Claude Code's Read (`file_path`), Grep (`path`,
`glob`) and Glob (`path`, `pattern`). Codex has no read tool: it reads with its shell,
which the shell table judges (bash.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper.integrations.hooks.protocol import HookInputError

CLAUDE_READERS = frozenset({"Read", "Grep", "Glob"})


@dataclass(frozen=True)
class PlannedRead:
    """A file or directory a tool reads (`path`, "" for the cwd), the glob it applies, and
    whether it reads the file's content (Glob lists names only)."""

    path: str
    glob: str = ""
    content: bool = True


def _text(tool_input: Mapping[str, Any], key: str) -> str:
    value = tool_input.get(key) or ""
    if not isinstance(value, str):
        raise HookInputError(f"the tool input's {key} is not text")
    return value


def claude_reads(tool_name: str, tool_input: Any) -> PlannedRead:
    """The read a Claude Code Read, Grep or Glob call makes (hooks reference inputs)."""
    if not isinstance(tool_input, Mapping):
        raise HookInputError(f"the {tool_name} tool input is not an object")
    if tool_name == "Read":
        path = _text(tool_input, "file_path")
        if not path:
            raise HookInputError("the Read tool input names no file")
        return PlannedRead(path)
    if tool_name == "Grep":
        return PlannedRead(_text(tool_input, "path"), _text(tool_input, "glob"))
    return PlannedRead(_text(tool_input, "path"), _text(tool_input, "pattern"), content=False)
