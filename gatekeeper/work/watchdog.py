"""`oms reconcile watchdog`: ONE recovery-only pass over the conductor's records.

What it does, and nothing else:
- a worker `starting`/`running` whose process (pid and start time) is dead becomes `dead`;
  its dispatch, when it has no receipt and no run yet, is ended by the core's own
  `end_dispatch` (the attempt used; the ticket `retryable`, or `blocked` at the limit);
- an expired lease whose holder is proven dead (every worker of the ticket dead and its
  process group gone) is made visible: the ticket's health `stalled`; the core reclaims it
  on the next lease. A holder that may live is only reported;
- a provider session of an open dispatch with no observation for `[conductor]
  stall_after_s` gets health `stalled` (one `parked` for quota waits for its reset);
  pending outbox rows and notification batches older than that are reported stalled (they
  are data: nothing resends them);
- an armed waiter whose process is dead becomes `failed` (its notification stays pending);
- a worker's quota lane (`hook.quota`) past its reset becomes `resumable`, its sessions'
  and ticket's health `healthy` again; one not yet reset is reported `waiting`;
- the newest conductor whose process is dead is claimed (CAS: `starting`, its process
  cleared) and respawned in its tmux session through `start.respawn` when that needs no
  human (its role launchable, the repository confirmed before, tmux there); else it is
  `stalled` with why. An older dead conductor becomes `dead`. A live one is never touched.
It never starts a worker, never repeats valid work, never deletes a workspace. The marks
are one fenced transaction with one `work.watchdog` entry, written only when something
changed; a second pass over the same state changes nothing.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from typing import Any

from gatekeeper.errors import Blocked, NotFound
from gatekeeper.work import payloads as p
from gatekeeper.work.conductor import start, tokens
from gatekeeper.work.conductor.proc import ProcId, group_dead
from gatekeeper.work.conductor.waiter import dead_reason
from gatekeeper.work.events.hooks import quota_reason
from gatekeeper.work.fence import StaleVersion, Work, new_nonce

CATEGORIES = ("workers", "dispatches", "leases", "sessions", "outbox", "batches", "waiters",
              "conductors", "quotas")  # fmt: skip


def _epoch(iso: str) -> float:
    text = iso.rstrip("Z")
    fmt = "%Y-%m-%dT%H:%M:%S.%f" if "." in text else "%Y-%m-%dT%H:%M:%S"
    return datetime.strptime(text, fmt).replace(tzinfo=UTC).timestamp()


def _proc(r: sqlite3.Row) -> ProcId | None:
    if r["pid"] is None or r["start_ticks"] is None:
        return None
    return ProcId(int(r["pid"]), int(r["start_ticks"]))


def _found(**kw: Any) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


def watchdog(work: Work, nonce: str | None = None) -> dict[str, Any]:
    """One pass; per category what it found and what it did, and the entry's seq (None when
    nothing changed)."""
    report: dict[str, list[dict[str, Any]]] = {c: [] for c in CATEGORIES}
    nonce = nonce or new_nonce()
    stall = work.loaded.policy.conductor.stall_after_s
    seq: int | None = None
    changed = 0
    claims: list[tuple[str, int]] = []
    try:
        with work.fenced(nonce, "watchdog") as tx:
            now = work.clock()
            changed += _workers(tx, now, stall, report)
            changed += _leases(tx, now, report)
            changed += _sessions(tx, now, stall, report)
            _stale(tx, now, stall, report)
            changed += _waiters(tx, report)
            changed += _quotas(tx, now, report)
            changed += _conductors(tx, work, now, stall, report, claims)
            if not changed:
                raise _NothingChanged
            counts: dict[str, p.Small] = {c: len(v) for c, v in report.items() if v}
            tx.record = p.WatchdogPassed(object="watchdog", id=nonce, from_state=None,
                                         to_state="passed", version=1, nonce=nonce,
                                         detail={"changed": changed, **counts})  # fmt: skip
            tx.target = "watchdog"
            tx.subject = f"oms-watchdog:{work.repo.repo_id}"
        seq = tx.seq
    except _NothingChanged:
        pass
    _respawn(work, claims, report)
    _dispatches(work, report)  # the core's own transitions, each its own fenced entry
    return {"changed": changed + sum(1 for d in report["dispatches"] if d["did"] == "ended"),
            "evidence_seq": seq, **report}  # fmt: skip


class _NothingChanged(Exception):
    """Roll the pass's transaction back: nothing to record (the nonce stays unused)."""


