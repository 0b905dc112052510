"""Which files a transfer would send, and which it excludes and why. Nothing excluded is read.

Exclusions: `.git`, gitignored files, dependency and build folders, secret-looking
names, binaries, files over the size limit, symlinks (the file or any directory on its
path), and any path that is absolute or leaves the repository.

Names come from `ls-files` (the index and `.gitignore` read as data) and are filtered
here in Python: no name oms was given ever becomes a pathspec. Bytes are read only
through `fsread`, down from the repository top without following any link.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from gatekeeper.errors import UsageError
from gatekeeper.repo.fsread import FileRefused, LinkRefused, Missing, RepoFiles
from gatekeeper.repo.git import Repo
from gatekeeper.repo.paths import in_dependency_dir, secret_looking
from gatekeeper.repo.worktree import (
    REGULAR_MODES,
    IndexEntry,
    blob_id,
    ignored,
    index_entries,
    read_blobs,
    tree_entries,
    unified_diff,
    untracked,
)
from policy import TransferPolicy


@dataclass(frozen=True)
class Selected:
    """One thing a transfer would send, with its digests: each is computed once, when the
    bytes are read, and the manifest, the scan items, visibility and the checks at approve
    and release take them from here instead of hashing the bytes again."""

    path: str  # repo-relative, as given by git
    data: bytes  # what is sent: the file's bytes, or its diff
    source: bytes | None  # the worktree bytes it was made from (None: absent in the worktree)
    sha256: str  # hex SHA-256 of `data`
    source_id: str | None  # git blob id of `source` (None: absent), as `blob_id` gives it

    @classmethod
    def of(cls, path: str, data: bytes, source: bytes | None, oid_len: int = 40) -> Selected:
        """`data` made from `source`, hashed here (ids of `oid_len` digits: sha1 or sha256)."""
        source_id = None if source is None else blob_id(source, oid_len)
        return cls(path, data, source, hashlib.sha256(data).hexdigest(), source_id)

    @classmethod
    def whole(cls, path: str, data: bytes, oid_len: int = 40) -> Selected:
        return cls.of(path, data, data, oid_len)

    def blob_id(self, oid_len: int) -> str | None:
        """The git blob id of `source` in ids of `oid_len` digits (None: absent)."""
        if self.source is None:
            return None
        if self.source_id is not None and len(self.source_id) == oid_len:
            return self.source_id
        return blob_id(self.source, oid_len)  # a repository of the other object format


def _safe_rel(raw: str) -> str | None:
    p = PurePosixPath(raw)
    if p.is_absolute() or ".." in p.parts or not p.parts or "\x00" in raw:
        return None
    return str(p)


def name_exclusion(path: str) -> str | None:
    """Why a name is never sent, whatever its bytes (None: it may be)."""
    if in_dependency_dir(path):
        return "dependency or build folder"
    if secret_looking(path):
        return "secret-looking name"
    return None


def _under(listed: list[str], rel: str) -> list[str]:
    prefix = rel.rstrip("/") + "/"
    return [f for f in listed if f == rel or f.startswith(prefix)]


def _named(top: Path, listed: list[str], paths: list[str],
           excluded: list[tuple[str, str]]) -> list[str]:  # fmt: skip
    """The listed files below each `--path`, matched in Python (never as a pathspec)."""
    wanted: list[str] = []
    for raw in paths:
        rel = _safe_rel(raw)
        if rel is None:
            excluded.append((raw, "outside the repository"))
            continue
        # realpath only words the reason; what is read is decided by fsread alone.
        real = os.path.realpath(top / rel)
        if real != str(top) and not real.startswith(str(top) + os.sep):
            excluded.append((rel, "resolves outside the repository"))
            continue
        hits = _under(listed, rel)
        if not hits:
            raise UsageError(f"--path {rel}: no tracked or untracked file there")
        wanted.extend(hits)
    return sorted(set(wanted))


def oid_length(entries: list[IndexEntry]) -> int:
    """The length of this repository's object ids (sha1: 40, sha256: 64), from its index."""
    return len(entries[0].oid) if entries else 40


@dataclass(frozen=True)
class Listing:
    """The names git lists as data: the index, the untracked and the ignored files."""

    index: list[IndexEntry]
    untracked: list[str]
    ignored: list[str]

    @classmethod
    def of(cls, repo: Repo) -> Listing:
        """The three `ls-files` at once: each is a git process of its own, and waiting for
        one holds no lock the others need."""
        with ThreadPoolExecutor(2, thread_name_prefix="oms-transfer-ls") as pool:
            others = pool.submit(untracked, repo)
            ignores = pool.submit(ignored, repo)
            return cls(index_entries(repo), others.result(), ignores.result())


def candidates(
    repo: Repo, context: str, paths: list[str], listing: Listing | None = None
) -> tuple[list[str], list[tuple[str, str]]]:
    """(files to consider, [(path, reason)] excluded before reading anything); `listing`:
    the names as already listed (listed here when not given)."""
    names = Listing.of(repo) if listing is None else listing
    excluded: list[tuple[str, str]] = [(".git", ".git")]
    tracked = {e.path for e in names.index}
    listed = sorted(tracked.union(names.untracked))
    excluded += [(p, "gitignored") for p in sorted(names.ignored)]
    if context == "paths":
        listed = _named(repo.top, listed, paths, excluded)
    keep = []
    for f in listed:
        why = name_exclusion(f)
        if why:
            excluded.append((f, why))
        else:
            keep.append(f)
    return keep, excluded


