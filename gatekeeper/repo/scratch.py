"""A scratch copy of one exact commit, in a private temp dir, for the sandbox to work on.

The tree is read from the object database (`git ls-tree -r` and `git cat-file
--batch`): never the worktree or the index, and no attributes, filters or
export rules, which a candidate's `.gitattributes` could otherwise steer.
Only regular files, executables and symlinks are written; names that are
absolute, contain `..`, `.` or `.git`, or pass through a symlink are refused;
files are created with O_EXCL|O_NOFOLLOW. Symlink targets are kept as data:
inside the sandbox they resolve against the sandbox's own filesystem.
Submodules (gitlinks) become empty directories.

Host work before the sandbox is bounded: a tree with more than MAX_ENTRIES
entries, deeper than MAX_DEPTH or with a path longer than MAX_PATH_BYTES is
refused before anything is written; each directory is made once (one mkdir,
parents first), so the copy is linear in the tree; and the gate's Deadline is
checked every CHECK_EVERY entries.

Removal never gives up silently: directories are made writable again (the
sandbox may have taken their permissions away) and a failure is raised.
Copies and run directories left by oms processes that died are swept.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from gatekeeper.errors import Unavailable, UsageError
from gatekeeper.repo.git import GitError, git, git_argv, git_env
from sandbox import Deadline
from sandbox.cgroup import pid_alive

MAX_ENTRIES = 250_000
MAX_DEPTH = 256
MAX_PATH_BYTES = 2048
CHECK_EVERY = 1024
SCRATCH_PREFIX = "oms-scratch-"
# Left behind by oms: scratch copies, the runner's /etc files, probe directories.
SWEPT_PREFIXES = (SCRATCH_PREFIX, "oms-run-", "oms-probe-")
STALE_AFTER_S = 600
# Names without an owner pid (older oms) are swept only when much older.
STALE_UNOWNED_AFTER_S = 24 * 3600
# As root the sandbox uid owns the copy (see sandbox/runner.py).
SANDBOX_HOST_UID = 2_147_480_000


class ScratchError(UsageError):
    """The commit's tree cannot be copied safely."""


class ScratchLimit(ScratchError):
    """The commit's tree is larger, deeper or longer-named than oms copies."""


class ScratchCleanupError(Unavailable):
    """A scratch copy could not be removed; it is named so that it can be removed by hand."""


_UNSAFE_PARTS = (b"//", b"/./", b"/../", b"/.git/")


def _check_path(path: bytes) -> None:
    # Byte searches, not a loop over components: the cost stays linear in the path.
    framed = b"/" + path.lower() + b"/"
    if framed == b"//" or any(part in framed for part in _UNSAFE_PARTS):
        raise ScratchError(f"unsafe path in commit tree: {path!r}")


def check_limits(entries: list[tuple[str, str, bytes]]) -> None:
    """ScratchLimit unless the tree is within MAX_ENTRIES, MAX_DEPTH and MAX_PATH_BYTES."""
    if len(entries) > MAX_ENTRIES:
        raise ScratchLimit(
            f"the commit tree has {len(entries)} entries; oms copies at most {MAX_ENTRIES}"
        )
    for _, _, path in entries:
        if len(path) > MAX_PATH_BYTES:
            raise ScratchLimit(
                f"path in commit tree longer than {MAX_PATH_BYTES} bytes: {path[:80]!r}…"
            )
        if path.count(b"/") >= MAX_DEPTH:
            raise ScratchLimit(
                f"path in commit tree deeper than {MAX_DEPTH} levels: {path[:80]!r}…"
            )


def _tree(repo: Path, sha: str) -> list[tuple[str, str, bytes]]:
    """(mode, object id, path) of every entry below the commit's root tree."""
    out = git(repo, "ls-tree", "-r", "-z", "--full-tree", sha)
    entries = []
    for rec in out.split(b"\0"):
        if not rec:
            continue
        meta, _, path = rec.partition(b"\t")
        mode, _kind, obj = meta.decode("ascii").split(" ")
        entries.append((mode, obj, path))
    return entries


def scratch_parent() -> Path | None:
    """Where scratch copies go: $OMS_SCRATCH_DIR, else /dev/shm (RAM: creating
    thousands of files there is ~10x faster than on a busy disk), else the temp dir."""
    env = os.environ.get("OMS_SCRATCH_DIR")
    if env:
        return Path(env)
    shm = Path("/dev/shm")  # noqa: S108 # nosec B108 -- mkdtemp makes a private dir in it
    if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return None


