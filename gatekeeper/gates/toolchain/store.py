"""Where toolchains live, and the records that say what each tree must be.

Trees: `$OMS_TOOLCHAIN_DIR/<hex>` (default `$XDG_CACHE_HOME/oms/toolchains`), outside
`$OMS_HOME` and every repository: it is bound read-only into checks, and `$OMS_HOME` is
never bound anywhere. Records: `$OMS_HOME/toolchains/<hex>.json`, in the state root that
no sandbox sees; a tree is used only when it still has the digest its record holds.
`<hex>.used` (its mtime) says when a gate last used it, for `oms toolchain gc`.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError

from evidence import state_root
from evidence.state import atomic_write, ensure_private_dir
from gatekeeper.errors import ConfigError, Tampered
from gatekeeper.gates.toolchain.payloads import ToolchainRecord

RECORDS = "toolchains"
HEX_LEN = 64


def toolchain_root() -> Path:
    """The directory trees are built in (absolute, its symlinks resolved)."""
    given = os.environ.get("OMS_TOOLCHAIN_DIR")
    if given:
        root = Path(given)
        if not root.is_absolute():
            raise ConfigError(f"OMS_TOOLCHAIN_DIR must be an absolute path: {given[:200]!r}")
    else:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(
            os.environ.get("HOME") or os.path.expanduser("~"), ".cache"
        )
        root = Path(cache) / "oms" / "toolchains"
    real = Path(os.path.realpath(root))
    state = Path(os.path.realpath(state_root()))
    if real == state or state in real.parents or real in state.parents:
        raise ConfigError(
            f"the toolchain directory {real} must lie outside $OMS_HOME "
            f"({state}): no sandbox may see the state root"
        )
    return real


def hex_of(toolchain_id: str) -> str:
    return toolchain_id.removeprefix("sha256:")


def tree_dir(toolchain_id: str) -> Path:
    return toolchain_root() / hex_of(toolchain_id)


def records_dir() -> Path:
    return state_root() / RECORDS


def read_record(toolchain_id: str) -> ToolchainRecord | None:
    """The record of a prepared toolchain; None when there is none; Tampered when it does
    not fit its model."""
    path = records_dir() / f"{hex_of(toolchain_id)}.json"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Tampered(f"cannot read the toolchain record {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        data = f.read(1 << 20)
    try:
        record = ToolchainRecord.model_validate_json(data)
    except ValidationError:
        raise Tampered(f"the toolchain record {path} does not fit its model") from None
    if record.id != toolchain_id:
        raise Tampered(f"the toolchain record {path} names another toolchain ({record.id})")
    return record


def write_record(record: ToolchainRecord) -> None:
    ensure_private_dir(records_dir(), root=state_root())
    path = records_dir() / f"{hex_of(record.id)}.json"
    atomic_write(path, record.model_dump_json().encode())


def remove_record(toolchain_id: str) -> None:
    for suffix in (".json", ".used"):
        (records_dir() / f"{hex_of(toolchain_id)}{suffix}").unlink(missing_ok=True)


def all_records() -> Iterator[ToolchainRecord]:
    """Every readable record in the state root (one that does not fit is skipped by gc's
    caller through `read_record`'s Tampered)."""
    try:
        names = sorted(os.listdir(records_dir()))
    except FileNotFoundError:
        return
    for name in names:
        stem, _dot, ext = name.partition(".")
        if ext == "json" and len(stem) == HEX_LEN and not name.startswith("."):
            record = read_record(f"sha256:{stem}")
            if record is not None:
                yield record


def mark_used(toolchain_id: str) -> None:
    """Touch `<hex>.used`: gc keeps what gates use."""
    ensure_private_dir(records_dir(), root=state_root())
    path = records_dir() / f"{hex_of(toolchain_id)}.used"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.close(fd)
    os.utime(path)


def last_used(toolchain_id: str) -> float | None:
    try:
        return os.stat(records_dir() / f"{hex_of(toolchain_id)}.used").st_mtime
    except FileNotFoundError:
        return None


def _lock_fd(toolchain_id: str) -> int:
    root = toolchain_root()
    root.mkdir(parents=True, exist_ok=True, mode=0o755)
    return os.open(
        root / f".{hex_of(toolchain_id)}.lock",
        os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600,
    )


@contextmanager
def build_lock(toolchain_id: str) -> Iterator[None]:
    """One prepare of a toolchain at a time (`<root>/.<hex>.lock`, flock)."""
    fd = _lock_fd(toolchain_id)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextmanager
def held(toolchain_id: str) -> Iterator[bool]:
    """The build lock if it is free (True), without waiting; False while a build holds it.
    The lock file goes with the toolchain once gc holds it."""
    fd = _lock_fd(toolchain_id)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
        (toolchain_root() / f".{hex_of(toolchain_id)}.lock").unlink(missing_ok=True)
    finally:
        os.close(fd)
