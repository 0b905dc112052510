"""What a candidate delivers beyond its base: the net file changes, and all a push sends.

Two views of one change. `files` is the net difference base → candidate (what
protected paths are judged on). The scan set is what `git push` of the candidate
would send beyond the base: every commit in `base..candidate` (merges and root
commits included, so a merged unrelated history is scanned whole), each commit's
raw message bytes and its other raw headers (author, committer, any other header;
not the tree and parent ids), every path name and symlink target, and every new or changed blob of
every commit compared with each of its parents. A secret added in one commit and
deleted in the next is therefore scanned.

Everything comes from the object database by explicit id (`rev-list`, `diff-tree`
on commit pairs, `cat-file --batch-check` for sizes before anything is read,
`cat-file --batch`): no textconv, no attributes, no binary detection, no rename
guessing. A modified blob is scanned whole; a finding is kept when it touches a
line that none of the blobs it replaced holds, so that a key body written between
BEGIN/END lines the base already had is found, and a secret the base already had
is not reported again.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from gatekeeper.errors import Blocked
from gatekeeper.repo.git import GitError, git, read_objects
from gatekeeper.scan import Finding, ScanItem
from gatekeeper.scan.decode import text_views

MAX_SCAN_BYTES = 64 << 20  # new blobs and commit objects read for one change
MAX_OLD_BYTES = 64 << 20  # replaced blobs read to tell added lines from kept ones
_DIFF_FLAGS = ("--no-renames", "--no-ext-diff", "--no-textconv")
_SHA = re.compile(rb"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")
_NULL = re.compile(r"^0+$")
_CONTENT_MODES = ("100644", "100755", "120000")  # blobs: regular, executable, symlink
PATHS_LABEL = "(path names)"


class ChangeTooLarge(Blocked):
    """The change holds more bytes than oms scans: refused before any of it is read."""


@dataclass(frozen=True)
class FileChange:
    status: str  # A, M, D, T
    path: str
    old_mode: str
    new_mode: str
    new_blob: str
    old_blob: str = ""


@dataclass(frozen=True)
class Touched:
    """One path a commit gives new content, and what it replaced in each parent."""

    commit: str
    path: str
    mode: str
    blob: str
    olds: tuple[tuple[str, str], ...]  # (mode, object id) per parent; empty when added


@dataclass(frozen=True)
class Change:
    base: str
    candidate: str
    files: tuple[FileChange, ...] = ()
    commits: tuple[str, ...] = ()
    touched: tuple[Touched, ...] = ()


def _path(raw: bytes) -> str:
    # A label for reports, matching and evidence, which must be valid Unicode: a name
    # that is not UTF-8 is shown with \xNN escapes. Contents are read by blob id.
    return raw.decode("utf-8", "backslashreplace")


def _raw_entries(out: bytes) -> Iterable[tuple[bytes, FileChange | None]]:
    """(header, None) for a commit header line, ('', change) for each raw entry."""
    parts = out.split(b"\0")
    i = 0
    while i < len(parts):
        part = parts[i]
        if part.startswith(b":") and i + 1 < len(parts):
            old_mode, new_mode, old, new, status = part[1:].decode("ascii").split(" ")
            yield b"", FileChange(status[0], _path(parts[i + 1]), old_mode, new_mode, new, old)
            i += 2
        else:
            if part:
                yield part, None
            i += 1


def read_change(repo: Path, base: str, candidate: str) -> Change:
    """The net file changes and every commit, path and blob of `base..candidate`."""
    net = git(repo, "diff-tree", "-r", "-z", "--raw", *_DIFF_FLAGS, base, candidate)
    files = tuple(f for _, f in _raw_entries(net) if f is not None)
    listing = git(repo, "rev-list", "--parents", f"{base}..{candidate}", "--")
    parents: dict[str, list[str]] = {}
    for line in listing.decode("ascii").splitlines():
        sha, *ps = line.split()
        parents[sha] = ps
    return Change(base, candidate, files, tuple(parents), _touched(repo, parents))


def read_commits(repo: Path, revs: Sequence[str]) -> Change:
    """Every commit `rev-list REVS` lists (full SHAs or `A..B` of SHAs), each compared with
    its parents (a root commit with the empty tree); no net file changes."""
    listing = git(repo, "rev-list", "--parents", *revs, "--")
    parents: dict[str, list[str]] = {}
    for line in listing.decode("ascii").splitlines():
        sha, *ps = line.split()
        parents[sha] = ps
    return Change("", "", (), tuple(parents), _touched(repo, parents))


def _touched(repo: Path, parents: Mapping[str, Sequence[str]]) -> tuple[Touched, ...]:
    # One diff-tree line per (commit, parent) pair, with --always so that every pair
    # gives a header and the groups can be told apart; a root commit is diffed with
    # the empty tree (--root).
    pairs = [(c, p) for c, ps in parents.items() for p in ps or [""]]
    if not pairs:
        return ()
    request = "".join(f"{c} {p}\n" if p else f"{c}\n" for c, p in pairs).encode()
    out = git(repo, "diff-tree", "-r", "-z", "--raw", "--root", "--always", "--stdin",
              *_DIFF_FLAGS, input=request)  # fmt: skip
    groups: list[list[FileChange]] = []
    for header, entry in _raw_entries(out):
        if entry is None:
            if not _SHA.match(header):
                raise GitError(f"git diff-tree: unexpected line {header[:60]!r}")
            groups.append([])
        elif groups:
            groups[-1].append(entry)
    if len(groups) != len(pairs):
        raise GitError("git diff-tree: one answer per commit pair expected")
    by_commit: dict[str, list[list[FileChange]]] = {}
    for (commit, _), group in zip(pairs, groups, strict=True):
        by_commit.setdefault(commit, []).append(group)
    found: list[Touched] = []
    for commit, per_parent in by_commit.items():
        found.extend(_new_in_commit(commit, per_parent))
    return tuple(found)


def _new_in_commit(commit: str, per_parent: list[list[FileChange]]) -> Iterable[Touched]:
    """Paths whose content differs from every parent's (a merge taking one side's
    version adds nothing new there), with what each parent had."""
    maps = [{f.path: f for f in group if f.status != "D"} for group in per_parent]
    for path, first in maps[0].items():
        if all(path in m for m in maps[1:]):
            olds = tuple(
                (m[path].old_mode, m[path].old_blob)
                for m in maps
                if not _NULL.match(m[path].old_blob)
            )
            yield Touched(commit, path, first.new_mode, first.new_blob, olds)


# -- reading objects ---------------------------------------------------------------------


def _sizes(repo: Path, ids: Iterable[str]) -> dict[str, int]:
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {}
    out = git(repo, "cat-file", "--batch-check", input="".join(f"{i}\n" for i in wanted).encode())
    sizes: dict[str, int] = {}
    for line in out.decode("ascii", "replace").splitlines():
        fields = line.split()
        if len(fields) == 3:
            sizes[fields[0]] = int(fields[2])
    return sizes


def _read(repo: Path, ids: Sequence[str]) -> dict[str, bytes]:
    """The bytes of objects whose sizes were checked already."""
    return {obj: data for obj, (_, data) in read_objects(repo, ids).items()}


def _commit_parts(raw: bytes) -> tuple[bytes, bytes]:
    """(headers but the tree and parent lines, which are ids; message) of a commit object."""
    head, _, message = raw.partition(b"\n\n")
    kept = [line for line in head.split(b"\n") if not line.startswith((b"tree ", b"parent "))]
    return b"\n".join(kept), message


# -- the scan set ------------------------------------------------------------------------


@dataclass(frozen=True)
class ScanSet:
    """Items to scan, and for items holding a modified blob the line numbers it adds."""

    items: tuple[ScanItem, ...]
    added: Mapping[str, frozenset[int]] = field(default_factory=dict)
    also: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # same blob, other paths

    def new_findings(self, findings: Iterable[Finding]) -> list[Finding]:
        """The findings that touch a line the change adds, at every path of their blob."""
        kept = []
        for f in findings:
            lines = self.added.get(f.file)
            span = range(f.line, max(f.line, f.end_line or f.line) + 1)
            if lines is None or any(n in lines for n in span):
                kept.append(f)
                kept.extend(replace(f, file=other) for other in self.also.get(f.file, ()))
        return kept


@dataclass
class _Blob:
    label: str
    whole: bool  # added (no blob replaced) somewhere: every line counts
    olds: set[str] = field(default_factory=set)
    also: list[str] = field(default_factory=list)  # further paths with this content


def _blobs(change: Change) -> dict[str, _Blob]:
    """New content by blob id (read and scanned once), labelled by a unique path."""
    blobs: dict[str, _Blob] = {}
    used: set[str] = set()
    for t in change.touched:
        if t.mode not in _CONTENT_MODES:
            continue  # a gitlink names a commit elsewhere: its path is scanned, not content
        olds = {obj for mode, obj in t.olds if mode in _CONTENT_MODES}
        label = t.path if t.path not in used else f"{t.path}@{t.commit[:12]}"
        b = blobs.get(t.blob)
        if b is None:
            b = blobs[t.blob] = _Blob(label, whole=not olds)
            used.add(label)
        elif t.path != b.label and t.path not in b.also and label not in used:
            b.also.append(label)
            used.add(label)
        b.whole = b.whole or not olds
        b.olds |= olds
    return blobs


def _olds_wanted(blobs: Mapping[str, _Blob]) -> list[str]:
    """The blobs the modified ones replaced: read to tell added lines from kept ones."""
    return sorted({o for b in blobs.values() if not b.whole for o in b.olds})


def _olds_to_read(
    blobs: Mapping[str, _Blob], wanted: list[str], sizes: Mapping[str, int]
) -> list[str]:
    """Replaced blobs to read, within the budget; a blob whose old versions are not
    read is treated as added whole (more findings, never fewer)."""
    total = 0
    kept = set()
    for obj in wanted:
        total += sizes.get(obj, MAX_OLD_BYTES + 1)
        if total > MAX_OLD_BYTES:
            break
        kept.add(obj)
    for b in blobs.values():
        if not b.olds <= kept:
            b.whole = True
    return sorted(kept)


def scan_set(repo: Path, change: Change) -> ScanSet:
    """Everything the candidate would deliver beyond its base, as scan items."""
    blobs = _blobs(change)
    new_ids = [*change.commits, *blobs]
    olds = _olds_wanted(blobs)
    sizes = _sizes(repo, [*new_ids, *olds])  # one batch-check for both (a git run less)
    total = sum(sizes.get(i, 0) for i in new_ids)
    if total > MAX_SCAN_BYTES:
        raise ChangeTooLarge(
            f"the change holds {total} bytes; more than oms scans ({MAX_SCAN_BYTES}):"
            " split it into smaller candidates"
        )
    old_ids = _olds_to_read(blobs, olds, sizes)
    data = _read(repo, [*new_ids, *old_ids])
    items: list[ScanItem] = []
    added: dict[str, frozenset[int]] = {}
    also: dict[str, tuple[str, ...]] = {}
    for obj, b in blobs.items():
        old_lines: set[str] = set()
        if not b.whole:
            for old in b.olds:
                for view in text_views(data[old]):
                    old_lines.update(view.split("\n"))
        for n, view in enumerate(text_views(data[obj])):
            suffix = " (as bytes)" if n else ""
            label = b.label + suffix
            item = ScanItem.whole(label, view)
            items.append(item)
            if b.also:
                also[label] = tuple(other + suffix for other in b.also)
            if not b.whole:
                added[label] = frozenset(i for i, t in item.lines if t not in old_lines)
    names = dict.fromkeys(t.path for t in change.touched)
    if names:
        items.append(ScanItem.whole(PATHS_LABEL, "\n".join(names)))
    for sha in change.commits:
        headers, message = _commit_parts(data[sha])
        for label, part in ((f"commit:{sha}", message), (f"commit:{sha} (headers)", headers)):
            for n, view in enumerate(text_views(part)):
                items.append(ScanItem.whole(label + (" (as bytes)" if n else ""), view))
    return ScanSet(tuple(items), added, also)