def copy_commit(
    repo: Path, sha: str, dest_parent: Path | None = None, deadline: Deadline | None = None
) -> Path:
    """Write commit `sha`'s tree into a new private directory and return it.

    ScratchLimit for a tree over the caps (nothing written); BudgetExpired when
    `deadline` passes during the copy (the partial copy is removed).
    """
    entries = _tree(repo, sha)
    check_limits(entries)
    parent = dest_parent if dest_parent is not None else scratch_parent()
    root = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=parent))
    try:
        _write_tree(repo, root, entries, deadline)
    except FileExistsError as exc:
        remove_tree(root)
        raise ScratchError(f"commit tree names a path twice: {exc.filename!r}") from None
    except BaseException:
        remove_tree(root)
        raise
    return root


class _Dirs:
    """Directories of the copy, each made exactly once, parents first (linear in the tree)."""

    def __init__(self, base: bytes, links: set[bytes]) -> None:
        self.base = base
        self.links = links
        self.made: set[bytes] = {b""}

    def ensure(self, d: bytes) -> None:
        missing = []
        while d not in self.made:
            missing.append(d)
            d = d.rpartition(b"/")[0]
        for new in reversed(missing):
            if new in self.links:
                raise ScratchError(f"path goes through a symlink: {new!r}")
            os.mkdir(self.base + b"/" + new, 0o755)
            self.made.add(new)


def _write_tree(
    repo: Path, root: Path, entries: list[tuple[str, str, bytes]], deadline: Deadline | None
) -> None:
    links = {path for mode, _, path in entries if mode == "120000"}
    dirs = _Dirs(os.fsencode(root), links)
    blobs: list[tuple[str, str, bytes]] = []
    for n, (mode, obj, path) in enumerate(entries):
        if deadline is not None and n % CHECK_EVERY == 0:
            deadline.check("while copying the candidate")
        _check_path(path)
        dirs.ensure(path.rpartition(b"/")[0])
        if mode == "160000":
            dirs.ensure(path)
        elif mode in ("100644", "100755", "120000"):
            blobs.append((mode, obj, path))
        else:
            raise ScratchError(f"unsupported entry mode {mode} for {path!r}")
    if blobs:
        _write_blobs(repo, dirs.base, blobs, deadline)


