"""The orchestration state of one repository: `$OMS_HOME/repos/<repo-id>/work.db`.

One SQLite file (stdlib `sqlite3`): WAL, `busy_timeout`, foreign keys on, `synchronous =
FULL` so a committed transition survives a crash, and the schema versioned by `PRAGMA
user_version` with one migration per version, applied in order under `BEGIN IMMEDIATE`.
Every mutation is one `BEGIN IMMEDIATE` transaction (`WorkDb.mutation`): writers queue on
the database lock instead of interleaving, and a transaction that raises changes nothing.

The file is created 0600 in the repository's private state directory. A database written by
a newer oms (a `user_version` above this one's) is refused rather than read half-understood.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evidence import state_root
from evidence.state import ensure_private_dir
from gatekeeper.errors import Unavailable

if TYPE_CHECKING:  # the payload models are for recording a change; a reader needs none
    from gatekeeper.work.payloads import RowSet

DB_FILE = "work.db"
BUSY_TIMEOUT_MS = 60_000

TICKET_STATES = ("pending", "leased", "running", "verifying", "completed", "retryable",
                 "parked", "blocked")  # fmt: skip
ACTIVITIES = ("idle", "working", "blocked", "done")
HEALTH = ("healthy", "parked", "stalled", "stopped")
RUN_KINDS = ("plan", "orchestrate", "consult", "reconcile")
RUN_MODES = ("plan", "research", "implement", "review")
RUN_STATES = ("created", "planning", "awaiting_approval", "implementing", "verifying",
              "completed", "failed", "aborted")  # fmt: skip
# A worker's quota lane (`quotas`): parked `waiting` for its reset, then `resumable`.
QUOTA_STATES = ("waiting", "resumable")
CONDUCTOR_STATES = ("starting", "active", "idle", "dead", "stalled", "blocked", "stopped")
WAITER_STATES = ("armed", "notified", "failed", "superseded")
INTENT_STATES = ("prepared", "advised", "accepted", "refused", "expired")
WORKER_STATES = ("starting", "running", "parked", "stopped", "exited", "dead", "stalled")
DELIVERY_STATES = ("pushed", "pr-open", "confirmed", "failed")
ARTIFACT_KINDS = ("plan", "diff", "log", "report", "metadata", "status", "agent", "directive",
                  "context", "remote_context", "progress", "reconciliation", "critic_trigger",
                  "revision_packet", "fanout", "transfer_manifest")  # fmt: skip


def _in(values: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


# One script per schema version; version N is MIGRATIONS[N - 1]. Never edit a released one.
MIGRATIONS: tuple[str, ...] = (
    f"""
    CREATE TABLE goals (
        id TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        objective TEXT NOT NULL,
        stop_when TEXT NOT NULL,
        horizon TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('open', 'done', 'abandoned')),
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE TABLE tickets (
        id TEXT PRIMARY KEY,
        goal TEXT NOT NULL REFERENCES goals(id),
        version INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN {_in(TICKET_STATES)}),
        activity TEXT NOT NULL CHECK (activity IN {_in(ACTIVITIES)}),
        health TEXT NOT NULL CHECK (health IN {_in(HEALTH)}),
        title TEXT NOT NULL,
        body_blob TEXT,
        body_bytes INTEGER NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        human_hold INTEGER NOT NULL DEFAULT 0 CHECK (human_hold IN (0, 1)),
        reason TEXT,
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE INDEX tickets_by_state ON tickets(state);
    CREATE INDEX tickets_by_goal ON tickets(goal);
    CREATE TABLE leases (
        token_sha256 TEXT PRIMARY KEY,
        ticket TEXT NOT NULL REFERENCES tickets(id),
        state TEXT NOT NULL CHECK (state IN ('active', 'released', 'expired')),
        expires REAL NOT NULL,
        created TEXT NOT NULL,
        ended TEXT
    );
    CREATE UNIQUE INDEX one_active_lease ON leases(ticket) WHERE state = 'active';
    CREATE TABLE dispatches (
        id TEXT PRIMARY KEY,
        ticket TEXT NOT NULL REFERENCES tickets(id),
        lease TEXT NOT NULL REFERENCES leases(token_sha256),
        attempt INTEGER NOT NULL,
        version INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('started', 'ran', 'received', 'ended',
                                              'abandoned')),
        role TEXT NOT NULL,
        run_id TEXT NOT NULL UNIQUE,
        envelope TEXT NOT NULL,
        envelope_digest TEXT NOT NULL,
        run TEXT,
        reason TEXT,
        created TEXT NOT NULL,
        updated TEXT NOT NULL,
        UNIQUE (ticket, attempt)
    );
    CREATE TABLE attempts (
        ticket TEXT NOT NULL REFERENCES tickets(id),
        number INTEGER NOT NULL,
        dispatch TEXT NOT NULL UNIQUE REFERENCES dispatches(id),
        outcome TEXT,
        reflection_blob TEXT,
        PRIMARY KEY (ticket, number)
    );
    CREATE TABLE receipts (
        id TEXT PRIMARY KEY,
        dispatch TEXT NOT NULL UNIQUE REFERENCES dispatches(id),
        ticket TEXT NOT NULL REFERENCES tickets(id),
        commit_sha TEXT NOT NULL,
        body TEXT NOT NULL,
        created TEXT NOT NULL
    );
    CREATE TABLE verifications (
        id TEXT PRIMARY KEY,
        ticket TEXT NOT NULL REFERENCES tickets(id),
        dispatch TEXT NOT NULL REFERENCES dispatches(id),
        receipt TEXT NOT NULL REFERENCES receipts(id),
        lease TEXT NOT NULL REFERENCES leases(token_sha256),
        version INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('started', 'finished', 'abandoned')),
        decision TEXT,
        outcome TEXT,
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE TABLE nonces (
        nonce TEXT PRIMARY KEY,
        op TEXT NOT NULL,
        created TEXT NOT NULL
    );
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        dispatch TEXT REFERENCES dispatches(id),
        provider TEXT NOT NULL,
        version INTEGER NOT NULL,
        activity TEXT NOT NULL CHECK (activity IN {_in(ACTIVITIES)}),
        health TEXT NOT NULL CHECK (health IN {_in(HEALTH)}),
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE TABLE events (
        key TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        body TEXT NOT NULL,
        created TEXT NOT NULL
    );
    CREATE TABLE notifications (
        id TEXT PRIMARY KEY,
        event TEXT NOT NULL REFERENCES events(key),
        version INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'consumed')),
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE TABLE transitions (
        seq INTEGER PRIMARY KEY,
        kind TEXT NOT NULL,
        object TEXT NOT NULL,
        nonce TEXT NOT NULL UNIQUE REFERENCES nonces(nonce),
        time TEXT NOT NULL
    );
    """,
    # v2: runs (thehood's model, `gatekeeper.work.runs`), their artifacts and events.
    f"""
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN {_in(RUN_KINDS)}),
        mode TEXT NOT NULL CHECK (mode IN {_in(RUN_MODES)}),
        version INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN {_in(RUN_STATES)}),
        step TEXT NOT NULL,
        objective TEXT NOT NULL,
        constraints TEXT NOT NULL,
        roles TEXT NOT NULL,
        gate TEXT,
        stop_reason TEXT,
        goal TEXT REFERENCES goals(id),
        ticket TEXT REFERENCES tickets(id),
        parent TEXT REFERENCES runs(id),
        cycles INTEGER NOT NULL DEFAULT 0,
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE INDEX runs_by_updated ON runs(updated);
    CREATE TABLE run_artifacts (
        run TEXT NOT NULL REFERENCES runs(id),
        ref TEXT NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN {_in(ARTIFACT_KINDS)}),
        blob TEXT NOT NULL,
        bytes INTEGER NOT NULL,
        media_type TEXT NOT NULL,
        role TEXT,
        summary TEXT NOT NULL,
        seq INTEGER NOT NULL,
        created TEXT NOT NULL,
        PRIMARY KEY (run, ref)
    );
    CREATE TABLE run_events (
        run TEXT NOT NULL REFERENCES runs(id),
        n INTEGER NOT NULL,
        kind TEXT NOT NULL,
        data TEXT NOT NULL,
        seq INTEGER NOT NULL,
        created TEXT NOT NULL,
        PRIMARY KEY (run, n)
    );
    """,
    # v3: the conductor (`gatekeeper.work.conductor`) and events (`gatekeeper.work.events`).
    # A process is named by (pid, start_ticks): /proc's start time tells PID reuse apart.
    f"""
    CREATE TABLE conductors (
        id TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN {_in(CONDUCTOR_STATES)}),
        socket TEXT NOT NULL,
        session TEXT NOT NULL,
        pane TEXT,
        pid INTEGER,
        start_ticks INTEGER,
        argv TEXT NOT NULL,
        reason TEXT,
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE TABLE waiters (
        generation INTEGER PRIMARY KEY,
        conductor TEXT NOT NULL REFERENCES conductors(id),
        version INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN {_in(WAITER_STATES)}),
        pid INTEGER,
        start_ticks INTEGER,
        notification TEXT,
        reason TEXT,
        conductor_pid INTEGER,
        conductor_start_ticks INTEGER,
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE UNIQUE INDEX one_armed_waiter ON waiters(conductor) WHERE state = 'armed';
    CREATE TABLE intents (
        id TEXT PRIMARY KEY,
        conductor TEXT NOT NULL REFERENCES conductors(id),
        goal TEXT NOT NULL REFERENCES goals(id),
        ticket TEXT NOT NULL REFERENCES tickets(id),
        lease TEXT REFERENCES leases(token_sha256),
        version INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN {_in(INTENT_STATES)}),
        role TEXT NOT NULL,
        body_blob TEXT NOT NULL,
        digest TEXT NOT NULL,
        advised_digest TEXT,
        advice TEXT,
        dispatch TEXT REFERENCES dispatches(id),
        reason TEXT,
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE TABLE teams (
        id TEXT PRIMARY KEY,
        conductor TEXT NOT NULL REFERENCES conductors(id),
        goal TEXT NOT NULL REFERENCES goals(id),
        dispatches TEXT NOT NULL,
        created TEXT NOT NULL
    );
    CREATE TABLE workers (
        id TEXT PRIMARY KEY,
        dispatch TEXT NOT NULL UNIQUE REFERENCES dispatches(id),
        ticket TEXT NOT NULL REFERENCES tickets(id),
        team TEXT REFERENCES teams(id),
        version INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN {_in(WORKER_STATES)}),
        socket TEXT NOT NULL,
        session TEXT NOT NULL,
        pane TEXT,
        pid INTEGER,
        start_ticks INTEGER,
        reason TEXT,
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE TABLE watermarks (
        source TEXT PRIMARY KEY,
        etag TEXT,
        cursor TEXT,
        version INTEGER NOT NULL,
        updated TEXT NOT NULL
    );
    ALTER TABLE events ADD COLUMN seq INTEGER;
    CREATE TABLE batches (
        id TEXT PRIMARY KEY,
        events TEXT NOT NULL,
        digest TEXT NOT NULL UNIQUE,
        version INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'consumed')),
        seq INTEGER NOT NULL,
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE TABLE outbox (
        key TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        body TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'done', 'failed')),
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE TABLE deliveries (
        ticket TEXT PRIMARY KEY REFERENCES tickets(id),
        version INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN {_in(DELIVERY_STATES)}),
        commit_sha TEXT NOT NULL,
        remote TEXT NOT NULL,
        branch TEXT NOT NULL,
        pr_number INTEGER,
        pr_url TEXT,
        reason TEXT,
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    CREATE TABLE quotas (
        worker TEXT PRIMARY KEY REFERENCES workers(id),
        ticket TEXT NOT NULL REFERENCES tickets(id),
        dispatch TEXT NOT NULL REFERENCES dispatches(id),
        version INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN {_in(QUOTA_STATES)}),
        provider TEXT NOT NULL,
        status INTEGER NOT NULL,
        reset TEXT NOT NULL,
        created TEXT NOT NULL,
        updated TEXT NOT NULL
    );
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
# Bookkeeping of the fence itself, proven by the entries (their seq and nonce), not by a fold.
UNTRACKED = frozenset({"nonces", "transitions"})
_CHANGED = "temp.oms_changed"  # filled by TEMP triggers (`WorkDb._track`)


