"""The conductor's waiter: `oms conductor wait-event`, generations CAS-bound to the conductor
session and its process.

A generation is one `waiters` row: `armed` by one waiting process (its `ProcId`), then
`notified` with the batch it woke for, `failed` (it timed out, or the watchdog proved its
process dead) or `superseded` (a new arm replaced it). The unique index allows one armed
generation per conductor; a new arm replaces an armed one only when that one's process is
proven dead (pid and start time: PID reuse cannot fool it) or the conductor process it was
armed for is; otherwise the arm is refused and nothing changes. No daemon: the waiter polls
the database. `consume` moves a pending batch to `consumed`, once.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gatekeeper.errors import Blocked, NotFound, UsageError
from gatekeeper.work import payloads as p
from gatekeeper.work.conductor.model import BATCH_ID_RE
from gatekeeper.work.conductor.proc import ProcId
from gatekeeper.work.conductor.sessions import checked_id
from gatekeeper.work.fence import StaleVersion, Work, new_nonce

WAKE_EXIT = 2  # Claude Code's asyncRewake hook wakes the model on exit 2
POLL_S = 0.5
MAX_TIMEOUT_S = 86_400


class WaiterBusy(Blocked):
    """Another waiter generation of this conductor is armed and its process is alive."""


class WaiterGone(Blocked):
    """This waiter's generation is no longer armed (superseded, failed or notified)."""


class AlreadyConsumed(Blocked):
    """The notification batch was consumed already."""


@dataclass(frozen=True)
class Generation:
    generation: int
    conductor: str
    version: int
    state: str
    proc: ProcId | None
    notification: str | None
    reason: str | None

    def to_json(self) -> dict[str, Any]:
        return {"generation": self.generation, "conductor": self.conductor,
                "version": self.version, "state": self.state,
                "notification": self.notification, "reason": self.reason}  # fmt: skip


def _view(r: sqlite3.Row) -> Generation:
    proc = ProcId(r["pid"], r["start_ticks"]) if r["pid"] is not None else None
    return Generation(r["generation"], r["conductor"], r["version"], r["state"], proc,
                      r["notification"], r["reason"])  # fmt: skip


def _conductor_proc(r: sqlite3.Row) -> ProcId | None:
    if r["conductor_pid"] is None or r["conductor_start_ticks"] is None:
        return None
    return ProcId(r["conductor_pid"], r["conductor_start_ticks"])


def dead_reason(r: sqlite3.Row) -> str | None:
    """Why an armed generation is proven dead (its process, or its conductor's), or None."""
    proc = _view(r).proc
    if proc is None or not proc.alive():
        return "its waiter process is dead"
    cproc = _conductor_proc(r)
    if cproc is not None and not cproc.alive():
        return "the conductor process it was armed for is dead"
    return None


def get(work: Work, generation: int) -> Generation:
    rows = work.db.read("SELECT * FROM waiters WHERE generation = ?", generation)
    if not rows:
        raise NotFound(f"no waiter generation {generation}")
    return _view(rows[0])


def _record(tx: Any, conductor: str, obj: str, oid: str, before: str | None, after: str,
            version: int, nonce: str, **detail: p.Small) -> None:  # fmt: skip
    tx.record = p.WaiterChanged(object=obj, id=oid, from_state=before, to_state=after,
                                version=version, nonce=nonce, detail=dict(detail))  # fmt: skip
    tx.target = conductor
    tx.subject = f"oms-conductor:{conductor}"


def arm(work: Work, conductor: str, nonce: str, proc: ProcId | None = None) -> Generation:
    """A new armed generation for `conductor`, waited on by `proc` (this process by default).
    An armed one whose process is alive refuses (WaiterBusy); a proven-dead one is
    superseded in the same transaction."""
    proc = proc or ProcId.me()
    checked_id(conductor)
    with work.fenced(nonce, "waiter.arm") as tx:
        crow = tx.one("SELECT * FROM conductors WHERE id = ?", conductor)
        if crow is None:
            raise NotFound(f"no conductor session {conductor}")
        if crow["state"] in ("dead", "stopped"):
            raise Blocked(f"conductor {conductor} is {crow['state']}; nothing is armed")
        old = tx.one("SELECT * FROM waiters WHERE conductor = ? AND state = 'armed'", conductor)
        superseded: int | None = None
        if old is not None:
            why = dead_reason(old)
            if why is None:
                raise WaiterBusy(f"waiter generation {old['generation']} of {conductor} is "
                                 "armed and alive; nothing changed")  # fmt: skip
            if tx.run("UPDATE waiters SET state = 'superseded', version = version + 1, "
                      "reason = ?, updated = ? WHERE generation = ? AND version = ?",
                      f"superseded: {why}", tx.now, old["generation"],
                      old["version"]) != 1:  # fmt: skip
                raise StaleVersion(f"waiter generation {old['generation']} changed meanwhile")
            superseded = int(old["generation"])
        try:
            tx.run("INSERT INTO waiters (conductor, version, state, pid, start_ticks, "
                   "conductor_pid, conductor_start_ticks, created, updated) "
                   "VALUES (?, 1, 'armed', ?, ?, ?, ?, ?, ?)",
                   conductor, proc.pid, proc.start_ticks, crow["pid"], crow["start_ticks"],
                   tx.now, tx.now)  # fmt: skip
        except sqlite3.IntegrityError:
            raise WaiterBusy(f"another waiter of {conductor} is armed; nothing changed") from None
        gen = int(tx.one("SELECT last_insert_rowid() AS g")["g"])  # type: ignore[index]
        _record(tx, conductor, "waiter", str(gen), None, "armed", 1, nonce,
                superseded=superseded, pid=proc.pid)  # fmt: skip
    return get(work, gen)


