"""Staging: how a run, as root, reaches host paths the sandbox uid cannot traverse.

As root, bwrap runs as SANDBOX_HOST_UID and resolves every bind source as that uid, even
one given by descriptor: a toolchain or a workspace below a directory others cannot search
(a pyenv or a cache under /root, mode 0700) cannot be bound directly. So the child, still
root, unshares a mount namespace of its own, binds each such path onto a target below the
run directory (which the sandbox uid can reach), re-points the bind descriptor at that
target, and only then drops to the sandbox uid (`drop_to`) and execs bwrap. The host's own
mounts never change. One implementation for the check runner and the agent runner.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .errors import SandboxUnavailable


@dataclass(frozen=True)
class Stage:
    """A path the sandbox uid cannot reach: the child, still root, binds `source_fd` onto
    `target` in a mount namespace of its own, and bwrap binds `target`."""

    source_fd: int
    source: bytes
    target: bytes
    bind_fd: int  # the fd number in bwrap's argv: re-pointed at the bound target


_libc = ctypes.CDLL(None, use_errno=True)
_CLONE_NEWNS = 0x0002_0000
_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 0x4_0000


def unreachable_dir(real: Path) -> Path | None:
    """The first directory on the way to `real` that other users cannot search, if any."""
    for d in [*reversed(real.parents), real]:
        if d.is_dir() and not d.stat().st_mode & 0o001:
            return d
    return None


def mount_stages(stages: Sequence[Stage]) -> None:
    """In the child, as root: a private mount namespace holding the staged binds."""
    if _libc.unshare(_CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
    if _libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "mount --make-rprivate /")
    for st in stages:
        # The checked fd belongs to the old mount namespace (bind refuses it): open the path
        # again here and bind that only if it is still the very inode that was checked.
        fd = os.open(st.source, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        was, now = os.fstat(st.source_fd), os.fstat(fd)
        if (was.st_dev, was.st_ino) != (now.st_dev, now.st_ino):
            raise OSError(errno.ESTALE, "a staged path changed since it was checked")
        ok = _libc.mount(b"/proc/self/fd/%d" % fd, st.target, None, _MS_BIND | _MS_REC, None)
        if ok != 0:
            raise OSError(ctypes.get_errno(), "mount --bind", st.target)
        os.close(fd)
        os.close(st.source_fd)  # never inherited by bwrap, let alone the command
        # bwrap checks that a --*bind-fd's fd is what it mounted: the target as now bound.
        bound = os.open(st.target, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        os.dup2(bound, st.bind_fd)
        os.close(bound)


def drop_to(uid: int) -> None:
    """In the child, after the stages: no supplementary groups, then gid and uid (real,
    effective and saved), so nothing can be taken back."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def _stage_fds(
    base: Path,
    reals: Sequence[str],
    fds: Sequence[int],
    opened: list[int],
    way: Callable[[Path], Path],
) -> tuple[list[int], list[Stage]]:
    """(the fds bwrap binds, the stages): as root, each path whose way (`way(path)`) the
    sandbox uid cannot search goes by `base/<i>`; `opened` collects the fds made here."""
    bind_fds, stages = list(fds), []
    for i, real in enumerate(reals):
        if os.geteuid() != 0 or unreachable_dir(way(Path(real))) is None:
            continue
        target = base / str(i)
        try:
            base.mkdir(mode=0o755, exist_ok=True)
            if os.path.isdir(real):
                target.mkdir(mode=0o755, exist_ok=True)
            else:
                target.touch(mode=0o644)
            fd = os.open(target, os.O_PATH | os.O_CLOEXEC)
        except OSError as exc:
            raise SandboxUnavailable(f"cannot stage {real} for the sandbox: {exc}") from None
        opened.append(fd)
        bind_fds[i] = fd
        stages.append(Stage(fds[i], os.fsencode(real), os.fsencode(target), fd))
    return bind_fds, stages


def stage_ro_paths(
    run_dir: Path, ro_paths: Sequence[tuple[str, str]], ro_fds: Sequence[int], opened: list[int]
) -> tuple[list[int], list[Stage]]:
    """(the fds bwrap binds read-only, the stages): as root, a (host real path, inside)
    pair the sandbox uid cannot reach goes by `run_dir/ro/<i>`."""
    reals = [real for real, _ in ro_paths]
    return _stage_fds(run_dir / "ro", reals, ro_fds, opened, lambda p: p)


def stage_rw_paths(
    run_dir: Path, rw_paths: Sequence[tuple[str, str]], rw_fds: Sequence[int], opened: list[int]
) -> tuple[list[int], list[Stage]]:
    """(the fds bwrap binds read-write, the stages): as root, by `run_dir/rw/<i>` when the
    way to the tree is closed to others (the tree itself is the sandbox uid's for the run)."""
    reals = [real for real, _ in rw_paths]
    return _stage_fds(run_dir / "rw", reals, rw_fds, opened, lambda p: p.parent)


def stage_dir(run_dir: Path, path: Path, name: str, opened: list[int]) -> tuple[Path, list[Stage]]:
    """(what bwrap binds by path, its stage): as root, a directory the sandbox uid owns for
    the run (a workspace, a scratch copy) below a directory others cannot search goes by
    `run_dir/<name>`."""
    if os.geteuid() != 0 or unreachable_dir(path.parent) is None:
        return path, []
    target = run_dir / name
    try:
        target.mkdir(mode=0o755, exist_ok=True)
        source_fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        opened.append(source_fd)
        target_fd = os.open(target, os.O_PATH | os.O_CLOEXEC)
        opened.append(target_fd)
    except OSError as exc:
        raise SandboxUnavailable(f"cannot stage {path} for the sandbox: {exc}") from None
    return target, [Stage(source_fd, os.fsencode(path), os.fsencode(target), target_fd)]


def chown_tree(root: Path, uid: int, gid: int) -> None:
    """Hand a tree to `uid` (symlinks themselves, never their targets)."""
    os.lchown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), uid, gid)


@contextmanager
def lend_trees(paths: Sequence[str], uid: int) -> Iterator[None]:
    """The trees at `paths` are `uid`'s (and its gid's) inside the block, then ours again
    (this process' uid and gid), also when the block fails; symlinks are never followed."""
    try:
        for path in paths:
            try:
                chown_tree(Path(path), uid, uid)
            except OSError as exc:
                raise SandboxUnavailable(f"cannot hand {path} to the sandbox user: {exc}") from None
        yield
    finally:
        for path in paths:
            try:
                chown_tree(Path(path), os.getuid(), os.getgid())
            except OSError as exc:
                raise SandboxUnavailable(
                    f"cannot take {path} back from the sandbox user: {exc}"
                ) from None
