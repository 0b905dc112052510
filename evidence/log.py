"""The append-only log file `log.jsonl`: locked, durable appends and a torn-tail check.

Appends hold an exclusive `fcntl` lock on `log.lock`, write whole lines, fsync,
and only then return. A failed write is cut back to the old length, so a
refused append leaves no partial line behind.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import StoreUnavailable, TornTail

LOG_FILE = "log.jsonl"
LOCK_FILE = "log.lock"


@contextmanager
def locked(directory: Path, name: str = LOCK_FILE) -> Iterator[None]:
    """Hold an exclusive `fcntl` lock on `directory/name` (created 0600) for the block."""
    try:
        fd = os.open(directory / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise StoreUnavailable(f"cannot open the lock {name}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_log(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise StoreUnavailable(f"evidence log {path} is missing") from None
    except OSError as exc:
        raise StoreUnavailable(f"cannot read evidence log: {exc.strerror}") from None


def split_lines(data: bytes) -> tuple[list[bytes], bytes]:
    """Complete lines (without newlines) and the torn tail after the last newline."""
    if not data:
        return [], b""
    lines = data.split(b"\n")
    tail = lines.pop()
    return lines, tail


def last_line(path: Path, size: int) -> bytes | None:
    """The last complete line of a log of `size` bytes ending in a newline."""
    if size == 0:
        return None
    with open(path, "rb") as f:
        block = 4096
        pos = size
        buf = b""
        while pos > 0:
            step = min(block, pos)
            pos -= step
            f.seek(pos)
            buf = f.read(step) + buf
            cut = buf.rfind(b"\n", 0, len(buf) - 1)
            if cut >= 0:
                return buf[cut + 1 : -1]
            block *= 2
        return buf[:-1]


def check_tail(path: Path) -> int:
    """Return the log size; refuse a log whose last line is torn."""
    try:
        size = path.stat().st_size
        if size:
            with open(path, "rb") as f:
                f.seek(size - 1)
                if f.read(1) != b"\n":
                    raise TornTail(
                        "evidence log ends in a torn line (a crash mid-append); "
                        "run `oms evidence repair`"
                    )
    except FileNotFoundError:
        raise StoreUnavailable(f"evidence log {path} is missing; run `oms init`") from None
    except OSError as exc:
        raise StoreUnavailable(f"cannot read evidence log: {exc.strerror}") from None
    return size


def append_lines(path: Path, lines: list[bytes]) -> None:
    """Append whole lines and fsync; on any error cut the file back and raise."""
    payload = b"".join(line + b"\n" for line in lines)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
    except OSError as exc:
        raise StoreUnavailable(f"cannot open evidence log for append: {exc.strerror}") from None
    try:
        start = os.fstat(fd).st_size
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError as exc:
            try:
                os.ftruncate(fd, start)
                os.fsync(fd)
            except OSError:
                pass
            raise StoreUnavailable(f"evidence append failed: {exc.strerror}") from None
    finally:
        os.close(fd)