def link_reason(top: Path, rel: str, refusal: FileRefused) -> str:
    """The exclusion reason for a link refusal, saying whether the link leaves the repository."""
    if refusal.reason != "a symlink":
        return refusal.reason
    target = os.path.realpath(top / rel)  # words the reason only; the target is never opened
    inside = target.startswith(str(top) + os.sep)
    return "symlink inside the repository" if inside else "symlink leaving the repository"


def read_one(files: RepoFiles, f: str, max_file_bytes: int) -> bytes:
    """The bytes of `f`, or FileRefused with the reason it is excluded (binary included)."""
    data = files.read(f, max_file_bytes)
    if data.find(b"\0", 0, 8192) >= 0:  # (no copy of the first 8 KiB)
        raise FileRefused(f, "binary")
    return data


def read_files(
    top: Path, files: list[str], max_file_bytes: int, oid_len: int = 40
) -> tuple[list[Selected], list[tuple[str, str]]]:
    """Read the files that pass the remaining checks (symlink, size, binary), one read each,
    each hashed once as it is read. (Hashing on a second thread while the next file is read
    measured slower here: ten thousand small hand-overs of the GIL cost more than they save.)"""
    selected, excluded = [], []
    with RepoFiles(top) as tree:
        for f in files:
            try:
                selected.append(Selected.whole(f, read_one(tree, f, max_file_bytes), oid_len))
            except LinkRefused as exc:
                excluded.append((f, link_reason(top, f, exc)))
            except FileRefused as exc:
                excluded.append((f, exc.reason))
    return selected, excluded


Chosen = tuple[list[Selected], list[tuple[str, str]]]


@dataclass(frozen=True)
class Selection:
    """What a transfer of one context sends, what it excludes and why, and the index as it
    was listed while choosing (None: context none lists nothing), whose flags visibility
    then reads instead of listing the index again."""

    selected: list[Selected]
    excluded: list[tuple[str, str]]
    index: list[IndexEntry] | None = None


def choose(repo: Repo, context: str, paths: list[str], base: str | None,
           tp: TransferPolicy) -> Selection:  # fmt: skip
    """What a transfer of `context` sends and excludes: run at preview, and again at
    approve and release to see that nothing changed."""
    if context == "none":
        return Selection([], [])
    listing = Listing.of(repo)
    entries = listing.index
    files, excluded = candidates(repo, context, paths, listing)
    if context == "diff":
        if base is None:
            raise UsageError("--context diff needs a base")
        diffs, excluded = _choose_diff(repo, entries, files, base, tp.max_file_bytes, excluded)
        return Selection(diffs, excluded, entries)
    selected, more = read_files(repo.top, files, tp.max_file_bytes, oid_length(entries))
    return Selection(selected, excluded + more, entries)


def _choose_diff(repo: Repo, entries: list[IndexEntry], files: list[str], base: str,
                 max_bytes: int, excluded: list[tuple[str, str]]) -> Chosen:  # fmt: skip
    """Per-file diffs of `base` against the worktree bytes, for the selected names only.

    Each diff is built in Python from the base blob and the bytes read through fsread,
    so the exclusion list holds for the bytes: no pathspec, no repository diff driver.
    Tracked files and files of `base` count (as `git diff BASE`); untracked ones are not
    read, and a `base` file no longer in the index shows as deleted.
    """
    tree = tree_entries(repo, base)
    tracked = {e.path for e in entries}
    keep = [f for f in files if f in tracked]
    seen = {p for p, _ in excluded} | set(keep)
    for f in sorted(set(tree) - tracked):  # not in the index: deleted, its worktree unread
        if f in seen:
            continue
        why = name_exclusion(f)
        if why:
            excluded.append((f, why))
        else:
            keep.append(f)
    old_ids = {f: tree[f] for f in keep if f in tree}
    if bad := [f for f, e in old_ids.items() if e.mode not in REGULAR_MODES]:
        excluded += [(f, "not a regular file in the base") for f in bad]
        keep = [f for f in keep if f not in bad]
    blobs = read_blobs(repo, (old_ids[f].oid for f in keep if f in old_ids))
    selected: list[Selected] = []
    with RepoFiles(repo.top) as wt:
        for f in sorted(keep):
            old = blobs[old_ids[f].oid] if f in old_ids else None
            try:
                selected += _diff_item(wt, f, old, max_bytes, f in tracked, oid_length(entries))
            except LinkRefused as exc:
                excluded.append((f, link_reason(repo.top, f, exc)))
            except FileRefused as exc:
                excluded.append((f, exc.reason))
    return selected, excluded


def _diff_item(wt: RepoFiles, f: str, old: bytes | None, max_bytes: int,
               tracked: bool, oid_len: int) -> list[Selected]:  # fmt: skip
    """[the diff of `f`] ([] when unchanged); FileRefused with the reason it is excluded.
    An untracked path is compared as absent (as `git diff BASE` does): it is not read."""
    new: bytes | None = None
    try:
        new = read_one(wt, f, max_bytes) if tracked else None
    except Missing:
        pass
    if old is not None and b"\0" in old[:8192]:
        raise FileRefused(f, "binary")
    diff = unified_diff(f, old, new)
    if len(diff) > max_bytes:
        raise FileRefused(f, "diff over the size limit")
    return [Selected.of(f, diff, new, oid_len)] if diff else []
