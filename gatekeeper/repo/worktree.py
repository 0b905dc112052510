"""oms' own computation of worktree state: which files are dirty, untracked, ignored.

Never `git status` or `git diff` in the user's repository (those run clean and
smudge filters, textconv and fsmonitor the repository names). git only lists the
index and the ignore rules as data (`ls-files`) and reads objects by id; oms reads
each file through `fsread` and hashes its bytes as a blob (`blob <size>\\0` + bytes,
no filters), so a file is clean only when its exact bytes are the indexed blob.
Entries the index hides (skip-worktree, assume-unchanged) and unmerged entries
count as dirty whatever their bytes.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from gatekeeper.repo.fsread import FileRefused, Missing, RepoFiles
from gatekeeper.repo.git import Repo, git, read_objects, worktree_git

REGULAR_MODES = ("100644", "100755")
LINK_MODE = "120000"
GITLINK_MODE = "160000"
MAX_HASHED_BYTES = 256 << 20  # a worktree file larger than this is reported changed, unread


def _paths(out: bytes) -> list[str]:
    return [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]


@dataclass(frozen=True)
class IndexEntry:
    path: str
    mode: str
    oid: str
    stage: int
    tag: str  # ls-files -t -v: H cached, S skip-worktree, lowercase assume-unchanged, ...

    @property
    def hidden(self) -> bool:
        """The index tells git not to look at this file: its state is not what git says."""
        return self.tag.upper() == "S" or self.tag.islower()


@dataclass(frozen=True)
class TreeEntry:
    mode: str
    oid: str


def index_entries(repo: Repo) -> list[IndexEntry]:
    """Every index entry (one `ls-files -s -t -v` call), stages and flags included."""
    out = worktree_git(repo, "ls-files", "-z", "-s", "-t", "-v")
    entries = []
    for rec in out.split(b"\0"):
        if not rec:
            continue
        meta, _, raw = rec.partition(b"\t")
        tag, mode, oid, stage = meta.decode("ascii").split()
        entries.append(
            IndexEntry(raw.decode("utf-8", "surrogateescape"), mode, oid, int(stage), tag)
        )
    return entries


def tree_entries(repo: Repo, commit: str) -> dict[str, TreeEntry]:
    """path -> (mode, id) of every blob and submodule in `commit`'s tree."""
    out = git(repo.top, "ls-tree", "-r", "-z", "--full-tree", commit)
    tree = {}
    for rec in out.split(b"\0"):
        if rec:
            meta, _, raw = rec.partition(b"\t")
            mode, _kind, oid = meta.decode("ascii").split()
            tree[raw.decode("utf-8", "surrogateescape")] = TreeEntry(mode, oid)
    return tree


def untracked(repo: Repo) -> list[str]:
    """Files in no index entry and not ignored (`.gitignore` read by git as data)."""
    return _paths(worktree_git(repo, "ls-files", "-z", "--others", "--exclude-standard"))


def ignored(repo: Repo) -> list[str]:
    """Ignored files, an ignored directory as one entry ending in '/'."""
    return _paths(worktree_git(repo, "ls-files", "-z", "--others", "--ignored",
                               "--exclude-standard", "--directory"))  # fmt: skip


def blob_id(data: bytes, oid_len: int = 40) -> str:
    """The git object id of `data` as a blob (sha1, or sha256 for 64-digit ids)."""
    h = hashlib.sha256() if oid_len == 64 else hashlib.sha1(usedforsecurity=False)
    h.update(b"blob %d\0" % len(data))
    h.update(data)
    return h.hexdigest()


def read_blobs(repo: Repo, oids: Iterable[str]) -> dict[str, bytes]:
    """The bytes of each blob id (one `cat-file --batch` call)."""
    blobs = {}
    for oid, (kind, data) in read_objects(repo, sorted(set(oids))).items():
        if kind != "blob":
            raise FileRefused(oid, "not a blob in the object database")
        blobs[oid] = data
    return blobs


