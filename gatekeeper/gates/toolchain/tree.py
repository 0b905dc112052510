"""A toolchain's tree: its digest, freezing it read-only, and removing it.

The tree digest is SHA-256 over one line per entry, in byte order of the relative path:
type, mode bits that matter (a file's executable bit), size and content digest for a
file, the target for a symlink. Symlinks are never followed, so a link out of the tree
is recorded as its text and resolved only by the binding step. Anything that is not a
directory, a regular file or a symlink (a socket, a device, a fifo) is refused.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from gatekeeper.errors import Unavailable

CHUNK = 1 << 20


class ToolchainUnavailable(Unavailable):
    """A toolchain that is missing, stale, modified, unbuildable or cannot be bound."""


@dataclass(frozen=True)
class TreeDigest:
    digest: str  # "sha256:<hex>"
    files: int
    bytes: int
    links: tuple[tuple[str, str], ...] = ()  # (absolute path of a symlink, its text)


def _file_digest(path: str) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _entries(root: Path) -> list[tuple[bytes, os.stat_result, str]]:
    """(relative path, lstat, absolute path) of everything below `root`, unsorted."""
    out: list[tuple[bytes, os.stat_result, str]] = []
    stack = [str(root)]
    base = len(str(root)) + 1
    while stack:
        top = stack.pop()
        with os.scandir(top) as it:
            for entry in it:
                st = entry.stat(follow_symlinks=False)
                out.append((os.fsencode(entry.path[base:]), st, entry.path))
                if stat.S_ISDIR(st.st_mode):
                    stack.append(entry.path)
    return out


def tree_digest(root: Path) -> TreeDigest:
    """The digest of the tree at `root` (ToolchainUnavailable if it cannot be read)."""
    h = hashlib.sha256(b"oms-toolchain-tree-v1\n")
    files = size = 0
    links: list[tuple[str, str]] = []
    try:
        entries = sorted(_entries(root), key=lambda e: e[0])
        for rel, st, path in entries:
            mode = st.st_mode
            if stat.S_ISDIR(mode):
                line = b"d " + rel
            elif stat.S_ISLNK(mode):
                text = os.readlink(path)
                links.append((path, text))
                line = b"l " + rel + b" -> " + os.fsencode(text)
            elif stat.S_ISREG(mode):
                x = b"x" if mode & 0o111 else b"-"
                digest = _file_digest(path).encode()
                line = b"f" + x + b" " + rel + b" " + str(st.st_size).encode() + b" " + digest
                files, size = files + 1, size + st.st_size
            else:
                raise ToolchainUnavailable(f"toolchain tree {root} holds a special file: {path}")
            h.update(line.replace(b"\n", b"\\n") + b"\n")
    except OSError as exc:
        raise ToolchainUnavailable(
            f"cannot read toolchain tree {root}: {exc.strerror or exc}"
        ) from None
    return TreeDigest("sha256:" + h.hexdigest(), files, size, tuple(links))


def freeze(root: Path) -> None:
    """Everything below `root` read-only for everyone (symlinks untouched); readable by
    others, so that an unprivileged sandbox uid can use it."""
    for _rel, st, path in _entries(root):
        if stat.S_ISLNK(st.st_mode):
            continue
        keep = 0o555 if stat.S_ISDIR(st.st_mode) or st.st_mode & 0o111 else 0o444
        os.chmod(path, keep, follow_symlinks=False)
    os.chmod(root, 0o555)  # noqa: S103 # nosec B103 (read-only; others read: the sandbox uid)


def remove_tree(root: Path) -> None:
    """Remove a (frozen) toolchain tree; symlinks are removed, never followed."""
    if not os.path.lexists(root):
        return
    if os.path.islink(root) or not os.path.isdir(root):
        os.unlink(root)
        return
    os.chmod(root, 0o700)
    for _, st, path in _entries(root):
        if stat.S_ISDIR(st.st_mode):
            os.chmod(path, 0o700)
    shutil.rmtree(root)
