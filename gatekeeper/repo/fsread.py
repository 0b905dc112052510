"""The one way oms opens a worktree file: down from the repository top, never through a link.

Every read starts at a directory descriptor of the repository top and opens one
component at a time with `O_NOFOLLOW`, so a symlink anywhere on the path (the file
itself or any parent directory) is refused instead of followed, and a directory
swapped for a symlink between a check and the read serves nothing outside the
repository: the walk never resolves a name that is a link. Only regular files are
opened (a FIFO or a device is refused before `open`), and the descriptor is checked
again with `fstat` after opening.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from types import TracebackType

from gatekeeper.errors import UsageError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_MAX_CACHED_DIRS = 256  # directory descriptors kept open while walking sorted paths
_GROWN_CHUNK = 1 << 16  # read size past the size fstat gave


class FileRefused(UsageError):
    """A worktree path oms will not read; `reason` says why in a few words."""

    def __init__(self, rel: str, reason: str) -> None:
        super().__init__(f"{rel}: {reason}")
        self.rel = rel
        self.reason = reason


class Missing(FileRefused):
    """Nothing at that path (deleted in the worktree)."""


class LinkRefused(FileRefused):
    """The path itself, or a directory on it, is a symbolic link."""


class NotRegular(FileRefused):
    """A directory, FIFO, socket or device: only regular files are read."""


class TooLarge(FileRefused):
    """Over the byte limit the caller gave."""

    def __init__(self, rel: str, size: int, limit: int) -> None:
        super().__init__(rel, f"over the size limit ({size} > {limit} bytes)")
        self.size = size


def parts_of(rel: str) -> tuple[str, ...]:
    """The components of a repository-relative path; UsageError for anything that could
    leave the top (absolute, `..`, NUL) or names nothing."""
    if not rel or "\x00" in rel or rel.startswith("/"):
        raise UsageError("path must be relative to the repository")
    parts = rel.split("/")
    if "" in parts or "." in parts:  # "a//b", "./a", "a/": the same parts as "a/b", "a"
        parts = [p for p in parts if p not in ("", ".")]
    if not parts or ".." in parts:
        raise UsageError("path must be relative to the repository, without '..'")
    return tuple(parts)


class RepoFiles:
    """Reads below one repository top through descriptors (use as a context manager)."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self._top_fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self._dirs: dict[tuple[str, ...], int] = {}

    def __enter__(self) -> RepoFiles:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._forget_dirs()
        if self._top_fd >= 0:
            os.close(self._top_fd)
            self._top_fd = -1

    def _forget_dirs(self) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs.clear()

    def _dir(self, rel: str, dirs: tuple[str, ...]) -> int:
        """A descriptor of the directory `dirs` below the top, opened without following links."""
        if not dirs:
            return self._top_fd
        fd = self._dirs.get(dirs)
        if fd is not None:
            return fd
        parent = self._dir(rel, dirs[:-1])
        try:
            fd = os.open(dirs[-1], _DIR_FLAGS, dir_fd=parent)
        except OSError as exc:
            raise self._dir_refusal(rel, dirs, exc) from None
        if len(self._dirs) >= _MAX_CACHED_DIRS:
            self._forget_dirs()  # `parent` may be closed now; `fd` alone is needed from here
        self._dirs[dirs] = fd
        return fd

    def _dir_refusal(self, rel: str, dirs: tuple[str, ...], exc: OSError) -> FileRefused:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            try:
                st = os.stat(dirs[-1], dir_fd=self._dir(rel, dirs[:-1]), follow_symlinks=False)
            except OSError:
                return Missing(rel, "deleted in the worktree")
            if stat.S_ISLNK(st.st_mode):
                return LinkRefused(rel, "a parent directory is a symlink")
            return Missing(rel, "a parent is not a directory")
        if exc.errno == errno.ENOENT:
            return Missing(rel, "deleted in the worktree")
        return FileRefused(
            rel, f"cannot be opened ({errno.errorcode.get(exc.errno or 0, 'error')})"
        )

    def lstat(self, rel: str) -> os.stat_result:
        """The entry at `rel` itself (a link is not followed); FileRefused if a parent is one."""
        parts = parts_of(rel)
        return self._lstat_in(self._dir(rel, parts[:-1]), rel, parts[-1])

    def _lstat_in(self, parent: int, rel: str, name: str) -> os.stat_result:
        try:
            return os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            raise Missing(rel, "deleted in the worktree") from None
        except NotADirectoryError:
            raise Missing(rel, "a parent is not a directory") from None

    def readlink(self, rel: str) -> bytes:
        """The target of the symlink at `rel`, as bytes (for hashing, never for following)."""
        parts = parts_of(rel)
        parent = self._dir(rel, parts[:-1])
        return os.readlink(os.fsencode(parts[-1]), dir_fd=parent)

    def read(self, rel: str, max_bytes: int) -> bytes:
        """The bytes of the regular file at `rel`, read through its own descriptor."""
        parts = parts_of(rel)
        parent = self._dir(rel, parts[:-1])
        st = self._lstat_in(parent, rel, parts[-1])
        _check_kind(rel, st)
        if st.st_size > max_bytes:
            raise TooLarge(rel, st.st_size, max_bytes)
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent)
        except OSError as exc:  # swapped since the lstat: a link now, or gone
            if exc.errno == errno.ELOOP:
                raise LinkRefused(rel, "a symlink") from None
            raise Missing(rel, "deleted in the worktree") from None
        try:
            st = os.fstat(fd)
            _check_kind(rel, st)
            data = _read_to_end(fd, max_bytes + 1, st.st_size)
        finally:
            os.close(fd)
        if len(data) > max_bytes:
            raise TooLarge(rel, len(data), max_bytes)
        return data


def _read_to_end(fd: int, limit: int, size: int) -> bytes:
    """Up to `limit` bytes of `fd`, read to its end. The first read asks for the size
    `fstat` gave (and one byte more, to see the end), not for `limit`: a buffer of the
    limit for every small file costs more than the read (a fresh mapping each time)."""
    first = os.read(fd, min(size + 1, limit))
    if not first or len(first) >= limit:
        return first
    chunks, got = [first], len(first)
    while got < limit:  # one more read to see the end; more only if the file grew
        chunk = os.read(fd, min(limit - got, _GROWN_CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return first if len(chunks) == 1 else b"".join(chunks)


def _check_kind(rel: str, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise LinkRefused(rel, "a symlink")
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(rel, "not a regular file")