def _move(work: Work, gen: Generation, state: str, nonce: str, *,
          notification: str | None = None, reason: str | None = None) -> Generation:  # fmt: skip
    """CAS: the armed generation `gen` (at its version) to `state`; WaiterGone when it is
    no longer armed at that version."""
    with work.fenced(nonce, f"waiter.{state}") as tx:
        version = gen.version + 1
        if tx.run("UPDATE waiters SET state = ?, version = ?, notification = ?, reason = ?, "
                  "updated = ? WHERE generation = ? AND version = ? AND state = 'armed'",
                  state, version, notification, reason, tx.now, gen.generation,
                  gen.version) != 1:  # fmt: skip
            raise WaiterGone(f"waiter generation {gen.generation} is no longer armed; "
                             "nothing changed")  # fmt: skip
        _record(tx, gen.conductor, "waiter", str(gen.generation), "armed", state, version,
                nonce, notification=notification, reason=reason)  # fmt: skip
    return get(work, gen.generation)


def fail(work: Work, gen: Generation, reason: str, nonce: str) -> Generation:
    """An armed generation to `failed` (timed out, or its process proven dead)."""
    return _move(work, gen, "failed", nonce, reason=reason[:200])


def undelivered(work: Work, conductor: str) -> str | None:
    """The oldest pending batch that no generation of `conductor` was notified of."""
    rows = work.db.read(
        "SELECT id FROM batches WHERE state = 'pending' AND id NOT IN (SELECT notification "
        "FROM waiters WHERE conductor = ? AND notification IS NOT NULL) "
        "ORDER BY seq, created, id LIMIT 1",
        conductor,
    )
    return str(rows[0]["id"]) if rows else None


def wait(work: Work, gen: Generation, timeout_s: float | None, *, poll_s: float = POLL_S,
         sleep: Callable[[float], None] = time.sleep) -> Generation:  # fmt: skip
    """Poll until a batch not yet delivered to the conductor is pending: the generation is
    then `notified` with it. At the timeout it is `failed` (reason `timeout`): an armed
    generation never outlives its process on purpose. WaiterGone when it was superseded."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        now = get(work, gen.generation)
        if now.state != "armed" or now.version != gen.version:
            raise WaiterGone(f"waiter generation {gen.generation} is {now.state}; this "
                             "waiter stops")  # fmt: skip
        batch = undelivered(work, gen.conductor)
        if batch is not None:
            return _move(work, gen, "notified", new_nonce(), notification=batch)
        if deadline is not None and time.monotonic() >= deadline:
            return fail(work, gen, "timeout", new_nonce())
        sleep(poll_s)


MAX_DISPATCHABLE = 20


def dispatchable(work: Work) -> list[dict[str, str]]:
    """What a woken conductor re-reads of canonical state: the tickets it acts on now, of
    open goals, as opaque ids and states only: `verifying` first (a receipt is filed:
    `process_result` is next), then those it may prepare (pending or retryable, not parked
    by health: a parked lane waits for `oms ticket resume` or its quota's reset), oldest
    first, at most MAX_DISPATCHABLE. Never a title or body (GitHub's or anyone's text),
    which reaches a worker as its task file and never the conductor's session."""
    rows = work.db.read(
        "SELECT t.id, t.goal, t.state FROM tickets t JOIN goals g ON g.id = t.goal "
        "WHERE (t.state = 'verifying' OR (t.state IN ('pending', 'retryable') AND "
        "t.health != 'parked')) AND g.state = 'open' "
        "ORDER BY t.state != 'verifying', t.created, t.rowid LIMIT ?", MAX_DISPATCHABLE,
    )  # fmt: skip
    return [{"goal": r["goal"], "ticket": r["id"], "state": r["state"]} for r in rows]


def consume(work: Work, conductor: str, batch: str, nonce: str) -> dict[str, Any]:
    """The conductor read `batch` (a pending notification): it becomes `consumed`, once."""
    checked_id(conductor)
    if not isinstance(batch, str) or not BATCH_ID_RE.fullmatch(batch):
        raise UsageError(f"not a notification id (n- and 12 hex digits): {batch!r}"[:200])
    with work.fenced(nonce, "batch.consume") as tx:
        if tx.one("SELECT id FROM conductors WHERE id = ?", conductor) is None:
            raise NotFound(f"no conductor session {conductor}")
        row = tx.one("SELECT * FROM batches WHERE id = ?", batch)
        if row is None:
            raise NotFound(f"no notification {batch}")
        if row["state"] != "pending":
            raise AlreadyConsumed(f"notification {batch} was consumed already; nothing changed")
        version = int(row["version"]) + 1
        if tx.run("UPDATE batches SET state = 'consumed', version = ?, updated = ? "
                  "WHERE id = ? AND version = ?", version, tx.now, batch,
                  row["version"]) != 1:  # fmt: skip
            raise StaleVersion(f"notification {batch} changed meanwhile; nothing changed")
        _record(tx, conductor, "batch", batch, "pending", "consumed", version, nonce)
    return {"notification": batch, "state": "consumed", "version": version}
