"""Scan results by content: a hit gives an item's stored findings without starting a scanner.

An entry's key is the SHA-256 of the item's key (its path and the SHA-256 of exactly what
is scanned), the Gitleaks binary digest, the oms scanner-config digest (the code and
config that drive both scanners) and the detect-secrets version: change any and it is
another entry. An entry holds the item's findings as the scanners gave them (scanner,
rule, line, fingerprint, redacted preview: never a secret), before any policy marks them
allowed, so an allow-list change needs no rescan.

Entries live in one SQLite file, `$OMS_HOME/cache/scan.db` (WAL: each write is one
transaction, a reader never sees half of one), each sealed by an HMAC-SHA256 under a
random key kept beside it (`scan.key`, 0600). An entry that does not verify, does not
parse, or was sealed for another key is a miss — never a clean result — and the fresh
scan replaces it. The file is bounded (`OMS_SCAN_CACHE_MAX_BYTES`, default 64 MiB): the
least recently used entries go first. A cache that cannot be opened, read or written is
no cache: the scanners run as they did without one. `OMS_SCAN_CACHE=off` turns it off.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from evidence import StoreUnavailable, state_root
from evidence.state import check_state_dirs
from gatekeeper.errors import OmsError
from gatekeeper.scan.interface import Finding

FORMAT = 1
DEFAULT_MAX_BYTES = 64 << 20
ENV_MAX_BYTES = "OMS_SCAN_CACHE_MAX_BYTES"
ENV_SWITCH = "OMS_SCAN_CACHE"
TOUCH_AFTER_S = 3600  # a hit refreshes its entry's last use at most this often
KEY_BYTES = 32
_QUERY_CHUNK = 500  # keys per SELECT (SQLite's default limit on parameters is 999)
_HEX64 = re.compile(r"[0-9a-f]{64}")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    body BLOB NOT NULL,
    mac BLOB NOT NULL,
    size INTEGER NOT NULL,
    used INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_used ON entries (used);
"""
# The code and settings, besides the scanners' own builds, that decide what is found:
# a change to any of these files is a change of the scanner config.
_SOURCES = (
    "interface.py", "pieces.py", "gitleaks.py", "detect_secrets.py", "prefilter.py",
    "redact.py", "combined.py", "cache.py", "benign.py",
)  # fmt: skip


@cache
def scanner_config_digest() -> str:
    """SHA-256 over oms' scanner config: the Gitleaks config, the detect-secrets settings
    and the code that cuts, maps and fingerprints (OSError when it cannot be read)."""
    h = hashlib.sha256(b"oms-scanner-config-v1\x00%d\x00" % FORMAT)
    here = Path(__file__).parent
    for name in _SOURCES:
        data = (here / name).read_bytes()
        h.update(b"%s %d\x00" % (name.encode(), len(data)) + data)
    return h.hexdigest()


@dataclass(frozen=True)
class Identity:
    """What besides an item decides its findings: the scanners and how oms drives them."""

    gitleaks_sha256: str
    config: str
    detect_secrets: str

    def key(self, item_key: str) -> str:
        text = "\x00".join(("oms-scan-cache", str(FORMAT), self.gitleaks_sha256, self.config,
                            self.detect_secrets, item_key))  # fmt: skip
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Stored:
    """One finding as stored: all of it but the file, which is the item's path."""

    scanner: str
    rule: str
    line: int
    end_line: int | None
    fingerprint: str
    preview: str

    @classmethod
    def of(cls, f: Finding) -> Stored:
        return cls(f.scanner, f.rule, f.line, f.end_line, f.fingerprint, f.preview)

    def at(self, path: str) -> Finding:
        return Finding(self.scanner, self.rule, path, self.line, self.fingerprint, self.preview,
                       end_line=self.end_line)  # fmt: skip

    def row(self) -> list[object]:
        return [self.scanner, self.rule, self.line, self.end_line, self.fingerprint, self.preview]


@dataclass(frozen=True)
class Stats:
    path: str
    entries: int
    bytes: int
    max_bytes: int

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "entries": self.entries, "bytes": self.bytes,
                "max_bytes": self.max_bytes}  # fmt: skip


def enabled() -> bool:
    return os.environ.get(ENV_SWITCH, "").strip().lower() not in ("off", "0", "no", "false")


