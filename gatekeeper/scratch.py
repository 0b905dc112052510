"""A scratch copy of one exact commit, in a private temp dir, for the sandbox to work on.

The tree is read from the object database (`git ls-tree -r` and `git cat-file
--batch`): never the worktree or the index, and no attributes, filters or
export rules, which a candidate's `.gitattributes` could otherwise steer.
Only regular files, executables and symlinks are written; names that are
absolute, contain `..`, `.` or `.git`, or pass through a symlink are refused;
files are created with O_EXCL|O_NOFOLLOW. Symlink targets are kept as data:
inside the sandbox they resolve against the sandbox's own filesystem.
Submodules (gitlinks) become empty directories.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from .errors import UsageError
from .git import GitError, git, git_argv, git_env


class ScratchError(UsageError):
    """The commit's tree cannot be copied safely."""


def _check_path(path: bytes, links: set[bytes]) -> None:
    parts = path.split(b"/")
    if path.startswith(b"/") or any(p in (b"", b".", b"..") or p.lower() == b".git" for p in parts):
        raise ScratchError(f"unsafe path in commit tree: {path!r}")
    for i in range(1, len(parts)):
        if b"/".join(parts[:i]) in links:
            raise ScratchError(f"path goes through a symlink: {path!r}")


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


def copy_commit(repo: Path, sha: str, dest_parent: Path | None = None) -> Path:
    """Write commit `sha`'s tree into a new private directory and return it."""
    entries = _tree(repo, sha)
    parent = dest_parent if dest_parent is not None else scratch_parent()
    root = Path(tempfile.mkdtemp(prefix="oms-scratch-", dir=parent))
    try:
        _write_tree(repo, root, entries)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    return root


def _write_tree(repo: Path, root: Path, entries: list[tuple[str, str, bytes]]) -> None:
    base = os.fsencode(root)
    links = {path for mode, _, path in entries if mode == "120000"}
    made: set[bytes] = {b""}
    blobs: list[tuple[str, str, bytes]] = []
    for mode, obj, path in entries:
        _check_path(path, links)
        parent = path.rpartition(b"/")[0]
        if parent not in made:
            os.makedirs(base + b"/" + parent, mode=0o755, exist_ok=True)
            p = parent
            while p and p not in made:
                made.add(p)
                p = p.rpartition(b"/")[0]
        if mode == "160000":
            os.mkdir(base + b"/" + path, 0o755)
        elif mode in ("100644", "100755", "120000"):
            blobs.append((mode, obj, path))
        else:
            raise ScratchError(f"unsupported entry mode {mode} for {path!r}")
    if not blobs:
        return
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
        for mode, obj, path in blobs:
            header = out.readline().split()
            if len(header) != 3 or header[0].decode() != obj or header[1] != b"blob":
                raise GitError(f"git cat-file: unexpected answer for {obj}")
            data = out.read(int(header[2]))
            out.read(1)
            target = base + b"/" + path
            if mode == "120000":
                os.symlink(data, target)
                continue
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(target, flags, 0o755 if mode == "100755" else 0o644)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
    finally:
        feeder.join(timeout=5)
        proc.kill()
        proc.wait()
        out.close()


def _feed(pipe: object, data: bytes) -> None:
    try:
        pipe.write(data)  # type: ignore[attr-defined]
        pipe.close()  # type: ignore[attr-defined]
    except OSError:
        pass
