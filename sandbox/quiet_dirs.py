"""Bound paths already walked for unix sockets, remembered across runs by their directories.

`resolve_ro_paths` lists every entry below a bound path to refuse a socket; for the agent's
own bindings (oms' venv, the interpreter: tens of thousands of entries) that walk is most of
a run's in-process time. A walk that found none is remembered as the lstat (device, inode,
mtime, ctime) of every directory it listed: a socket, file or directory made, removed or
renamed below one changes that directory's mtime and ctime, and a mount over one changes
what lstat finds there. So the next run lstats the directories instead of listing them.

Any doubt is a miss and a full walk: a directory changed, gone or not a directory; a walk
with a directory whose ctime was within `RECENT_NS` of its start is not remembered (a change
in the same coarse clock tick would leave that ctime as it was); a cache file not this
user's own, writable by others, or unreadable. The file lives under $OMS_HOME (the caller
names it), written whole by rename; no fsync: a lost or torn cache is only a miss.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Collection
from pathlib import Path

RECENT_NS = 2_000_000_000  # coarser than any local filesystem's timestamps
MAX_CACHE_BYTES = 16 << 20
Dir = tuple[int, int, int, int]  # st_dev, st_ino, st_mtime_ns, st_ctime_ns


def settled(ctime_ns: int, reference_ns: int) -> bool:
    """True when a ctime is older than `reference_ns` (time.time_ns, taken when the stat was
    recorded) by `RECENT_NS`: a change after the stat cannot leave that ctime as it was. The
    ctime fence of every stat-keyed cache oms keeps (also scan/verified.py)."""
    return ctime_ns <= reference_ns - RECENT_NS


def _dir(st: os.stat_result) -> Dir:
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns


class QuietDirs:
    """The remembered walks in one cache file (`path` None: none remembered, none kept)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._walks: dict[str, dict[str, list[int]]] = self._load() if path else {}
        self._dirty = False

    def _load(self) -> dict[str, dict[str, list[int]]]:
        assert self.path is not None  # nosec B101 -- __init__'s condition
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return {}
        try:
            st = os.fstat(fd)
            if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid()
                    or st.st_mode & 0o022 or st.st_size > MAX_CACHE_BYTES):  # fmt: skip
                return {}
            data = json.loads(os.read(fd, MAX_CACHE_BYTES + 1))
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}
        finally:
            os.close(fd)

    @staticmethod
    def key(root: Path, masked: Collection[str]) -> str:
        return "\0".join([str(root), *sorted(masked)])

    def covers(self, key: str) -> bool:
        """True when the walk under `key` found no socket and no directory of it changed."""
        dirs = self._walks.get(key)
        if not isinstance(dirs, dict) or not dirs:
            return False
        for path, was in dirs.items():
            try:
                st = os.lstat(path)
            except OSError:
                return False
            if not stat.S_ISDIR(st.st_mode) or list(_dir(st)) != was:
                return False
        return True

    def remember(self, key: str, listed: dict[str, os.stat_result], started_ns: int) -> None:
        """A walk under `key` that found no socket, begun at `started_ns` (time.time_ns), and
        the lstat of each directory it listed; not kept if any changed close to its start."""
        if self.path is None or not all(settled(st.st_ctime_ns, started_ns)
                                        for st in listed.values()):  # fmt: skip
            return
        self._walks[key] = {p: list(_dir(st)) for p, st in listed.items()}
        self._dirty = True

    def save(self) -> None:
        """Write the walks remembered since loading (best effort: a cache)."""
        if self.path is None or not self._dirty:
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        try:
            os.makedirs(self.path.parent, mode=0o700, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(self._walks, fh, separators=(",", ":"))
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)
        self._dirty = False
