"""Where oms keeps its files: `$OMS_HOME`, outside every repository.

Layout: `keys/`, `repos/<repo-id>/evidence/`, `witness/<repo-id>`.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from .errors import StoreUnavailable


def state_root(environ: Mapping[str, str] | None = None) -> Path:
    """`$OMS_HOME`, else `$XDG_STATE_HOME/oms`, else `~/.local/state/oms`."""
    env = os.environ if environ is None else environ
    if env.get("OMS_HOME"):
        return Path(env["OMS_HOME"]).expanduser().absolute()
    if env.get("XDG_STATE_HOME"):
        return Path(env["XDG_STATE_HOME"]).expanduser().absolute() / "oms"
    return Path.home() / ".local" / "state" / "oms"


def repo_id_for(git_common_dir: Path) -> str:
    """A stable id from the repository's git common dir, so worktrees share one log."""
    real = os.path.realpath(git_common_dir)
    return "r" + hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:24]


def ensure_private_dir(path: Path) -> None:
    """Create `path` (and parents) with mode 0700, refusing a symlink in its place."""
    try:
        missing = []
        p = path
        while not os.path.lexists(p):
            missing.append(p)
            p = p.parent
        for d in reversed(missing):  # parents too: mkdir(parents=True) would use the umask
            d.mkdir(mode=0o700, exist_ok=True)
        if path.is_symlink() or not path.is_dir():
            raise StoreUnavailable(f"{path} is not a directory")
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o700)
    except OSError as exc:
        raise StoreUnavailable(f"cannot create {path}: {exc.strerror}") from None


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, mode: int = 0o600, durable: bool = True) -> None:
    """Write by temp file and rename, so readers see the old or the new bytes, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if durable:
            fsync_dir(path.parent)
    except OSError as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise StoreUnavailable(f"cannot write {path.name}: {exc.strerror}") from None
