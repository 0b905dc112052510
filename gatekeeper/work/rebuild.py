"""`oms reconcile work`: a lost or damaged work.db rebuilt from the signed log.

work.db is a projection of the log (`audit.py`): the committed version-2 `work.*` entries,
replayed in seq order (each one's change set, its `transitions` row and its nonce), give
every row back. The log is audited first. The tail entry is replayed only when the old
work.db confirms it committed; unconfirmed, it is left out and named (fail closed: a
transition nobody can prove is not assumed). A log holding committed legacy (version-1)
entries cannot be replayed, and the rebuild refuses. The new database is written beside
work.db and renamed over it; the old one is kept beside it, renamed.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evidence import Entry, EvidenceStore, state_root
from evidence.audit import audit
from gatekeeper.errors import Tampered, Unavailable
from gatekeeper.repo.git import Repo
from gatekeeper.work import payloads as p
from gatekeeper.work.audit import MEMO_FILE, chain
from gatekeeper.work.db import WorkDb, WorkDbUnavailable, db_path


class CannotRebuild(Unavailable):
    """The log cannot give work.db back (entries written before it carried their rows)."""


@dataclass(frozen=True)
class Rebuilt:
    entries: int  # committed entries replayed
    rows: int  # rows of the rebuilt database, bookkeeping aside
    unconfirmed: int | None  # the tail entry's seq when no transitions row confirmed it
    kept: str | None  # where the replaced work.db was moved, if there was one

    def to_json(self) -> dict[str, Any]:
        return {"entries": self.entries, "rows": self.rows, "unconfirmed": self.unconfirmed,
                "kept": self.kept}  # fmt: skip


def rebuild(repo: Repo, root: Path | None = None) -> Rebuilt:
    store = EvidenceStore.open(root or state_root(), repo.repo_id, common_dir=repo.common_dir)
    checked = audit(store)
    if not checked.intact:
        raise Tampered(f"the evidence log does not verify (seq {checked.first_bad_seq}: "
                       f"{checked.reason}); nothing rebuilt from a broken chain")  # fmt: skip
    path = db_path(repo.repo_id, root)
    entries = store.entries(p.WORK_KINDS)
    on = chain(entries, _held(path))
    legacy = [e.seq for e in entries if not p.KINDS_BY_KIND[e.kind].of(e).replayable]
    if legacy:
        raise CannotRebuild(f"the log holds {len(legacy)} work entries written before they "
                            f"carried their rows (first seq {legacy[0]}); work.db cannot be "
                            "rebuilt from it")  # fmt: skip
    done = [e for e in entries if e.seq in on]
    tail = entries[-1].seq if entries and entries[-1].seq not in on else None
    fresh = path.with_name(f"{path.name}.rebuild")
    _remove(fresh)
    rows = _replay(WorkDb.open_path(fresh), store, done)
    kept = _swap(path, fresh)
    (path.parent / MEMO_FILE).unlink(missing_ok=True)
    return Rebuilt(entries=len(done), rows=rows, unconfirmed=tail, kept=kept)


def _held(path: Path) -> dict[int, str]:
    """The old work.db's `transitions`, when it still opens: what confirms the tail."""
    if not path.is_file():
        return {}
    try:
        db = WorkDb.open_path(path)
    except WorkDbUnavailable:
        return {}
    try:
        return {
            int(r["seq"]): str(r["nonce"]) for r in db.read("SELECT seq, nonce FROM transitions")
        }
    except WorkDbUnavailable:
        return {}
    finally:
        db.close()


def _replay(db: WorkDb, store: EvidenceStore, done: list[Entry]) -> int:
    try:
        with db.mutation() as conn:
            conn.execute("PRAGMA defer_foreign_keys = ON")  # a change set is sorted by table
            for entry in done:
                _apply(conn, db, store, entry)
            db.changed(conn)
        return sum(len(db.read(f"SELECT 1 FROM {t}")) for t in db.keys)  # noqa: S608 # nosec B608 -- names from sqlite_master
    finally:
        db.close()


def _apply(conn: sqlite3.Connection, db: WorkDb, store: EvidenceStore, entry: Entry) -> None:
    rec = p.KINDS_BY_KIND[entry.kind].of(entry)
    if rec.changes is None:
        raise CannotRebuild(f"seq {entry.seq} carries no rows; work.db cannot be rebuilt")
    data = store.blobs.get(rec.changes.removeprefix("sha256:"))
    for r in p.ChangeSet.model_validate_json(data).rows:
        pk = db.keys[r.table]
        where = " AND ".join(f"{c} = ?" for c in pk)
        conn.execute(f"DELETE FROM {r.table} WHERE {where}", r.key)  # noqa: S608 # nosec B608 -- names from sqlite_master
        if r.row is None:
            continue
        row = {**r.row, **({"seq": entry.seq} if r.row.get("seq") == p.PENDING else {})}
        cols = ", ".join(row)
        marks = ", ".join("?" for _ in row)
        conn.execute(f"INSERT INTO {r.table} ({cols}) VALUES ({marks})", tuple(row.values()))  # noqa: S608 # nosec B608 -- names from sqlite_master and the change set's own columns
    conn.execute("INSERT INTO nonces (nonce, op, created) VALUES (?, ?, ?)",
                 (rec.nonce, entry.kind.removeprefix("work."), entry.time))  # fmt: skip
    target = rec.ticket or rec.goal or rec.id  # what the audit compares `object` with
    conn.execute("INSERT INTO transitions (seq, kind, object, nonce, time) "
                 "VALUES (?, ?, ?, ?, ?)", (entry.seq, entry.kind, target, rec.nonce,
                                            entry.time))  # fmt: skip


def _swap(path: Path, fresh: Path) -> str | None:
    """`fresh` becomes work.db; the old file (and its WAL) is kept beside it, renamed."""
    kept = path.with_name(f"{path.name}.replaced-{datetime.now(UTC):%Y%m%dT%H%M%S.%fZ}")
    for side in ("", "-wal", "-shm"):
        old = path.with_name(path.name + side)
        if old.exists():
            os.replace(old, kept.with_name(kept.name + side))
    os.replace(fresh, path)
    return str(kept) if kept.exists() else None


def _remove(path: Path) -> None:
    for f in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        f.unlink(missing_ok=True)
