"""`--output FILE`: written atomically, and never onto anything but a regular file.

The invariant: oms never replaces a device, a symlink, a directory or any other
non-regular file at an output path (a rename onto `/dev/null` as root would replace the
device). The path is checked before the command runs, so a long gate is not wasted, and
again just before the rename.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from gatekeeper.errors import UsageError

STDOUT = "-"


def check_output(path: Path) -> None:
    """Refuse (exit 2) an output path that is not a regular file or a new name in a
    directory that exists."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        if not path.parent.is_dir():
            raise UsageError(f"cannot write {path}: its directory does not exist") from None
        return
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UsageError(f"refusing to write {path}: it is a symlink (name a regular file)")
    if stat.S_ISDIR(st.st_mode):
        raise UsageError(f"refusing to write {path}: it is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"refusing to write {path}: it is not a regular file (a device, "
                         "fifo or socket)")  # fmt: skip


def write_output(path: Path, text: str) -> None:
    """Write by a temporary file beside it and a rename: readers see the old or the new
    bytes, never half; the check runs again right before the rename."""
    check_output(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), 0o644)
            f.write(text)
        check_output(path)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
