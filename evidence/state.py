"""Where oms keeps its files: `$OMS_HOME`, outside every repository, trusted by owner.

Layout: `keys/`, `repos/<repo-id>/evidence/`, `witness/<repo-id>`.

Trust is checked on every use, as ssh's StrictModes does, by a descriptor walk
from `/` that follows no symlink it has not vetted. Every directory on the way to
the state root must be owned by root or by us and be writable by no one else,
unless it is sticky (`/tmp`: others cannot replace our entries there). The state
root and every directory oms uses inside it must be owned by us, not writable by
group or others, and no symlink. Someone else's directory is refused, never
chmodded into looking private.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from .errors import StoreUnavailable

# O_PATH needs only search permission on the way and opens without reading.
_WALK = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_LINKS = 32  # like the kernel's own bound on symlinks in one lookup


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


def _mode(st: os.stat_result) -> str:
    return f"{stat.S_IMODE(st.st_mode):04o}"


def _check_ancestor(st: os.stat_result, where: str) -> None:
    """A directory above the state root: only root or we may be able to replace its entries."""
    euid = os.geteuid()
    if st.st_uid not in (0, euid):
        raise StoreUnavailable(
            f"{where} is owned by uid {st.st_uid}, not by root or uid {euid}: "
            "that user could replace the oms state root below it"
        )
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise StoreUnavailable(
            f"{where} is writable by group or others (mode {_mode(st)}) and not sticky: "
            "they could replace the oms state root below it"
        )


def _check_private(st: os.stat_result, where: str) -> None:
    """The state root or a directory inside it: ours alone to change."""
    euid = os.geteuid()
    if st.st_uid != euid:
        raise StoreUnavailable(
            f"{where} is owned by uid {st.st_uid}, not by uid {euid} that runs oms; "
            "oms will not use it"
        )
    if st.st_mode & 0o022:
        # Refused, not fixed: whoever could write here may already have changed it.
        raise StoreUnavailable(
            f"{where} is writable by group or others (mode {_mode(st)}); "
            "check its contents, then `chmod go-w` it"
        )


def _read_trusted_link(fd: int, name: str, where: str) -> str:
    """The target of the symlink `name`, if root or we own it (its directory is vetted)."""
    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        raise StoreUnavailable(f"{where} is not a directory")
    if st.st_uid not in (0, os.geteuid()):
        raise StoreUnavailable(
            f"{where} is a symlink owned by uid {st.st_uid}: it could point the state root anywhere"
        )
    return os.readlink(name, dir_fd=fd)


def _make_dir(fd: int, name: str) -> None:
    try:
        os.mkdir(name, 0o700, dir_fd=fd)
    except FileExistsError:
        pass  # made by a concurrent oms: it is checked like any other


def _open_ancestors(parent: Path, create: bool) -> int | None:
    """An O_PATH descriptor of `parent`, reached from `/` one vetted directory at a time;
    None when it is absent and `create` is false. Symlinks on the way are followed only
    when root or we own them."""
    fd = os.open("/", _WALK)
    shown = Path("/")
    todo = list(reversed(parent.parts[1:]))
    links = 0
    try:
        _check_ancestor(os.fstat(fd), str(shown))
        while todo:
            name = todo.pop()
            if name in ("", "."):
                continue
            where = str(shown.parent if name == ".." else shown / name)
            try:
                nfd = os.open(name, _WALK, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                _make_dir(fd, name)
                nfd = os.open(name, _WALK, dir_fd=fd)
            except NotADirectoryError:
                target = _read_trusted_link(fd, name, where)
                links += 1
                if links > _MAX_LINKS:
                    raise StoreUnavailable(f"too many symlinks on the way to {parent}") from None
                todo.extend(reversed(Path(target).parts))
                if os.path.isabs(target):
                    top = os.open("/", _WALK)
                    os.close(fd)
                    fd, shown = top, Path("/")
                    todo.pop()  # the "/" itself
                continue
            os.close(fd)
            fd, shown = nfd, Path(where)
            _check_ancestor(os.fstat(fd), where)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_private(fd: int, name: str, where: str, create: bool) -> int | None:
    """An O_PATH descriptor of the private directory `name` under `fd`, never a symlink."""
    try:
        nfd = os.open(name, _WALK, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            return None
        _make_dir(fd, name)
        nfd = os.open(name, _WALK, dir_fd=fd)
    except NotADirectoryError:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        what = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise StoreUnavailable(
            f"{where} is {what}; oms follows no symlink inside its state root"
        ) from None
    try:
        st = os.fstat(nfd)
        _check_private(st, where)
        if create and st.st_mode & 0o077:
            _tighten(nfd)  # ours and writable by no one else: only reads are closed
    except BaseException:
        os.close(nfd)
        raise
    return nfd


def _tighten(path_fd: int) -> None:
    fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=path_fd)
    try:
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def check_state_dirs(root: Path, *subdirs: str, create: bool = False) -> None:
    """Vet the state root and each of `subdirs` ("/"-separated, relative) on this use.

    With `create`, what is missing is made (mode 0700) and our own directories that
    others can read are tightened to 0700. Without it, absent directories are left
    for the caller to report. StoreUnavailable for anything that is not trusted.
    """
    root = Path(os.path.normpath(root))
    if not root.is_absolute() or root.name in ("", ".", ".."):
        raise StoreUnavailable(f"{root} cannot be a state root")
    try:
        parent = _open_ancestors(root.parent, create)
        if parent is None:
            return
        try:
            top = _open_private(parent, root.name, str(root), create)
        finally:
            os.close(parent)
        if top is None:
            return
        try:
            for sub in subdirs:
                _check_chain(top, root, sub, create)
        finally:
            os.close(top)
    except OSError as exc:
        raise StoreUnavailable(f"cannot use the state root {root}: {exc.strerror}") from None


def _check_chain(top: int, root: Path, sub: str, create: bool) -> None:
    """Vet each directory of `sub` below the state root's descriptor `top`."""
    parts = Path(sub).parts
    if Path(sub).is_absolute() or any(p in (".", "..") for p in parts):
        raise StoreUnavailable(f"{sub!r} is not a directory inside the state root")
    fd, where = top, root
    try:
        for name in parts:
            where = where / name
            nfd = _open_private(fd, name, str(where), create)
            if fd != top:
                os.close(fd)
            fd = top if nfd is None else nfd
            if nfd is None:
                return
    finally:
        if fd != top:
            os.close(fd)


def ensure_private_dir(path: Path, root: Path | None = None) -> None:
    """Create `path` (and what is missing above it) with mode 0700 and vet it.

    Directories from `root` (default: `path` itself) down to `path` are held to the
    state root's rules, those above it to the ancestors' rules.
    """
    base = path if root is None else root
    rel = os.path.relpath(path, base)
    if rel.startswith(".."):
        raise StoreUnavailable(f"{path} is not inside the state root {base}")
    check_state_dirs(base, *(() if rel == "." else (rel,)), create=True)


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
