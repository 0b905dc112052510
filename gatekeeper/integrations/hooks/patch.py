"""Codex's `apply_patch` read exactly as Codex 0.171.0 reads it, so that the hook judges the
files Codex will write (docs/hooks.md, "Codex's apply_patch").

The grammar and its leniencies are those of openai/codex `codex-rs/apply-patch`
(`parser.rs`, `invocation.rs`), read for the pinned release and checked against its binary
(tests/e2e/test_codex_patch.py):

- the text is trimmed (Rust `str::trim`: Unicode White_Space) and split into lines, a CR
  before each LF dropped; its first line, trimmed, is `*** Begin Patch` and its last,
  trimmed, `*** End Patch` — or, failing that, the whole is wrapped in `<<EOF`, `<<'EOF'`
  or `<<"EOF"` … `…EOF` (at least 4 lines) around such a patch;
- a hunk header is its line trimmed: `*** Add File: P`, `*** Delete File: P`,
  `*** Update File: P` (P is the rest, verbatim: a leading space is part of the name);
- `*** Move to: P` must be the line right after an Update header, matched with its
  trailing whitespace trimmed but not its leading;
- an Add hunk takes every following line that starts with `+`; an Update hunk takes
  `@@`/`@@ ctx` chunks of ` `/`+`/`-`/empty lines (the first chunk may omit `@@`), blank
  lines between chunks, an optional `*** End of File`, and ends at a line that starts
  (untrimmed) with a hunk header;
- a shell script is read as a patch only as `[cd DIR &&] apply_patch|applypatch <<DELIM`
  with a heredoc body; DIR moves where the paths land.

The openai/codex sources differ from release to release in these leniencies; where the
stored source and the 0.171.0 binary disagree (trailing whitespace on `*** Move to:`,
`*** End of File` and `@@`; which `*` lines end an Update) this follows the binary.
Anything Codex would reject is refused here too (Codex would not apply it either), and so
is a body line that only whitespace keeps from being a header: a patch the two could read
differently is denied, never allowed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

from gatekeeper.integrations.hooks.protocol import HookInputError

# Rust's char::is_whitespace (the Unicode White_Space property), which `str::trim` strips;
# Python's str.strip() also strips U+001C..U+001F, which Rust keeps.
RUST_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
BEGIN, END = "*** Begin Patch", "*** End Patch"
ADD, DELETE, UPDATE = "*** Add File: ", "*** Delete File: ", "*** Update File: "
MOVE = "*** Move to: "
END_OF_FILE = "*** End of File"
_HEADERS = (ADD, DELETE, UPDATE)
_HEREDOC_OPENERS = ("<<EOF", "<<'EOF'", '<<"EOF"')
APPLY_PATCH_NAMES = ("apply_patch", "applypatch")


class PatchError(HookInputError):
    """A patch Codex would refuse to apply; the hook refuses it too."""


@dataclass(frozen=True)
class Hunk:
    """One file operation: its path as written (and a Move target), and the lines it adds
    with their line number in the text the tool was given."""

    kind: Literal["add", "delete", "update"]
    path: str
    move_to: str | None = None
    added: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class _Lines:
    """The patch's lines and the text line number of the first."""

    lines: tuple[str, ...]
    first: int

    def number(self, index: int) -> int:
        return self.first + index


def _split(text: str, first_line: int) -> _Lines:
    """`text.trim().lines()`, numbered by their line in `text` (which starts at line
    `first_line`)."""
    head = len(text) - len(text.lstrip(RUST_WHITESPACE))
    body = text.strip(RUST_WHITESPACE)
    pieces = body.split("\n") if body else []
    lines = tuple(p[:-1] if p.endswith("\r") and i < len(pieces) - 1 else p
                  for i, p in enumerate(pieces))  # fmt: skip
    return _Lines(lines, first_line + text[:head].count("\n"))