def max_bytes() -> int:
    raw = os.environ.get(ENV_MAX_BYTES, "").strip()
    try:
        value = int(raw) if raw else DEFAULT_MAX_BYTES
    except ValueError:
        return DEFAULT_MAX_BYTES
    return max(value, 0)


def cache_dir(root: Path | None = None) -> Path:
    return (root or state_root()) / "cache"


class ScanCache:
    """The scan-result cache of one state root; one connection per process, thread-safe."""

    def __init__(self, directory: Path, conn: sqlite3.Connection, key: bytes) -> None:
        self.directory = directory
        self._conn = conn
        self._key = key
        self._lock = threading.Lock()

    @classmethod
    def open(cls, root: Path | None = None, even_if_off: bool = False) -> ScanCache | None:
        """The cache under `root` (default `$OMS_HOME`), made if absent; None when it is
        turned off or cannot be used (the scanners then run without one)."""
        if not enabled() and not even_if_off:
            return None
        root = root or state_root()
        directory = cache_dir(root)
        cached = _OPEN.get(directory)
        if cached is not None:
            return cached
        try:
            made = cls._open(root, directory)
        except (OSError, sqlite3.Error, OmsError, StoreUnavailable):  # the state root's refusals
            return None
        while len(_OPEN) >= _MAX_OPEN:  # one process may use many state roots (tests do)
            _OPEN[next(iter(_OPEN))].close()
        _OPEN[directory] = made
        return made

    @classmethod
    def existing(cls, root: Path | None = None) -> ScanCache | None:
        """The cache as it is, on or off, for `oms cache`; None when there is none yet;
        StoreUnavailable (exit 4) when it cannot be used."""
        root = root or state_root()
        directory = cache_dir(root)
        if directory in _OPEN:
            return _OPEN[directory]
        if not os.path.lexists(directory):
            return None
        try:
            return cls._open(root, directory)
        except (OSError, sqlite3.Error) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise StoreUnavailable(f"cannot use the scan cache in {directory}: {why}") from None

    @classmethod
    def _open(cls, root: Path, directory: Path) -> ScanCache:
        check_state_dirs(root, directory.name, create=True)  # 0700, no link on the way
        key = _key(directory / "scan.key")
        db = directory / "scan.db"
        if db.is_symlink():
            raise OSError("the cache file is a symlink")
        _private(db)
        conn = sqlite3.connect(db, timeout=10, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            conn.close()
            if isinstance(exc, sqlite3.OperationalError):
                raise  # busy or locked: another process has it; no cache this time
            _discard(db)  # not a database at all: start again, empty
            _private(db)
            conn = sqlite3.connect(db, timeout=10, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA)
        return cls(directory, conn, key)

    def _mac(self, key: str, body: bytes) -> bytes:
        return hmac.digest(self._key, key.encode() + b"\x00" + body, "sha256")

    @contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self._conn

    def get(self, keys: Sequence[str]) -> dict[str, list[Stored]]:
        """The entries found for `keys` that verify and parse; every other key is a miss."""
        wanted = list(dict.fromkeys(keys))
        found: dict[str, list[Stored]] = {}
        stale: list[str] = []
        now = int(time.time())
        try:
            with self._locked() as conn:
                for i in range(0, len(wanted), _QUERY_CHUNK):
                    chunk = wanted[i : i + _QUERY_CHUNK]
                    marks = ",".join("?" * len(chunk))
                    rows = conn.execute(
                        f"SELECT key, body, mac, used FROM entries WHERE key IN ({marks})",  # noqa: S608 # nosec B608 -- only ? marks
                        chunk,
                    ).fetchall()
                    for key, body, mac, used in rows:
                        entry = self._verified(key, body, mac)
                        if entry is None:
                            continue
                        found[key] = entry
                        if not isinstance(used, int) or used < now - TOUCH_AFTER_S:
                            stale.append(key)
                if stale:
                    conn.executemany(
                        "UPDATE entries SET used = ? WHERE key = ?", [(now, k) for k in stale]
                    )
        except sqlite3.Error:
            return found  # a read that failed part-way: the rest are misses
        return found

    def _verified(self, key: object, body: object, mac: object) -> list[Stored] | None:
        if not isinstance(key, str) or not isinstance(body, bytes) or not isinstance(mac, bytes):
            return None
        if not hmac.compare_digest(mac, self._mac(key, body)):
            return None
        return _parse(body)

    def put(self, entries: Mapping[str, Sequence[Finding]]) -> None:
        """Store each key's findings (replacing what was there), then keep within the bound."""
        if not entries:
            return
        now = int(time.time())
        rows = []
        for key, findings in entries.items():
            body = json.dumps([Stored.of(f).row() for f in findings], separators=(",", ":"),
                              ensure_ascii=True).encode()  # fmt: skip
            rows.append((key, body, self._mac(key, body), len(key) + len(body) + 32, now))
        try:
            with self._locked() as conn:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.executemany(
                        "INSERT OR REPLACE INTO entries (key, body, mac, size, used)"
                        " VALUES (?, ?, ?, ?, ?)",
                        rows,
                    )
                    _evict(conn, max_bytes())
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
        except sqlite3.Error:
            return  # not stored: the next scan of these items scans them again

    def stats(self) -> Stats:
        with self._locked() as conn:
            count, size = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM entries"
            ).fetchone()
        return Stats(str(self.directory / "scan.db"), int(count), int(size), max_bytes())

    def clear(self) -> Stats:
        """Remove every entry; the stats of what was removed."""
        with self._locked() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                count, size = conn.execute(
                    "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM entries"
                ).fetchone()
                conn.execute("DELETE FROM entries")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("VACUUM")
        return Stats(str(self.directory / "scan.db"), int(count), int(size), max_bytes())

    def close(self) -> None:
        with self._lock:
            self._conn.close()
        _OPEN.pop(self.directory, None)