def _write_blobs(
    repo: Path, base: bytes, blobs: list[tuple[str, str, bytes]], deadline: Deadline | None
) -> None:
    proc = subprocess.Popen(
        git_argv(repo, "cat-file", "--batch"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=git_env(),
    )
    assert proc.stdin is not None and proc.stdout is not None
    request = b"".join(obj.encode() + b"\n" for _, obj, _ in blobs)
    feeder = threading.Thread(target=_feed, args=(proc.stdin, request), daemon=True)
    feeder.start()
    out = proc.stdout
    try:
        for n, (mode, obj, path) in enumerate(blobs):
            if deadline is not None and n % CHECK_EVERY == 0:
                deadline.check("while copying the candidate")
            header = out.readline().split()
            if len(header) != 3 or header[0].decode() != obj or header[1] != b"blob":
                raise GitError(f"git cat-file: unexpected answer for {obj}")
            data = out.read(int(header[2]))
            out.read(1)
            target = base + b"/" + path
            if mode == "120000":
                os.symlink(data, target)
                continue
            _create(target, data, 0o755 if mode == "100755" else 0o644)
    finally:
        feeder.join(timeout=5)
        proc.kill()
        proc.wait()
        out.close()


def _create(path: bytes | str, data: bytes, mode: int, dir_fd: int | None = None) -> None:
    """A new file (never an existing one, never through a link) holding exactly `data`."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(path, flags, mode, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _feed(pipe: IO[bytes], data: bytes) -> None:
    try:
        pipe.write(data)
        pipe.close()
    except OSError:
        pass


def _make_writable(root: Path) -> None:
    """Give every directory below `root` back its owner's rwx (no symlink is followed)."""
    stack = [os.fsencode(root)]
    while stack:
        d = stack.pop()
        try:
            os.chmod(d, 0o700)
            with os.scandir(d) as it:
                stack.extend(e.path for e in it if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            continue


def remove_tree(root: Path) -> None:
    """Remove a scratch copy or run directory; ScratchCleanupError if any of it stays."""
    try:
        if not os.path.lexists(root):
            return
        if os.path.islink(root) or not os.path.isdir(root):
            os.unlink(root)
            return
        _make_writable(root)
        shutil.rmtree(root)
    except OSError as exc:
        raise ScratchCleanupError(
            f"cannot remove scratch copy {root}: {exc.strerror or exc}; remove it by hand"
        ) from None


def _owner_pid(name: str) -> int | None:
    for prefix in SWEPT_PREFIXES:
        if name.startswith(prefix):
            pid, sep, _ = name[len(prefix) :].partition("-")
            return int(pid) if sep and pid.isdigit() else None
    return None


def _is_stale(entry: os.DirEntry[str], now: float) -> bool:
    """Ours (by owner and name), a real directory, old, and its oms process is gone."""
    if not entry.name.startswith(SWEPT_PREFIXES) or not entry.is_dir(follow_symlinks=False):
        return False
    st = entry.stat(follow_symlinks=False)
    owners = {os.geteuid()} | ({SANDBOX_HOST_UID} if os.geteuid() == 0 else set())
    if not stat.S_ISDIR(st.st_mode) or st.st_uid not in owners:
        return False
    pid = _owner_pid(entry.name)
    if pid is None:
        return now - st.st_mtime > STALE_UNOWNED_AFTER_S
    return now - st.st_mtime > STALE_AFTER_S and not pid_alive(pid)


def sweep_stale(parents: list[Path] | None = None) -> list[Path]:
    """Remove copies and run directories that died with their oms process; returns them."""
    if parents is None:
        parents = [p for p in {scratch_parent(), Path(tempfile.gettempdir())} if p is not None]
    now, removed = time.time(), []
    for parent in parents:
        try:
            entries = list(os.scandir(parent))
        except OSError:
            continue
        for entry in entries:
            try:
                stale = _is_stale(entry, now)
            except OSError:
                continue
            if stale:
                remove_tree(Path(entry.path))
                removed.append(Path(entry.path))
    return removed


def add_links(root: Path, links: Sequence[tuple[str, str]]) -> list[str]:
    """Make each (repo-relative path, target) symlink in the copy at `root` where the
    candidate has nothing at that path and every directory above it is a real directory
    of the copy (never through a symlink the candidate planted). The paths made."""
    made = []
    for rel, target in links:
        *parents, name = rel.split("/")
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            for part in parents:
                try:
                    nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
                                  | os.O_CLOEXEC, dir_fd=fd)  # fmt: skip
                except OSError:
                    break  # absent, a file or a symlink: no link here
                os.close(fd)
                fd = nxt
            else:
                try:
                    os.symlink(target, name, dir_fd=fd)
                    made.append(rel)
                except FileExistsError:
                    pass  # the candidate has its own: its own code under test
        finally:
            os.close(fd)
    return made


def _walk_dirs(root: Path, parents: Sequence[str]) -> int:
    """A descriptor of `root/parents…`, each made when absent, none followed through a
    symlink; ScratchError when one is a symlink or not a directory."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for part in parents:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            try:
                nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                              dir_fd=fd)  # fmt: skip
            except OSError:
                raise ScratchError(f"cannot place a file below {part!r}: the candidate has a "
                                   "symlink or a file there") from None  # fmt: skip
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def overlay(root: Path, files: Sequence[tuple[str, bytes]]) -> None:
    """Put each (repo-relative path, bytes) into the copy at `root`, replacing whatever
    file or symlink the candidate has there (never following one): the base's versions of
    tests, run against the candidate's code. ScratchError when a directory stands there."""
    for rel, data in files:
        *parents, name = rel.split("/")
        fd = _walk_dirs(root, parents)
        try:
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except IsADirectoryError:
                raise ScratchError(f"cannot place {rel!r}: the candidate has a directory there"
                                   ) from None  # fmt: skip
            _create(name, data, 0o644, dir_fd=fd)
        finally:
            os.close(fd)


def clear_path(root: Path, rel: str) -> None:
    """Remove what the candidate holds at `rel` in the copy (a file or a symlink, never
    followed), making the directories above it: a report path the runner must write anew.
    ScratchError when a directory stands there."""
    *parents, name = rel.split("/")
    fd = _walk_dirs(root, parents)
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        raise ScratchError(f"the report path {rel!r} is a directory in the candidate") from None
    finally:
        os.close(fd)