def _unstarted(r: sqlite3.Row, now: float, stall: int) -> str | None:
    """A `starting` record that never named its process within `stall` seconds of its last
    change (its creation, or the watchdog's recovery claim)."""
    if r["state"] == "starting" and r["pid"] is None and now - _epoch(r["updated"]) >= stall:
        return f"it recorded no process within {stall} s of its start"
    return None


def _workers(tx: Any, now: float, stall: int, report: dict[str, list[dict[str, Any]]]) -> int:
    n = 0
    for w in tx.conn.execute("SELECT * FROM workers WHERE state IN ('starting', 'running', "
                             "'parked') ORDER BY created, id").fetchall():  # fmt: skip
        proc = _proc(w)
        if proc is not None and not proc.alive():
            state, why = "dead", f"its process (pid {proc.pid}) is dead"
        elif (late := _unstarted(w, now, stall)) is not None:
            state, why = "stalled", late
        else:
            continue
        if tx.run("UPDATE workers SET state = ?, version = version + 1, reason = ?, "
                  "updated = ? WHERE id = ? AND version = ?", state, why, tx.now, w["id"],
                  w["version"]) == 1:  # fmt: skip
            n += 1
            report["workers"].append({"id": w["id"], "ticket": w["ticket"], "was": w["state"],
                                      "did": state, "reason": why})  # fmt: skip
    return n


def _holders_dead(tx: Any, ticket: str) -> bool | None:
    """True: every worker of `ticket` is dead and its process group gone; None: no worker
    names a holder (an `oms work dispatch` may hold it: never proven dead here)."""
    workers = tx.conn.execute("SELECT * FROM workers WHERE ticket = ?", (ticket,)).fetchall()
    if not workers:
        return None
    for w in workers:
        proc = _proc(w)  # a worker that never recorded its process is not proven dead
        if proc is None or proc.alive() or not group_dead(proc.pid):
            return False
    return True


def _leases(tx: Any, now: float, report: dict[str, list[dict[str, Any]]]) -> int:
    n = 0
    for row in tx.conn.execute(
        "SELECT l.ticket, l.expires, t.state, t.health, t.version FROM leases l JOIN tickets t "
        "ON t.id = l.ticket WHERE l.state = 'active' AND l.expires <= ? ORDER BY l.ticket",
        (now,),
    ).fetchall():
        dead = _holders_dead(tx, row["ticket"])
        item = {"ticket": row["ticket"], "state": row["state"], "holder": "unknown"
                if dead is None else "dead" if dead else "not proven dead"}  # fmt: skip
        if dead and row["health"] != "stalled":
            tx.run("UPDATE tickets SET health = 'stalled', reason = ?, version = version + 1, "
                   "updated = ? WHERE id = ? AND version = ?",
                   "its lease expired and its holder is dead: the next lease reclaims it",
                   tx.now, row["ticket"], row["version"])  # fmt: skip
            item["did"] = "stalled"
            n += 1
        else:
            item["did"] = "stalled already" if dead else "reported"
        report["leases"].append(item)
    return n


