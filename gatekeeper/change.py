"""What a candidate changes relative to its base: files, modes, added lines, messages.

Renames are not followed (`--no-renames`): a rename is a deletion plus an
addition, so the whole renamed file is scanned and a protected path moved away
counts as deleted. External diff drivers and textconv are off; a candidate's
`.gitattributes` cannot change what is compared.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from pathlib import Path

from .git import git
from .scan import ScanItem

_HUNK = re.compile(rb"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
_DIFF_FLAGS = ("--no-renames", "--no-ext-diff", "--no-textconv", "--no-color")
MAX_SCAN_BYTES = 64 << 20


@dataclass(frozen=True)
class FileChange:
    status: str  # A, M, D, T
    path: str
    old_mode: str
    new_mode: str
    new_blob: str


@dataclass
class Change:
    base: str
    candidate: str
    files: list[FileChange] = field(default_factory=list)
    messages: list[tuple[str, str]] = field(default_factory=list)  # (commit sha, message)


def _path(raw: bytes) -> str:
    # A label for reports, matching and evidence, which must be valid Unicode: a name
    # that is not UTF-8 is shown with \xNN escapes. Contents are read by blob id.
    return raw.decode("utf-8", "backslashreplace")


def read_change(repo: Path, base: str, candidate: str) -> Change:
    change = Change(base, candidate)
    out = git(repo, "diff-tree", "-r", "-z", "--raw", *_DIFF_FLAGS, base, candidate)
    parts = out.split(b"\0")
    i = 0
    while i + 1 < len(parts) and parts[i].startswith(b":"):
        old_mode, new_mode, _old, new, status = parts[i][1:].decode("ascii").split(" ")
        change.files.append(FileChange(status[0], _path(parts[i + 1]), old_mode, new_mode, new))
        i += 2
    log = git(repo, "log", "--format=%H%x00%B%x00", f"{base}..{candidate}", "--")
    fields = log.split(b"\0")
    for j in range(0, len(fields) - 1, 2):
        sha = fields[j].strip().decode("ascii", "replace")
        if sha:
            change.messages.append((sha, fields[j + 1].decode("utf-8", "replace")))
    return change


def _unquote(raw: bytes) -> bytes:
    if raw.startswith(b'"') and raw.endswith(b'"'):
        return codecs.escape_decode(raw[1:-1])[0]
    return raw


def added_items(repo: Path, change: Change) -> list[ScanItem]:
    """Everything the change adds: whole new files, added lines of modified ones, messages."""
    items: list[ScanItem] = []
    new_files = {f.path for f in change.files if f.status in ("A", "T")}
    for f in change.files:
        if f.path in new_files and f.new_mode != "160000":
            data = git(repo, "cat-file", "blob", f.new_blob)
            text = data.decode("utf-8", "surrogateescape")
            items.append(ScanItem.whole(f.path, text))
    modified = [f.path for f in change.files if f.status == "M" and f.new_mode != "160000"]
    if modified:
        items.extend(_added_lines(repo, change.base, change.candidate))
    for sha, message in change.messages:
        items.append(ScanItem.whole(f"commit:{sha}", message))
    total = sum(len(t) for item in items for _, t in item.lines)
    if total > MAX_SCAN_BYTES:
        from .errors import Blocked

        raise Blocked(f"the change adds {total} bytes; more than oms scans ({MAX_SCAN_BYTES})")
    return items


def _added_lines(repo: Path, base: str, candidate: str) -> list[ScanItem]:
    out = git(repo, "-c", "core.quotePath=false", "diff", "-U0", *_DIFF_FLAGS,
              "--diff-filter=M", base, candidate)  # fmt: skip
    items: list[ScanItem] = []
    path: str | None = None
    lines: list[tuple[int, str]] = []
    number = 0
    for raw in out.split(b"\n"):
        if raw.startswith(b"diff --git "):
            if path is not None:
                items.append(ScanItem(path, lines))
            path, lines = None, []
        elif raw.startswith(b"+++ "):
            target = _unquote(raw[4:])
            path = _path(target[2:] if target.startswith(b"b/") else target)
        elif raw.startswith(b"@@"):
            m = _HUNK.match(raw)
            number = int(m.group(1)) if m else 0
        elif raw.startswith(b"+") and path is not None:
            lines.append((number, raw[1:].decode("utf-8", "surrogateescape")))
            number += 1
        elif raw.startswith(b"Binary files ") and path is None:
            pass
    if path is not None:
        items.append(ScanItem(path, lines))
    return items