def _boundaries(src: _Lines) -> _Lines:
    """The hunk lines inside `*** Begin Patch` … `*** End Patch` (or the heredoc-wrapped
    form Codex accepts for models that send `<<'EOF'` literally)."""
    try:
        return _strict_boundaries(src)
    except PatchError:
        lines = src.lines
        if len(lines) < 4 or lines[0] not in _HEREDOC_OPENERS or not lines[-1].endswith("EOF"):
            raise
        return _strict_boundaries(_Lines(lines[1:-1], src.first + 1))


def _strict_boundaries(src: _Lines) -> _Lines:
    lines = src.lines
    if not lines or lines[0].strip(RUST_WHITESPACE) != BEGIN:
        raise PatchError("not a patch Codex applies: its first line is not '*** Begin Patch'")
    if len(lines) < 2 or lines[-1].strip(RUST_WHITESPACE) != END:
        raise PatchError("not a patch Codex applies: its last line is not '*** End Patch'")
    return _Lines(lines[1:-1], src.first + 1)


def parse_patch(text: str, first_line: int = 1) -> tuple[Hunk, ...]:
    """The hunks of an apply_patch text, as Codex parses it (module docstring); PatchError
    for a text Codex would refuse."""
    src = _boundaries(_split(text, first_line))
    hunks: list[Hunk] = []
    at = 0
    while at < len(src.lines):
        hunk, used = _hunk(src, at)
        _no_hidden_header(src, at + 1 + (hunk.move_to is not None), at + used)
        hunks.append(hunk)
        at += used
    return tuple(hunks)


def _no_hidden_header(src: _Lines, start: int, end: int) -> None:
    """Refuse a body line that reads as a file header once trimmed but that the grammar
    takes as text (` *** Add File: x` as a context line): should Codex ever read it
    otherwise, the hook would judge the wrong files."""
    for i in range(start, end):
        if src.lines[i].strip(RUST_WHITESPACE).startswith((*_HEADERS, MOVE)):
            raise PatchError(f"oms does not apply this patch: line {src.number(i)} reads "
                             "like a file header inside a change; remove its indentation "
                             "or split the change")  # fmt: skip


def _hunk(src: _Lines, at: int) -> tuple[Hunk, int]:
    header = src.lines[at].strip(RUST_WHITESPACE)
    if header.startswith(ADD):
        added = []
        for i in range(at + 1, len(src.lines)):
            if not src.lines[i].startswith("+"):
                break
            added.append((src.number(i), src.lines[i][1:]))
        return Hunk("add", header[len(ADD) :], None, tuple(added)), 1 + len(added)
    if header.startswith(DELETE):
        return Hunk("delete", header[len(DELETE) :]), 1
    if header.startswith(UPDATE):
        return _update(src, at, header[len(UPDATE) :])
    raise PatchError(f"not a patch Codex applies: line {src.number(at)} is not a valid hunk "
                     "header (*** Add File:, *** Delete File:, *** Update File:)")  # fmt: skip


def _update(src: _Lines, at: int, path: str) -> tuple[Hunk, int]:
    i = at + 1
    move_to = None
    if i < len(src.lines) and src.lines[i].rstrip(RUST_WHITESPACE).startswith(MOVE):
        move_to, i = src.lines[i].rstrip(RUST_WHITESPACE)[len(MOVE) :], i + 1
    added: list[tuple[int, str]] = []
    chunks = 0
    while i < len(src.lines):
        line = src.lines[i]
        if not line.strip(RUST_WHITESPACE):
            i += 1  # blank lines between chunks
        elif line.startswith(_HEADERS):
            break  # the next hunk
        else:
            i = _chunk(src, i, first=chunks == 0, added=added)
            chunks += 1
    if chunks == 0:
        raise PatchError(f"not a patch Codex applies: the update of line {src.number(at)} "
                         "has no change")  # fmt: skip
    return Hunk("update", path, move_to, tuple(added)), i - at


