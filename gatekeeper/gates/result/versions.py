"""A changed path as the gate's static readings see it: its bytes on the base and on the
candidate, read from git objects (never the worktree), either side absent.

The static readings (`weakening/`, `runs_later/`) take these and never evaluate them:
files are parsed as data, and a file that cannot be parsed counts against the candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gatekeeper.repo.change import FileChange
from gatekeeper.repo.git import Repo, git, read_objects

# Bytes of one side read for the static readings; a larger file is read as unparseable.
MAX_READ_BYTES = 2 << 20


@dataclass(frozen=True)
class FileVersions:
    """One path the candidate changed: `base` None when added, `candidate` None when deleted.
    `base_oversize`/`candidate_oversize`: that side exceeded MAX_READ_BYTES and is not read."""

    path: str
    base: bytes | None
    candidate: bytes | None
    base_oversize: bool = False
    candidate_oversize: bool = False

    @property
    def added(self) -> bool:
        return self.base is None and not self.base_oversize

    @property
    def deleted(self) -> bool:
        return self.candidate is None and not self.candidate_oversize


def _sizes(repo: Repo, ids: Sequence[str]) -> dict[str, int]:
    """Each blob's size from one `cat-file --batch-check`, before anything is read."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {}
    out = git(repo, "cat-file", "--batch-check", input="".join(f"{i}\n" for i in wanted).encode())
    sizes = {}
    for line in out.decode("ascii", "replace").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == "blob":
            sizes[parts[0]] = int(parts[2])
    return sizes


def read_versions(repo: Repo, files: Sequence[FileChange]) -> tuple[FileVersions, ...]:
    """Both sides of every changed regular file (symlinks and submodules are not read),
    by blob id from the object database; a side over MAX_READ_BYTES is flagged, not read."""
    regular = [f for f in files if _regular(f.old_mode) or _regular(f.new_mode)]
    pairs = [(_blob(f.old_mode, f.old_blob), _blob(f.new_mode, f.new_blob)) for f in regular]
    ids = [b for pair in pairs for b in pair if b]
    sizes = _sizes(repo, ids)
    small = [i for i in ids if sizes.get(i, MAX_READ_BYTES + 1) <= MAX_READ_BYTES]
    blobs = read_objects(repo, small)
    out = []
    for f in regular:
        old, new = _blob(f.old_mode, f.old_blob), _blob(f.new_mode, f.new_blob)
        out.append(FileVersions(
            f.path,
            blobs[old][1] if old in blobs else None,
            blobs[new][1] if new in blobs else None,
            base_oversize=bool(old) and old not in blobs,
            candidate_oversize=bool(new) and new not in blobs,
        ))  # fmt: skip
    return tuple(out)


def _regular(mode: str) -> bool:
    return mode in ("100644", "100755")


def _blob(mode: str, obj: str) -> str:
    return obj if _regular(mode) and obj.strip("0") else ""


def read_paths(repo: Repo, commit: str, paths: Sequence[str]) -> dict[str, bytes]:
    """The bytes of each of `paths` that is a regular file of `commit` (absent ones left
    out), by one `ls-tree` and one `cat-file --batch`."""
    if not paths:
        return {}
    out = git(repo, "ls-tree", "-z", "--full-tree", commit, "--", *paths)
    found: dict[str, str] = {}
    for rec in out.split(b"\0"):
        meta, _, path = rec.partition(b"\t")
        parts = meta.decode("ascii", "replace").split(" ")
        if len(parts) == 3 and _regular(parts[0]):
            found[path.decode("utf-8", "surrogateescape")] = parts[2]
    blobs = read_objects(repo, list(found.values()))
    return {p: blobs[o][1] for p, o in found.items()}


def tree_paths(repo: Repo, commit: str) -> tuple[str, ...]:
    """Every path of `commit`'s tree (the names a narrowed argv may drop)."""
    out = git(repo, "ls-tree", "-r", "-z", "--name-only", "--full-tree", commit)
    return tuple(p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p)
