"""Which files a transfer would send, and which it excludes and why. Nothing excluded is read.

Exclusions: `.git`, gitignored files, dependency and build folders, secret-looking
names, binaries, files over the size limit, symlinks, and any path that is
absolute or leaves the repository.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ..errors import UsageError
from ..git import git
from ..paths import in_dependency_dir, secret_looking


@dataclass(frozen=True)
class Selected:
    path: str  # repo-relative, as given by git
    data: bytes


def _safe_rel(raw: str) -> str | None:
    p = PurePosixPath(raw)
    if p.is_absolute() or ".." in p.parts or not p.parts:
        return None
    return str(p)


def candidates(
    top: Path, context: str, paths: list[str]
) -> tuple[list[str], list[tuple[str, str]]]:
    """(files to consider, [(path, reason)] excluded before reading anything)."""
    excluded: list[tuple[str, str]] = [(".git", ".git")]
    out = git(top, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    listed = sorted({p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p})
    ignored = git(top, "ls-files", "-z", "--others", "--ignored", "--exclude-standard",
                  "--directory")  # fmt: skip
    for p in sorted(ignored.split(b"\0")):
        if p:
            excluded.append((p.decode("utf-8", "surrogateescape"), "gitignored"))
    if context == "paths":
        wanted: list[str] = []
        for raw in paths:
            rel = _safe_rel(raw)
            if rel is None:
                excluded.append((raw, "outside the repository"))
                continue
            real = os.path.realpath(top / rel)
            if real != str(top) and not real.startswith(str(top) + os.sep):
                excluded.append((rel, "resolves outside the repository"))
                continue
            hits = [f for f in listed if f == rel or f.startswith(rel.rstrip("/") + "/")]
            if not hits:
                raise UsageError(f"--path {rel}: no tracked or untracked file there")
            wanted.extend(hits)
        listed = sorted(set(wanted))
    keep = []
    for f in listed:
        if in_dependency_dir(f):
            excluded.append((f, "dependency or build folder"))
        elif secret_looking(f):
            excluded.append((f, "secret-looking name"))
        else:
            keep.append(f)
    return keep, excluded


def read_files(
    top: Path, files: list[str], max_file_bytes: int
) -> tuple[list[Selected], list[tuple[str, str]]]:
    """Read the files that pass the remaining checks (symlink, size, binary)."""
    selected, excluded = [], []
    for f in files:
        full = top / f
        try:
            st = full.lstat()
        except FileNotFoundError:
            excluded.append((f, "deleted in the worktree"))
            continue
        if full.is_symlink():
            target = os.path.realpath(full)
            inside = target.startswith(str(top) + os.sep)
            excluded.append((f, "symlink inside the repository" if inside else
                             "symlink leaving the repository"))  # fmt: skip
            continue
        if not full.is_file():
            excluded.append((f, "not a regular file"))
            continue
        if st.st_size > max_file_bytes:
            excluded.append((f, f"over the size limit ({st.st_size} > {max_file_bytes} bytes)"))
            continue
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(max_file_bytes + 1)
        if len(data) > max_file_bytes:
            excluded.append((f, "over the size limit"))
        elif b"\0" in data[:8192]:
            excluded.append((f, "binary"))
        else:
            selected.append(Selected(f, data))
    return selected, excluded