def _sessions(tx: Any, now: float, stall: int, report: dict[str, list[dict[str, Any]]]) -> int:
    n = 0
    for s in tx.conn.execute(
        "SELECT s.* FROM sessions s JOIN dispatches d ON d.id = s.dispatch WHERE d.state IN "
        "('started', 'ran') AND s.health NOT IN ('stalled', 'parked') AND s.activity != 'done' "
        "ORDER BY s.id"
    ).fetchall():
        quiet = now - _epoch(s["updated"])
        if quiet < stall:
            continue
        if tx.run("UPDATE sessions SET health = 'stalled', version = version + 1 WHERE id = ? "
                  "AND version = ?", s["id"], s["version"]) == 1:  # fmt: skip
            n += 1
            report["sessions"].append({"id": s["id"], "dispatch": s["dispatch"],
                                       "quiet_s": int(quiet), "did": "stalled"})  # fmt: skip
    return n


def _stale(tx: Any, now: float, stall: int, report: dict[str, list[dict[str, Any]]]) -> None:
    """Reported only: an old pending row is data someone has to look at, not to resend."""
    for table, col, where in (("outbox", "key", "state = 'pending'"),
                              ("batches", "id", "state = 'pending'")):  # fmt: skip
        rows = tx.conn.execute(f"SELECT {col} AS id, created FROM {table} WHERE {where} "  # noqa: S608 # nosec B608 -- our names
                               "ORDER BY created").fetchall()  # fmt: skip
        for r in rows:
            age = now - _epoch(r["created"])
            if age >= stall:
                report[table].append({"id": r["id"], "age_s": int(age), "did": "reported"})


def _waiters(tx: Any, report: dict[str, list[dict[str, Any]]]) -> int:
    n = 0
    for w in tx.conn.execute("SELECT * FROM waiters WHERE state = 'armed'").fetchall():
        why = dead_reason(w)
        if why is None:
            continue
        if tx.run("UPDATE waiters SET state = 'failed', version = version + 1, reason = ?, "
                  "updated = ? WHERE generation = ? AND version = ?", f"watchdog: {why}",
                  tx.now, w["generation"], w["version"]) == 1:  # fmt: skip
            n += 1
            report["waiters"].append({"generation": w["generation"],
                                      "conductor": w["conductor"], "did": "failed",
                                      "reason": why})  # fmt: skip
    return n


def _quotas(tx: Any, now: float, report: dict[str, list[dict[str, Any]]]) -> int:
    """A quota-parked lane past its reset: `resumable`, its sessions and ticket `healthy`
    again (only the health the quota observation set); one not yet reset: `waiting`. No
    process is signalled: oms never stopped one for quota."""
    n = 0
    for q in tx.conn.execute("SELECT * FROM quotas WHERE state = 'waiting' ORDER BY worker"
                             ).fetchall():  # fmt: skip
        item = {"worker": q["worker"], "ticket": q["ticket"], "reset": q["reset"]}
        if now < _epoch(q["reset"]):
            report["quotas"].append({**item, "did": "waiting"})
            continue
        if (
            tx.run(
                "UPDATE quotas SET state = 'resumable', version = version + 1, updated = ? "
                "WHERE worker = ? AND version = ?",
                tx.now,
                q["worker"],
                q["version"],
            )
            != 1
        ):
            continue  # fmt: skip
        tx.run("UPDATE sessions SET health = 'healthy', version = version + 1, updated = ? "
               "WHERE dispatch = ? AND health = 'parked'", tx.now, q["dispatch"])  # fmt: skip
        tx.run("UPDATE tickets SET health = 'healthy', reason = NULL, version = version + 1, "
               "updated = ? WHERE id = ? AND health = 'parked' AND reason = ?", tx.now,
               q["ticket"], quota_reason(q["reset"]))  # fmt: skip
        n += 1
        report["quotas"].append({**item, "did": "resumable"})
    return n


