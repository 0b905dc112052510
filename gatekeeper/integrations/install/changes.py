"""A planned edit of one client config file, and reading and writing such files safely.

A config path may sit in a hostile repository (project scope): a symlink there could send
oms' write anywhere, a FIFO could hang it, a device could be clobbered. So every component
below the scope's root is checked with lstat, the file is opened with O_NOFOLLOW and
checked again after opening, and the new bytes replace the old by rename.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gatekeeper.errors import UsageError

Status = Literal["created", "updated", "removed", "unchanged"]
NEW_FILE_MODE = 0o644


@dataclass(frozen=True)
class FileEdit:
    """One file: its bytes before (None: absent) and after (None: delete it), and what
    oms changes in it, in words."""

    path: Path
    root: Path  # the scope's root (home or repository top): no symlink below it is followed
    before: bytes | None
    after: bytes | None
    what: tuple[str, ...]

    @property
    def status(self) -> Status:
        if self.before == self.after:
            return "unchanged"
        if self.before is None:
            return "created"
        return "removed" if self.after is None else "updated"


def _refuse_link(path: Path, root: Path) -> None:
    """Refuse a symlink or non-directory at any component from `root` down to `path`'s
    parent, and a symlink or non-regular file at `path`."""
    parts = path.relative_to(root).parts
    here = root
    for part in parts[:-1]:
        here = here / part
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"refusing {path}: {here} is a symlink or not a directory")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise UsageError(f"refusing {path}: it is {kind}; oms edits regular files only")


def read_config(path: Path, root: Path) -> bytes | None:
    """The file's bytes, or None when it does not exist."""
    _refuse_link(path, root)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise UsageError(f"refusing {path}: not a regular file")
        return f.read()


def write_config(path: Path, root: Path, data: bytes) -> None:
    """Replace `path` by rename from a new file beside it, keeping the old file's mode."""
    _refuse_link(path, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    _refuse_link(path, root)  # the directories just made, or raced in
    try:
        mode = stat.S_IMODE(os.lstat(path).st_mode)
    except FileNotFoundError:
        mode = NEW_FILE_MODE
    tmp = path.with_name(f".{path.name}.oms-{os.getpid()}.tmp")
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # the umask may have narrowed it
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None


def remove_config(path: Path, root: Path) -> None:
    _refuse_link(path, root)
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def apply(edits: Sequence[FileEdit]) -> None:
    """Write every changed file, each only if it still holds the bytes the plan read (a
    running client may rewrite its own config meanwhile)."""
    for edit in edits:
        if edit.status == "unchanged":
            continue
        if read_config(edit.path, edit.root) != edit.before:
            raise UsageError(f"{edit.path} changed while oms was editing it; run again")
        if edit.after is None:
            remove_config(edit.path, edit.root)
        else:
            write_config(edit.path, edit.root, edit.after)