class WorkDbUnavailable(Unavailable):
    """The orchestration database cannot be opened, migrated or written."""


def db_path(repo_id: str, root: Path | None = None) -> Path:
    return (root or state_root()) / "repos" / repo_id / DB_FILE


class WorkDb:
    """One connection to one repository's `work.db`, migrated to `SCHEMA_VERSION`."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self.keys: dict[str, tuple[str, ...]] = {}  # tracked table -> primary-key columns

    @classmethod
    def open(cls, repo_id: str, root: Path | None = None) -> WorkDb:
        return cls.open_path(db_path(repo_id, root))

    @classmethod
    def open_path(cls, path: Path) -> WorkDb:
        """The database at `path` (a rebuild writes one beside work.db, then renames it)."""
        try:
            ensure_private_dir(path.parent)
            if not path.exists():
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
            conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
        except (OSError, sqlite3.Error) as exc:
            raise WorkDbUnavailable(f"cannot open {path}: {_why(exc)}") from None
        db = cls(conn, path)
        db._migrate()
        db._track()
        return db

    @classmethod
    def reader(cls, repo_id: str, root: Path | None = None) -> WorkDb | None:
        """`work.db` as it is, to read from: no migration, no change tracking. None when
        there is none yet or its schema is not `SCHEMA_VERSION` (then open it with `open`,
        which makes or migrates it)."""
        path = db_path(repo_id, root)
        try:
            if not path.is_file() or path.is_symlink():
                return None
            conn = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        except (OSError, sqlite3.Error) as exc:
            raise WorkDbUnavailable(f"cannot open {path}: {_why(exc)}") from None
        db = cls(conn, path)
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA query_only = ON")
            current = db._user_version() == SCHEMA_VERSION
        except sqlite3.Error as exc:
            conn.close()
            raise WorkDbUnavailable(f"cannot read {path}: {_why(exc)}") from None
        if not current:
            conn.close()
            return None
        return db

    def close(self) -> None:
        self.conn.close()

    def _migrate(self) -> None:
        try:
            if self._user_version() == SCHEMA_VERSION:
                return
            with self.mutation():
                have = self._user_version()
                if have > SCHEMA_VERSION:
                    raise WorkDbUnavailable(
                        f"{self.path} has schema {have}; this oms knows up to {SCHEMA_VERSION}"
                    )
                for version in range(have + 1, SCHEMA_VERSION + 1):
                    for statement in _statements(MIGRATIONS[version - 1]):
                        self.conn.execute(statement)
                    self.conn.execute(f"PRAGMA user_version = {version}")
        except sqlite3.Error as exc:
            raise WorkDbUnavailable(f"cannot migrate {self.path}: {_why(exc)}") from None

    def tables(self) -> dict[str, tuple[str, ...]]:
        """Every table a transition may set, with its primary-key columns in order."""
        names = [r[0] for r in self.read("SELECT name FROM sqlite_master WHERE type = 'table' "
                                         "AND name NOT LIKE 'sqlite_%' ORDER BY name")]  # fmt: skip
        out: dict[str, tuple[str, ...]] = {}
        for name in names:
            if name in UNTRACKED:
                continue
            cols = sorted((r["pk"], r["name"]) for r in self.read(f"PRAGMA table_info({name})"))
            out[name] = tuple(c for pk, c in cols if pk > 0)
        return out

    def _track(self) -> None:
        """TEMP triggers (this connection only; the file's schema is untouched) that note the
        key of every row a statement inserts, updates or deletes, so that the fence can record
        what a transition set, whichever code path set it."""
        try:
            self.conn.execute("CREATE TEMP TABLE IF NOT EXISTS oms_changed "
                              "(tbl TEXT NOT NULL, key TEXT NOT NULL)")  # fmt: skip
            self.keys = self.tables()
            for table, pk in self.keys.items():
                for op, ref in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")):
                    self.conn.execute(_trigger(table, pk, op, ref))
                # a key changed by an update: the old key is gone
                self.conn.execute(_trigger(table, pk, "UPDATE", "OLD", "old"))
        except sqlite3.Error as exc:
            raise WorkDbUnavailable(f"cannot track changes to {self.path}: {_why(exc)}") from None

    def changed(self, conn: sqlite3.Connection) -> tuple[RowSet, ...]:
        """The rows the open transaction set so far, each as it is now, sorted by table and
        key; the notes are cleared (what is set next is noted afresh)."""
        keys = conn.execute(f"SELECT DISTINCT tbl, key FROM {_CHANGED}").fetchall()  # noqa: S608 # nosec B608 -- our name
        conn.execute(f"DELETE FROM {_CHANGED}")  # noqa: S608 # nosec B608 -- our name
        out = [_image(conn, str(t), self.keys[str(t)], tuple(json.loads(k))) for t, k in keys]
        return tuple(sorted(out, key=lambda i: (i.table, json.dumps(i.key))))

    def _user_version(self) -> int:
        return int(self.conn.execute("PRAGMA user_version").fetchone()[0])

    @contextmanager
    def mutation(self) -> Iterator[sqlite3.Connection]:
        """One `BEGIN IMMEDIATE` transaction: committed when the block ends, rolled back
        (nothing changed) when it raises."""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise WorkDbUnavailable(f"cannot lock {self.path}: {_why(exc)}") from None
        try:
            yield self.conn
        except BaseException:
            self._rollback()
            raise
        try:
            self.conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise WorkDbUnavailable(f"cannot commit to {self.path}: {_why(exc)}") from None

    def _rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")

    def read(self, sql: str, *args: object) -> list[sqlite3.Row]:
        try:
            return self.conn.execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise WorkDbUnavailable(f"cannot read {self.path}: {_why(exc)}") from None


def _trigger(table: str, pk: tuple[str, ...], op: str, ref: str, tag: str = "") -> str:
    key = "json_array(" + ", ".join(f"{ref}.{c}" for c in pk) + ")"
    name = f"oms_{op.lower()}{tag}_{table}"
    # names from sqlite_master, never from input
    return (f"CREATE TEMP TRIGGER IF NOT EXISTS {name} AFTER {op} ON main.{table} BEGIN "  # noqa: S608 # nosec B608
            f"INSERT INTO oms_changed (tbl, key) VALUES ('{table}', {key}); END")  # fmt: skip


def _image(conn: sqlite3.Connection, table: str, pk: tuple[str, ...],
           key: tuple[Any, ...]) -> RowSet:  # fmt: skip
    from gatekeeper.work.payloads import RowSet

    where = " AND ".join(f"{c} = ?" for c in pk)
    row = conn.execute(f"SELECT * FROM {table} WHERE {where}", key).fetchone()  # noqa: S608 # nosec B608 -- names from sqlite_master
    return RowSet(table=table, key=key,
                  row=None if row is None else {k: row[k] for k in row.keys()})  # fmt: skip


def _statements(script: str) -> list[str]:
    # The migrations hold no ';' inside a statement, so a split is exact.
    return [s.strip() for s in script.split(";") if s.strip()]


def _why(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
