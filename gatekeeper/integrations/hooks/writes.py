"""What a file-writing tool call would write: the paths and the text, from each client's
tool input (Claude Code's Write, Edit, MultiEdit, NotebookEdit; Codex's apply_patch)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gatekeeper.integrations.hooks.protocol import HookInputError

CLAUDE_WRITERS = frozenset({"Write", "Edit", "MultiEdit", "NotebookEdit"})
CODEX_PATCH = "apply_patch"


@dataclass(frozen=True)
class PlannedWrite:
    """One file a tool call writes (or deletes), and the lines it adds, numbered from 1
    within the text the tool was given."""

    path: str  # as the tool named it: absolute, or relative to the session's cwd
    lines: tuple[tuple[int, str], ...]
    deleted: bool = False


def _text(tool_input: Mapping[str, Any], key: str) -> str:
    value = tool_input.get(key, "")
    if not isinstance(value, str):
        raise HookInputError(f"the tool input's {key} is not text")
    return value


def _numbered(text: str) -> tuple[tuple[int, str], ...]:
    return tuple((i + 1, line) for i, line in enumerate(text.split("\n")))


def claude_writes(tool_name: str, tool_input: Any) -> tuple[PlannedWrite, ...]:
    """The write a Claude Code file tool would make (its tool input as the hooks reference
    gives it: `file_path` with `content`, `new_string` or `edits[].new_string`;
    `notebook_path` with `new_source`)."""
    if not isinstance(tool_input, Mapping):
        raise HookInputError(f"the {tool_name} tool input is not an object")
    if tool_name == "NotebookEdit":
        path, text = _text(tool_input, "notebook_path"), _text(tool_input, "new_source")
    elif tool_name == "Write":
        path, text = _text(tool_input, "file_path"), _text(tool_input, "content")
    elif tool_name == "Edit":
        path, text = _text(tool_input, "file_path"), _text(tool_input, "new_string")
    else:
        path, text = _text(tool_input, "file_path"), _multi_edit_text(tool_input)
    if not path:
        raise HookInputError(f"the {tool_name} tool input names no file")
    return (PlannedWrite(path, _numbered(text)),)


def _multi_edit_text(tool_input: Mapping[str, Any]) -> str:
    edits = tool_input.get("edits", [])
    if not isinstance(edits, list) or not all(isinstance(e, Mapping) for e in edits):
        raise HookInputError("the MultiEdit tool input's edits are not a list of objects")
    return "\n".join(_text(e, "new_string") for e in edits)


def patch_writes(
    patch: str, first_line: int = 1, workdir: str | None = None
) -> tuple[PlannedWrite, ...]:
    """The files a Codex `apply_patch` text writes or removes, read as Codex reads it
    (patch.py), with the lines it adds numbered by their line in the text. A Move writes
    its target (with the update's lines) and removes its source."""
    from gatekeeper.integrations.hooks.patch import joined, parse_patch  # Codex's only

    files: dict[str, tuple[list[tuple[int, str]], bool]] = {}

    def touch(path: str, lines: tuple[tuple[int, str], ...], *, deleted: bool) -> None:
        where = joined(workdir, path)
        files[where] = ([*files.get(where, ([], False))[0], *lines], deleted)

    for hunk in parse_patch(patch, first_line):
        if hunk.move_to is not None:
            touch(hunk.path, (), deleted=True)
            touch(hunk.move_to, hunk.added, deleted=False)
        else:
            touch(hunk.path, hunk.added, deleted=hunk.kind == "delete")
    return tuple(PlannedWrite(p, tuple(ls), d) for p, (ls, d) in files.items())


def codex_writes(tool_name: str, tool_input: Any) -> tuple[PlannedWrite, ...]:
    """The writes of Codex's apply_patch (its patch in `tool_input.command`), or of a shell
    command Codex would run as apply_patch (a heredoc, patch.py); () for any other."""
    from gatekeeper.integrations.hooks.patch import direct_patch, shell_patches

    if not isinstance(tool_input, Mapping):
        raise HookInputError(f"the {tool_name} tool input is not an object")
    command = tool_input.get("command", "")
    if isinstance(command, list):  # older Codex: an argv list
        argv = [c for c in command if isinstance(c, str)]
        direct = direct_patch(argv)
        if direct is not None:
            return patch_writes(direct)
        command = argv[2] if len(argv) == 3 and argv[1] in ("-c", "-lc") else " ".join(argv)
    if not isinstance(command, str):
        raise HookInputError(f"the {tool_name} tool input's command is not text")
    if tool_name == CODEX_PATCH:
        return patch_writes(command)
    return tuple(w for found in shell_patches(command)
                 for w in patch_writes(found.body, found.first_line, found.workdir))  # fmt: skip


def shell_command(tool_input: Any) -> str:
    """The command line of a shell tool call (Claude Code's Bash, Codex's Bash)."""
    if not isinstance(tool_input, Mapping):
        raise HookInputError("the shell tool input is not an object")
    command = tool_input.get("command", "")
    if isinstance(command, list):
        command = " ".join(c for c in command if isinstance(c, str))
    if not isinstance(command, str):
        raise HookInputError("the shell tool input's command is not text")
    return command


# -- where a write lands -------------------------------------------------------------------


def repo_top(cwd: str) -> str | None:
    """The worktree containing `cwd`, found by its `.git` entry (no git is run: the hook
    reads the repository as data), or None."""
    here = os.path.abspath(cwd)
    while True:
        if os.path.lexists(os.path.join(here, ".git")):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent


def spellings(path: str, cwd: str) -> Iterator[str]:
    """`path` made absolute against `cwd`, as written and with symlinks resolved: a link
    into `.git/` or the state root is judged by where it leads."""
    absolute = os.path.normpath(os.path.join(cwd, path))
    yield absolute
    real = os.path.realpath(absolute)
    if real != absolute:
        yield real


def inside(path: str, root: str) -> str | None:
    """`path` relative to `root` when it lies within it, else None."""
    root = os.path.normpath(root)
    if path == root:
        return "."
    prefix = root.rstrip("/") + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None


def roots(top: str) -> Sequence[str]:
    """The repository top as given and resolved (a cwd under a symlinked dir)."""
    real = os.path.realpath(top)
    return (top,) if real == top else (top, real)