_OPEN: dict[Path, ScanCache] = {}
_MAX_OPEN = 4


def _evict(conn: sqlite3.Connection, limit: int) -> None:
    """Drop the least recently used entries until the total is within `limit` (to 90% of
    it, so that not every write evicts)."""
    (total,) = conn.execute("SELECT COALESCE(SUM(size), 0) FROM entries").fetchone()
    if total <= limit:
        return
    excess = total - limit * 9 // 10
    doomed = []
    for key, size in conn.execute("SELECT key, size FROM entries ORDER BY used, key"):
        doomed.append((key,))
        excess -= size
        if excess <= 0:
            break
    conn.executemany("DELETE FROM entries WHERE key = ?", doomed)


def _parse(body: bytes) -> list[Stored] | None:
    """The findings of a body exactly as `put` writes them; None for anything else."""
    if body == b"[]":  # most items: nothing found
        return []
    try:
        rows = json.loads(body)
    except ValueError:
        return None
    if not isinstance(rows, list):
        return None
    out = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 6):
            return None
        scanner, rule, line, end_line, fp, shown = row
        if not (isinstance(scanner, str) and isinstance(rule, str) and isinstance(shown, str)):
            return None
        if type(line) is not int or line < 0:
            return None
        if end_line is not None and type(end_line) is not int:
            return None
        if not (isinstance(fp, str) and _HEX64.fullmatch(fp)):
            return None
        out.append(Stored(scanner, rule, line, end_line, fp, shown))
    return out


def mac_key(root: Path | None = None) -> bytes:
    """The cache directory's HMAC key (made once): other caches under it (the hooks' policy
    cache) sign with it too, each under its own domain prefix. OSError or StoreUnavailable
    when the state root cannot be trusted."""
    root = root or state_root()
    check_state_dirs(root, cache_dir(root).name, create=True)
    return _key(cache_dir(root) / "scan.key")


def _key(path: Path) -> bytes:
    """The HMAC key beside the cache: read, or made once (0600, never replacing a file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return _new_key(path)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError("the cache key is not a file")
        key = f.read(KEY_BYTES + 1)
    if len(key) != KEY_BYTES:  # damaged: a new key, under which no old entry verifies
        return _new_key(path, replace=True)
    return key


def _new_key(path: Path, replace: bool = False) -> bytes:
    key = os.urandom(KEY_BYTES)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(key)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
            return key
        try:
            os.link(tmp, path)  # never replaces: another process may have made one first
        except FileExistsError:
            return _key(path)
    finally:
        tmp.unlink(missing_ok=True)
    return key


def _private(db: Path) -> None:
    """The database (made if absent) and any -wal and -shm beside it 0600, before SQLite
    opens it: SQLite makes its -wal and -shm with the database's mode (0644 otherwise)."""
    for p in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if p == db else 0)
        try:
            fd = os.open(p, flags, 0o600)
        except FileNotFoundError:
            continue
        try:
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)


def _discard(db: Path) -> None:
    for p in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        p.unlink(missing_ok=True)
