"""The workspace's untracked files, found by oms' own walk: git never reads the workspace.

`git ls-files --others --exclude-standard` on the workspace would open every `.gitignore`
it meets (and a nested repository's `HEAD` and `commondir`): a FIFO there blocks git, and
collect with it, for ever. So oms walks the tree itself, one depth at a time, with
`scandir` and `lstat` only, and opens nothing but regular `.gitignore` files, through
`RepoFiles` (no link followed, `O_NONBLOCK`, the type checked again on the descriptor).
Their bytes are copied into a shadow tree of oms' own (the directories and those copies,
nothing else), and git's own matcher, `check-ignore --no-index`, judges each depth's new
paths against it: the rules are git's, the files it opens are oms'. An ignored directory
is not descended into, as git does not. FIFOs, sockets and devices are recorded, never
opened. A directory holding a `.git` is a nested repository: not content of this one.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from gatekeeper.agent.collect_deadline import left
from gatekeeper.agent.payloads import SpecialKind
from gatekeeper.errors import Blocked
from gatekeeper.repo.fsread import FileRefused, RepoFiles, TooLarge
from gatekeeper.repo.scratch import MAX_DEPTH, MAX_ENTRIES
from sandbox import Deadline

MAX_WALKED = 2_000_000  # entries oms lists in one workspace, ignored ones' parents included
MAX_IGNORE_BYTES = 8 << 20  # one `.gitignore` copied into the shadow tree

Judge = Callable[[list[bytes]], set[bytes]]  # the paths (relative) that are ignored


def special_kind(mode: int) -> SpecialKind | None:
    """What a non-content file is; None for a directory, regular file or symlink."""
    if stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "char-device"
    return "block-device" if stat.S_ISBLK(mode) else "other"


@dataclass
class Walk:
    """What one walk found: untracked files and symlinks not ignored, and special files."""

    others: list[bytes] = field(default_factory=list)
    special: dict[bytes, SpecialKind] = field(default_factory=dict)
    walked: int = 0


def _join(parent: bytes, name: bytes) -> bytes:
    return parent + b"/" + name if parent else name


def _copy_ignore(files: RepoFiles, shadow: Path, d: bytes, mode: int) -> None:
    """`d/.gitignore` into the shadow tree when it is a regular file (git reads no other:
    a symlinked one is ignored by git, a special one is never opened)."""
    if not stat.S_ISREG(mode):
        return
    rel = _join(d, b".gitignore").decode("utf-8", "surrogateescape")
    try:
        data = files.read(rel, MAX_IGNORE_BYTES)
    except TooLarge:
        raise Blocked(f"{rel[:120]} in the workspace is larger than oms reads "
                      f"({MAX_IGNORE_BYTES} bytes)") from None  # fmt: skip
    except FileRefused:
        raise Blocked("the workspace changed while oms collected it") from None
    (shadow / os.fsdecode(d) / ".gitignore").write_bytes(data)


def _list_dir(files: RepoFiles, top: Path, shadow: Path, d: bytes, walk: Walk,
              tracked: Collection[bytes]) -> list[tuple[bytes, bool]]:  # fmt: skip
    """(path, is a directory) of the entries of `d` that need judging; special files of `d`
    recorded, its regular `.gitignore` copied."""
    found: list[tuple[bytes, bool]] = []
    with os.scandir(os.path.join(os.fsencode(top), d) if d else os.fsencode(top)) as it:
        for entry in it:
            walk.walked += 1
            if walk.walked > MAX_WALKED:
                raise Blocked(f"the workspace holds more than {MAX_WALKED} entries; "
                              "oms does not collect it")  # fmt: skip
            if entry.name == b".git":
                continue  # git never lists a `.git`, at any depth
            rel, mode = _join(d, entry.name), entry.stat(follow_symlinks=False).st_mode
            if entry.name == b".gitignore":
                _copy_ignore(files, shadow, d, mode)
            kind = special_kind(mode)
            if kind is not None:
                walk.special[rel] = kind
            elif stat.S_ISDIR(mode):
                if not os.path.lexists(os.path.join(entry.path, b".git")):
                    (shadow / os.fsdecode(rel)).mkdir()
                    found.append((rel, True))
            elif rel not in tracked:
                found.append((rel, False))
    return found


def walk_untracked(top: Path, shadow: Path, tracked: Collection[bytes],
                   gitlinks: Collection[bytes], judge: Judge,
                   deadline: Deadline) -> Walk:  # fmt: skip
    """Every untracked, not ignored file or symlink below `top`, as `git add -A` would add
    it, and every special file met on the way; `shadow` is an empty directory of oms'."""
    walk, level = Walk(), [b""]
    with RepoFiles(top) as files:
        for _depth in range(MAX_DEPTH + 1):
            found: list[tuple[bytes, bool]] = []
            for d in level:
                left(deadline, "listing the workspace's files")
                found += _list_dir(files, top, shadow, d, walk, tracked)
            ignored = judge([p for p, _ in found]) if found else set()
            kept = [(p, is_dir) for p, is_dir in found if p not in ignored]
            walk.others += [p for p, is_dir in kept if not is_dir]
            if len(walk.others) > MAX_ENTRIES:
                raise Blocked(f"the workspace holds more than {MAX_ENTRIES} new files; "
                              "oms does not collect it")  # fmt: skip
            # A submodule's directory is its commit, not content: git does not descend.
            level = [p for p, is_dir in kept if is_dir and p not in gitlinks]
            if not level:
                return walk
    raise Blocked(f"the workspace's tree is deeper than {MAX_DEPTH}; oms does not collect it")
