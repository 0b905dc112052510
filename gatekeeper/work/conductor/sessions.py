"""The conductor session record: one row per started conductor, its state fenced and logged.

`create` is called by `oms conductor start` before the tmux pane starts (the record is
durable before anything runs); `move` changes its state under an expected version (CAS),
so a restarted conductor, a watchdog and a waiter never overwrite each other unseen.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gatekeeper.errors import NotFound, UsageError
from gatekeeper.work import payloads as p
from gatekeeper.work.conductor.model import CONDUCTOR_ID_RE, new_id
from gatekeeper.work.conductor.proc import ProcId
from gatekeeper.work.db import CONDUCTOR_STATES
from gatekeeper.work.fence import StaleVersion, Work


@dataclass(frozen=True)
class Conductor:
    id: str
    version: int
    state: str
    socket: str
    session: str
    pane: str | None
    proc: ProcId | None
    argv: tuple[str, ...]
    reason: str | None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "version": self.version, "state": self.state,
                "session": self.session, "pane": self.pane, "reason": self.reason,
                "pid": self.proc.pid if self.proc else None}  # fmt: skip


def checked_id(conductor: str) -> str:
    if not isinstance(conductor, str) or not CONDUCTOR_ID_RE.fullmatch(conductor):
        raise UsageError(f"not a conductor session id (c- and 12 hex digits): {conductor!r}"[:200])
    return conductor


def _view(r: sqlite3.Row) -> Conductor:
    proc = ProcId(r["pid"], r["start_ticks"]) if r["pid"] is not None else None
    return Conductor(r["id"], r["version"], r["state"], r["socket"], r["session"], r["pane"],
                     proc, tuple(json.loads(r["argv"])), r["reason"])  # fmt: skip


def get(work: Work, conductor: str) -> Conductor:
    rows = work.db.read("SELECT * FROM conductors WHERE id = ?", checked_id(conductor))
    if not rows:
        raise NotFound(f"no conductor session {conductor}")
    return _view(rows[0])


def latest(work: Work) -> Conductor | None:
    """The most recently created conductor session of this repository, if any."""
    rows = work.db.read("SELECT * FROM conductors ORDER BY created DESC, rowid DESC LIMIT 1")
    return _view(rows[0]) if rows else None


def _record(work: Work, tx: Any, cid: str, before: str | None, after: str, version: int,
            nonce: str, **detail: p.Small) -> None:  # fmt: skip
    tx.record = p.ConductorChanged(object="conductor", id=cid, from_state=before,
                                   to_state=after, version=version, nonce=nonce,
                                   detail=dict(detail))  # fmt: skip
    tx.target = cid
    tx.subject = f"oms-conductor:{cid}"


def create(work: Work, socket: str, session: str, argv: Sequence[str], nonce: str,
           cid: str | None = None) -> Conductor:  # fmt: skip
    """A new conductor session record in `starting`, durable before its pane starts; `cid`
    is the id made beforehand (`new_id("c")`) when the recorded argv names it."""
    cid = checked_id(cid) if cid is not None else new_id("c")
    with work.fenced(nonce, "conductor.create") as tx:
        tx.run("INSERT INTO conductors (id, version, state, socket, session, argv, created, "
               "updated) VALUES (?, 1, 'starting', ?, ?, ?, ?, ?)",
               cid, socket, session, json.dumps(list(argv)), tx.now, tx.now)  # fmt: skip
        _record(work, tx, cid, None, "starting", 1, nonce, session=session)
    return get(work, cid)


def move(work: Work, conductor: str, expected_version: int, state: str, nonce: str, *,
         pane: str | None = None, proc: ProcId | None = None,
         reason: str | None = None) -> Conductor:  # fmt: skip
    """CAS: the session moves to `state` only from `expected_version`; StaleVersion else."""
    if state not in CONDUCTOR_STATES:
        raise UsageError(f"not a conductor state: {state!r}")
    with work.fenced(nonce, "conductor.move") as tx:
        row = tx.one("SELECT * FROM conductors WHERE id = ?", checked_id(conductor))
        if row is None:
            raise NotFound(f"no conductor session {conductor}")
        if row["version"] != expected_version:
            raise StaleVersion(f"conductor {conductor} is at version {row['version']}, not "
                               f"{expected_version}; nothing changed")  # fmt: skip
        version = row["version"] + 1
        tx.run("UPDATE conductors SET version = ?, state = ?, pane = COALESCE(?, pane), "
               "pid = COALESCE(?, pid), start_ticks = COALESCE(?, start_ticks), reason = ?, "
               "updated = ? WHERE id = ?", version, state, pane,
               proc.pid if proc else None, proc.start_ticks if proc else None, reason, tx.now,
               conductor)  # fmt: skip
        _record(work, tx, conductor, row["state"], state, version, nonce, reason=reason)
    return get(work, conductor)