def _chunk(src: _Lines, at: int, *, first: bool, added: list[tuple[int, str]]) -> int:
    """One `@@` chunk from line `at`; the index after it. Its `+` lines go to `added`."""
    line = src.lines[at]
    start = at + 1 if line.rstrip(RUST_WHITESPACE) == "@@" or line.startswith("@@ ") else at
    if start == at and not first:
        raise PatchError(f"not a patch Codex applies: line {src.number(at)} does not start "
                         "a change with @@")  # fmt: skip
    i, taken = start, 0
    while i < len(src.lines):
        line = src.lines[i]
        if line.rstrip(RUST_WHITESPACE) == END_OF_FILE:
            i += 1 if taken else 0
            break
        if line[:1] not in ("", " ", "+", "-"):
            break
        if line[:1] == "+":
            added.append((src.number(i), line[1:]))
        i, taken = i + 1, taken + 1
    if taken == 0:
        raise PatchError(f"not a patch Codex applies: the change at line {src.number(at)} "
                         "has no lines")  # fmt: skip
    return i


# -- a patch inside a shell command ---------------------------------------------------------

# `<<DELIM`, `<<-DELIM`, `<<'DELIM'`, `<<"DELIM"`, `<<\DELIM` (not a `<<<` here-string).
_HEREDOC = re.compile(r"""(?<!<)<<(?!<)(-?)[ \t]*"""
                      r"""(?:'([^'\n]*)'|"([^"\n]*)"|\\?([^\s;&|<>()'"]+))""")  # fmt: skip
_CD = re.compile(r"""\A[ \t\n]*cd[ \t]+(?:'([^'\n]*)'|"([^"\n$`\\]*)"|([^\s;&|<>()'"]+))"""
                 r"""[ \t]*&&\s*(?:apply_patch|applypatch)\b""")  # fmt: skip


@dataclass(frozen=True)
class ShellPatch:
    """A heredoc Codex may apply as a patch: its body, the body's first line number in the
    script, and the `cd` directory the paths are relative to (None: the cwd)."""

    body: str
    first_line: int
    workdir: str | None


def shell_patches(script: str) -> tuple[ShellPatch, ...]:
    """Every heredoc body of a script that names apply_patch (or applypatch). Codex applies
    one only in the exact form of the module docstring; oms reads every heredoc of such a
    script, a superset, so that a form read differently is judged rather than missed."""
    if not any(name in script for name in APPLY_PATCH_NAMES):
        return ()
    cd = _CD.match(script)
    workdir = next((g for g in cd.groups() if g is not None), None) if cd else None
    found = []
    for m in _HEREDOC.finditer(script):  # a body without BEGIN can never parse as a patch
        delim = next(g for g in m.groups()[1:] if g is not None)
        newline = script.find("\n", m.end())
        if newline < 0:
            continue
        body = _heredoc_body(script[newline + 1 :], delim, strip_tabs=m.group(1) == "-")
        if BEGIN in body:
            found.append(ShellPatch(body, script.count("\n", 0, newline) + 2, workdir))
    return tuple(found)


def _heredoc_body(rest: str, delim: str, *, strip_tabs: bool) -> str:
    """The heredoc's text up to its closing line (the whole rest when it has none)."""
    lines = rest.split("\n")
    for i, line in enumerate(lines):
        if (line.lstrip("\t") if strip_tabs else line) == delim:
            return "\n".join(lines[:i])
    return rest


def direct_patch(argv: list[str]) -> str | None:
    """The patch of an argv Codex runs as apply_patch directly (`apply_patch PATCH`)."""
    if len(argv) == 2 and argv[0] in APPLY_PATCH_NAMES:
        return argv[1]
    return None


def joined(workdir: str | None, path: str) -> str:
    """Where a patch path lands, relative to the session's cwd (absolute stays absolute)."""
    return path if workdir is None else os.path.join(workdir, path)