def _conductors(tx: Any, work: Work, now: float, stall: int,
                report: dict[str, list[dict[str, Any]]],
                claims: list[tuple[str, int]]) -> int:  # fmt: skip
    """A dead conductor process: the newest conductor is claimed for respawn (`starting`,
    its process cleared, version + 1: a racing or later pass sees no dead process to claim)
    when it can be respawned unattended, else `stalled` with why; an older one `dead`."""
    n = 0
    newest = tx.one("SELECT id FROM conductors ORDER BY created DESC, rowid DESC LIMIT 1")
    for c in tx.conn.execute("SELECT * FROM conductors WHERE state IN ('starting', 'active', "
                             "'idle')").fetchall():  # fmt: skip
        proc = _proc(c)
        if proc is not None and not proc.alive():
            died = f"its process (pid {proc.pid}) is dead"
            if newest is None or newest["id"] != c["id"]:
                state, why = "dead", f"{died}; `oms conductor start` resumes it"
            elif (refused := start.unattended_refusal(work)) is None:
                state, why = "starting", f"{died}; the watchdog respawns it"
            else:
                state, why = "stalled", f"{died}; not respawned: {refused}"[:300]
        elif (late := _unstarted(c, now, stall)) is not None:
            state, why = "stalled", late
        else:
            continue
        if state == "starting":  # the recovery claim: at most one per conductor version
            done = tx.run("UPDATE conductors SET state = 'starting', version = version + 1, "
                          "reason = ?, pid = NULL, start_ticks = NULL, pane = NULL, "
                          "updated = ? WHERE id = ? AND version = ?", why, tx.now, c["id"],
                          c["version"])  # fmt: skip
        else:
            done = tx.run("UPDATE conductors SET state = ?, version = version + 1, reason = ?, "
                          "updated = ? WHERE id = ? AND version = ?", state, why, tx.now,
                          c["id"], c["version"])  # fmt: skip
        if done == 1:
            n += 1
            did = "claimed" if state == "starting" else state
            report["conductors"].append({"id": c["id"], "was": c["state"], "did": did,
                                         "reason": why})  # fmt: skip
            if state == "starting":
                claims.append((c["id"], c["version"] + 1))
    return n


def _respawn(work: Work, claims: list[tuple[str, int]],
             report: dict[str, list[dict[str, Any]]]) -> None:  # fmt: skip
    """Each claimed conductor respawned once, after the claim is durable (its own
    `work.conductor` entries); a failure leaves it `stalled` with the reason."""
    for cid, version in claims:
        item = next(i for i in report["conductors"] if i["id"] == cid)
        try:
            c = start.respawn(work, cid, version)
        except (StaleVersion, NotFound) as exc:
            item.update(did="left", reason=str(exc)[:200])
            continue
        item.update(did="respawned" if c.state == "active" else c.state, state=c.state,
                    pane=c.pane, reason=c.reason or item["reason"])  # fmt: skip


def _dispatches(work: Work, report: dict[str, list[dict[str, Any]]]) -> None:
    """Dead workers' dispatches that never ran and have no receipt: ended by the core (its
    rules: the attempt used, retryable or blocked). One that ran is left to its receipt or
    its lease's expiry: its work may be valid."""
    rows = work.db.read(
        "SELECT w.id AS worker, d.id AS dispatch, d.state, d.ticket FROM workers w JOIN "
        "dispatches d ON d.id = w.dispatch JOIN tickets t ON t.id = d.ticket WHERE w.state = "
        "'dead' AND d.state IN ('started', 'ran') AND t.state = 'running' AND NOT EXISTS "
        "(SELECT 1 FROM receipts r WHERE r.dispatch = d.id) ORDER BY d.id"
    )
    for r in rows:
        item = {"dispatch": r["dispatch"], "ticket": r["ticket"], "worker": r["worker"]}
        if r["state"] == "ran":
            report["dispatches"].append({**item, "did": "left: it ran; awaiting its receipt"})
            continue
        try:
            token = tokens.held(work.repo.repo_id, r["ticket"])
            ticket = work.end_dispatch(r["dispatch"], token, f"its worker {r['worker']} died")
        except (NotFound, Blocked) as exc:
            report["dispatches"].append({**item, "did": "left", "reason": str(exc)[:200]})
            continue
        report["dispatches"].append(_found(**item, did="ended", ticket_state=ticket.state))