def worktree_id(files: RepoFiles, path: str, mode: str, oid_len: int) -> str | None:
    """The blob id of what is at `path` in the worktree as an entry of `mode`; None when
    nothing of that kind is there (deleted, a link where a file was, unreadable)."""
    try:
        st = files.lstat(path)
        if mode == LINK_MODE:
            return blob_id(files.readlink(path), oid_len) if _is_link(st.st_mode) else None
        if mode == GITLINK_MODE:  # a submodule: oms does not run git inside it
            return "submodule" if _is_dir(st.st_mode) else None
        if _exec_mode(st.st_mode) != mode:
            return None
        return blob_id(files.read(path, MAX_HASHED_BYTES), oid_len)
    except FileRefused:
        return None


def _is_link(m: int) -> bool:
    return m & 0o170000 == 0o120000


def _is_dir(m: int) -> bool:
    return m & 0o170000 == 0o040000


def _exec_mode(m: int) -> str:
    if m & 0o170000 != 0o100000:
        return "other"
    return "100755" if m & 0o100 else "100644"


@dataclass(frozen=True)
class FileState:
    """One changed path, in `git status --porcelain` letters: `index` is index vs HEAD,
    `worktree` is worktree vs index; `S`/`h` mark a hidden (skip-worktree /
    assume-unchanged) entry, `U` an unmerged one, `??` an untracked file."""

    path: str
    index: str
    worktree: str

    def line(self) -> str:
        return f"{self.index}{self.worktree} {self.path}"


@dataclass(frozen=True)
class WorktreeState:
    changes: tuple[FileState, ...]

    @property
    def dirty(self) -> bool:
        return bool(self.changes)


def worktree_state(repo: Repo, head: str | None) -> WorktreeState:
    """Every path whose worktree bytes, index entry or HEAD entry differ, and untracked files."""
    entries = index_entries(repo)
    tree = tree_entries(repo, head) if head else {}
    changes: dict[str, FileState] = {}
    with RepoFiles(repo.top) as files:
        for e in entries:
            if e.stage:
                changes[e.path] = FileState(e.path, "U", "U")
                continue
            t = tree.get(e.path)
            x = "A" if t is None else (" " if (t.mode, t.oid) == (e.mode, e.oid) else "M")
            y = _worktree_letter(files, e)
            if (x, y) != (" ", " "):
                changes[e.path] = FileState(e.path, x, y)
    indexed = {e.path for e in entries}
    for path in tree:
        if path not in indexed:
            changes[path] = FileState(path, "D", " ")
    for path in untracked(repo):
        changes[path] = FileState(path, "?", "?")
    return WorktreeState(tuple(changes[p] for p in sorted(changes)))


def _worktree_letter(files: RepoFiles, e: IndexEntry) -> str:
    if e.hidden:  # whatever the bytes: the index has been told to look away
        return "S" if e.tag.upper() == "S" else "h"
    now = worktree_id(files, e.path, e.mode, len(e.oid))
    if now in (e.oid, "submodule"):
        return " "
    try:
        files.lstat(e.path)
    except Missing:
        return "D"
    except FileRefused:
        pass
    return "M"


def unified_diff(path: str, old: bytes | None, new: bytes | None) -> bytes:
    """A `git diff`-shaped unified diff of one file from two byte strings (None: absent),
    computed in Python: no diff driver, textconv or attribute of the repository applies."""
    if old == new:
        return b""
    a = (old or b"").decode("utf-8", "surrogateescape").splitlines(keepends=True)
    b = (new or b"").decode("utf-8", "surrogateescape").splitlines(keepends=True)
    head = [f"diff --git a/{path} b/{path}\n"]
    if old is None:
        head.append("new file mode 100644\n")
    elif new is None:
        head.append("deleted file mode 100644\n")
    body = list(difflib.unified_diff(a, b, "/dev/null" if old is None else f"a/{path}",
                                     "/dev/null" if new is None else f"b/{path}"))  # fmt: skip
    if not body:
        return b""
    text = "".join(head) + "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in body
    )
    return text.encode("utf-8", "surrogateescape")
