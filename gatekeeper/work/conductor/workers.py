"""Worker panes: one per accepted dispatch, on the conductor's private tmux server.

`start_worker` records the worker (`starting`, fenced, one evidence entry) BEFORE its pane
exists; the pane runs `oms conductor worker` outside the sandbox, which runs the executor
under `oms agent run` and files the dispatch-bound receipt. A dispatch has at most one
worker (the table's UNIQUE key and a check in the same transaction).

`control` acts on a worker through its recorded process identity (`ProcId`, never pane
text): observe (a dead process -> `dead`, and a dispatch with no receipt ends), park
(SIGSTOP), resume (SIGCONT), stop (SIGTERM, then SIGKILL and the pane gone). Every move is
CAS on the worker's version as read when the action began; a refusal changes nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from gatekeeper.agent.quota import iso
from gatekeeper.agent.run import agent_run
from gatekeeper.agent.worker_route import EndRule
from gatekeeper.errors import Blocked, NotFound, UsageError, refusal
from gatekeeper.work import budget
from gatekeeper.work import payloads as p
from gatekeeper.work.conductor import tokens
from gatekeeper.work.conductor.launch import executor_request, worker_pane_argv
from gatekeeper.work.conductor.model import WORKER_ID_RE, new_id
from gatekeeper.work.conductor.proc import ProcId
from gatekeeper.work.conductor.tmux import Pane, Tmux, TmuxUnavailable, session_for, socket_for
from gatekeeper.work.dispatch import LEASE_MARGIN_S, no_result, settle, task_document
from gatekeeper.work.events.hooks import ParkObservation, observe_parked
from gatekeeper.work.fence import StaleVersion, Work, new_nonce
from gatekeeper.work.providers.base import receipt, stdout_of
from gatekeeper.work.roles import check, require, resolve

Action = Literal["observe", "park", "resume", "stop"]
LIVE = ("starting", "running", "parked")
STOP_GRACE_S = 5.0


@dataclass(frozen=True)
class WorkerView:
    id: str  # w-<12 hex>
    dispatch: str
    ticket: str
    team: str | None
    state: str  # db.WORKER_STATES
    version: int
    pane: str | None
    reason: str | None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "dispatch": self.dispatch, "ticket": self.ticket,
                "team": self.team, "state": self.state, "version": self.version,
                "reason": self.reason}  # fmt: skip


@dataclass(frozen=True)
class _Row:
    view: WorkerView
    socket: str
    session: str
    proc: ProcId | None


def checked_id(worker: str) -> str:
    if not isinstance(worker, str) or not WORKER_ID_RE.fullmatch(worker):
        raise UsageError(f"not a worker id (w- and 12 hex digits): {worker!r}"[:200])
    return worker


def _row(r: sqlite3.Row) -> _Row:
    view = WorkerView(r["id"], r["dispatch"], r["ticket"], r["team"], r["state"],
                      r["version"], r["pane"], r["reason"])  # fmt: skip
    proc = ProcId(r["pid"], r["start_ticks"]) if r["pid"] is not None else None
    return _Row(view, r["socket"], r["session"], proc)


def _read(work: Work, worker_id: str) -> _Row:
    rows = work.db.read("SELECT * FROM workers WHERE id = ?", checked_id(worker_id))
    if not rows:
        raise NotFound(f"no worker {worker_id}")
    return _row(rows[0])


def get(work: Work, worker_id: str) -> WorkerView:
    return _read(work, worker_id).view


def listed(work: Work, ticket: str | None = None) -> list[WorkerView]:
    if ticket is None:
        rows = work.db.read("SELECT * FROM workers ORDER BY created, rowid")
    else:
        rows = work.db.read("SELECT * FROM workers WHERE ticket = ? ORDER BY created, rowid",
                            ticket)  # fmt: skip
    return [_row(r).view for r in rows]


def proc_of(work: Work, worker_id: str) -> ProcId | None:
    """The recorded process of a worker's pane (the watchdog proves it dead by this)."""
    return _read(work, worker_id).proc


def _evidence(tx: Any, wid: str, ticket: str, before: str | None, after: str, version: int,
              nonce: str, **detail: p.Small) -> None:  # fmt: skip
    tx.record = p.WorkerChanged(object="worker", id=wid, ticket=ticket, from_state=before,
                                to_state=after, version=version, nonce=nonce,
                                detail=dict(detail))  # fmt: skip
    tx.target = wid
    tx.subject = f"oms-worker:{wid}"


def move(work: Work, worker_id: str, expected_version: int, state: str, nonce: str, *,
         pane: Pane | None = None, proc: ProcId | None = None, reason: str | None = None,
         health: str | None = None) -> WorkerView:  # fmt: skip
    """CAS: the worker moves to `state` only from `expected_version`; StaleVersion else.
    `health` also sets its ticket's health (parked / healthy)."""
    with work.fenced(nonce, "worker.move") as tx:
        row = tx.one("SELECT * FROM workers WHERE id = ?", checked_id(worker_id))
        if row is None:
            raise NotFound(f"no worker {worker_id}")
        if row["version"] != expected_version:
            raise StaleVersion(f"worker {worker_id} is at version {row['version']}, not "
                               f"{expected_version}; nothing changed")  # fmt: skip
        version = row["version"] + 1
        tx.run("UPDATE workers SET version = ?, state = ?, pane = COALESCE(?, pane), "
               "pid = COALESCE(?, pid), start_ticks = COALESCE(?, start_ticks), reason = ?, "
               "updated = ? WHERE id = ?", version, state, pane.id if pane else None,
               proc.pid if proc else None, proc.start_ticks if proc else None,
               reason[:300] if reason else None, tx.now, worker_id)  # fmt: skip
        if health is not None:
            tx.run("UPDATE tickets SET health = ?, updated = ? WHERE id = ?", health, tx.now,
                   row["ticket"])  # fmt: skip
        _evidence(
            tx,
            worker_id,
            row["ticket"],
            row["state"],
            state,
            version,
            nonce,
            reason=reason[:200] if reason else None,
            pane=pane.id if pane else None,
        )
    return get(work, worker_id)


# -- start --------------------------------------------------------------------------------


def start_worker(work: Work, dispatch_id: str, nonce: str, team: str | None = None) -> WorkerView:
    """Start the pane of an accepted (`started`) dispatch: the record first (fenced), then
    the pane running `oms conductor worker` outside, which runs the executor under `oms agent
    run`. A dispatch that has a worker already is refused (never a duplicate)."""
    d = work.dispatch(dispatch_id)
    tokens.held(work.repo.repo_id, d.ticket)  # NotFound: oms holds no lease to run it with
    repo_id = work.repo.repo_id
    socket, session = str(socket_for(repo_id)), session_for(repo_id)
    wid = new_id("w")
    with work.fenced(nonce, "worker.start") as tx:
        dr = tx.one("SELECT state, ticket FROM dispatches WHERE id = ?", d.id)
        if dr is None or dr["state"] != "started":
            state = dr["state"] if dr else "gone"
            raise Blocked(f"dispatch {d.id} is {state}, not started; no worker started")
        if tx.one("SELECT id FROM workers WHERE dispatch = ?", d.id) is not None:
            raise Blocked(f"dispatch {d.id} has a worker already; no second one started")
        tx.run("INSERT INTO workers (id, dispatch, ticket, team, version, state, socket, "
               "session, created, updated) VALUES (?, ?, ?, ?, 1, 'starting', ?, ?, ?, ?)",
               wid, d.id, dr["ticket"], team, socket, session, tx.now, tx.now)  # fmt: skip
        _evidence(tx, wid, dr["ticket"], None, "starting", 1, nonce, dispatch=d.id)
    try:
        tm = Tmux(socket)
        argv = worker_pane_argv(work.repo.top, wid)
        if tm.has_session(session):
            pane = tm.new_window(session, wid, argv, cwd=work.repo.top)
        else:
            pane = tm.new_session(session, wid, argv, cwd=work.repo.top)
    except (TmuxUnavailable, Blocked) as exc:
        move(work, wid, 1, "dead", new_nonce(), reason=f"the pane did not start: {exc}")
        raise
    proc = ProcId.of(pane.pid)
    try:
        if proc is None:
            return move(work, wid, 1, "dead", new_nonce(), pane=pane,
                        reason="the pane's process ended before it was recorded")  # fmt: skip
        return move(work, wid, 1, "running", new_nonce(), pane=pane, proc=proc)
    except StaleVersion:  # the pane moved it already (it ran that fast), or a stop came first
        now = get(work, wid)
        if now.state == "stopped":  # stopped while starting: what started is ended too
            _terminate(proc, socket, pane.id)
        return now


# -- control ------------------------------------------------------------------------------


def _descendants(pid: int) -> list[int]:
    """`pid` and every process below it (by /proc ppid), parents first."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read(4096).decode("ascii", "replace")
        except OSError:
            continue
        tail = raw[raw.rfind(")") + 2 :].split()
        if len(tail) > 1 and tail[1].isdigit():
            children.setdefault(int(tail[1]), []).append(int(name))
    out, todo = [], [pid]
    while todo:
        cur = todo.pop(0)
        out.append(cur)
        todo.extend(children.get(cur, []))
    return out


def _signal_tree(proc: ProcId, sig: signal.Signals) -> None:
    """`sig` to every process group of the pane's process tree (the sandbox runs in its own
    session, below the pane's). SIGSTOP spares the pane's own process: tmux continues a
    stopped pane process at once, and it only waits on the agent, which is what parks."""
    if not proc.alive():
        return
    groups: list[int] = []
    tree = _descendants(proc.pid)
    for pid in tree[1:] if sig == signal.SIGSTOP else tree:
        with contextlib.suppress(OSError):
            g = os.getpgid(pid)
            if g not in groups and g > 1:
                groups.append(g)
    for g in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(g, sig)


def _end_if_unreceived(work: Work, ticket: str, dispatch: str, reason: str) -> None:
    """A dispatch with no receipt ends (its ticket `retryable`, or `blocked`); when the
    lease is gone or expired, it stays for the watchdog (a new lease recovers it)."""
    if work.dispatch(dispatch).state not in ("started", "ran"):
        return
    try:
        token = tokens.held(work.repo.repo_id, ticket)
        work.end_dispatch(dispatch, token, reason)
    except (Blocked, NotFound):
        pass


def control(work: Work, worker_id: str, action: Action, nonce: str) -> WorkerView:
    """observe (re-read the pane's liveness, record a change), park, resume, stop."""
    if action not in ("observe", "park", "resume", "stop"):
        raise UsageError(f"not a worker action: {action!r} (observe, park, resume, stop)")
    row = _read(work, worker_id)
    w = row.view
    alive = row.proc is not None and row.proc.alive()
    if action == "observe":
        if w.state not in LIVE or alive or (w.state == "starting" and row.proc is None):
            return w
        moved = move(work, w.id, w.version, "dead", nonce, reason="the pane's process is gone")
        _end_if_unreceived(work, w.ticket, w.dispatch, "the worker's pane died")
        return moved
    if w.state not in LIVE:
        raise Blocked(f"worker {w.id} is {w.state}; nothing to {action}")
    if action != "stop" and (row.proc is None or not alive):
        raise Blocked(f"worker {w.id}'s process is not running; observe it (nothing changed)")
    if action == "park":
        if w.state != "running":
            raise Blocked(f"worker {w.id} is {w.state}, not running; nothing changed")
        return _signalled(work, row, signal.SIGSTOP, signal.SIGCONT, "parked", "parked", nonce)
    if action == "resume":
        if w.state != "parked":
            raise Blocked(f"worker {w.id} is {w.state}, not parked; nothing changed")
        return _signalled(work, row, signal.SIGCONT, signal.SIGSTOP, "running", "healthy", nonce)
    return _stop(work, row, nonce)


def _signalled(work: Work, row: _Row, sig: signal.Signals, undo: signal.Signals, state: str,
               health: str, nonce: str) -> WorkerView:  # fmt: skip
    assert row.proc is not None
    _signal_tree(row.proc, sig)
    try:
        return move(work, row.view.id, row.view.version, state, nonce, health=health)
    except Exception:
        _signal_tree(row.proc, undo)  # the refusal leaves the process as it was
        raise


def _terminate(proc: ProcId | None, socket: str, pane: str | None) -> None:
    """The pane's process tree ended (SIGCONT, SIGTERM, SIGKILL after a grace), its pane
    killed."""
    if proc is not None:
        _signal_tree(proc, signal.SIGCONT)
        _signal_tree(proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while proc.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        _signal_tree(proc, signal.SIGKILL)
    if pane:
        with contextlib.suppress(TmuxUnavailable, Blocked):
            Tmux(socket).kill_pane(pane)


def _stop(work: Work, row: _Row, nonce: str) -> WorkerView:
    """Recorded `stopped` first (so the pane's own process leaves it so), then the process
    tree ended (SIGCONT, SIGTERM, SIGKILL after a grace), the pane killed, and a dispatch
    with no receipt ended."""
    w = move(work, row.view.id, row.view.version, "stopped", nonce, health="healthy",
             reason="stopped by a worker control")  # fmt: skip
    _terminate(row.proc, row.socket, row.view.pane)
    _end_if_unreceived(work, w.ticket, w.dispatch, "the worker was stopped")
    return get(work, w.id)


# -- the pane's own process ---------------------------------------------------------------


def run_worker(work: Work, worker_id: str) -> int:
    """`oms conductor worker`: the dispatch's executor under `oms agent run` with the pane
    as its terminal, then the run recorded and the receipt filed as `oms dispatch` does (a
    commit -> receipt -> `verifying`; none -> the dispatch ends), and the worker `exited`
    (left as it is when a control stopped it meanwhile). Its exit code: 0 with a receipt."""
    row = _read(work, worker_id)
    if row.view.state not in ("starting", "running"):
        raise Blocked(f"worker {worker_id} is {row.view.state}; it does not run")
    d = work.dispatch(row.view.dispatch)
    if d.state != "started":
        raise Blocked(f"dispatch {d.id} is {d.state}, not started; nothing run")
    token = tokens.held(work.repo.repo_id, d.ticket)
    role = resolve(work.loaded, d.envelope.role)
    rule = None
    if role.provider.startswith("command:"):
        role = require(role, unattended=True)
    elif check(role, unattended=True, worker_pane=True).eligible:
        rule = EndRule(nobody_attached(row.socket, os.environ.get("TMUX_PANE")))
    else:  # a subscription login (or a role not marked unattended): asks at the pane
        role = require(role, unattended=False)
    timeout_s = max(1, min(role.timeout_s, int(work.lease_left(d.ticket)) - LEASE_MARGIN_S))
    doc = task_document(work, d)
    bounds = budget.bounds(budget.snapshot(work, d.ticket))  # every earlier run counted
    reason: str | None
    try:
        out = agent_run(executor_request(role, work.repo.top, d, doc, worker_id, timeout_s,
                                         rule, bounds))  # fmt: skip
        if rule is not None and rule.ended and not rule.stopped.is_set():
            # ended by oms after its receipt: a finished run (after a broker's stop: not)
            out = out.model_copy(update={"exit_code": 0, "signal": None})
    except Exception as exc:
        reason = refusal(exc).message[:200]
        _end_if_unreceived(work, d.ticket, d.id, reason)
        _finished(work, worker_id, reason)
        raise
    got = receipt(role, work.loaded, out, stdout_of(out), None)
    if _read(work, worker_id).view.state == "stopped":
        _end_if_unreceived(work, d.ticket, d.id, "the worker was stopped")
        return 1
    stopped = out.egress.stopped
    if stopped is not None and stopped.provider is not None:
        # The broker's watch parked the lane already, or its publish was cut by the run's
        # end: the same fact again is recorded once (its key leaves out the time).
        observe_parked(work, worker_id, ParkObservation(
            event=stopped.event, provider=stopped.provider, status=stopped.status,
            scope=stopped.scope, measure=stopped.measure, spent=stopped.spent,
            limit=stopped.limit, observed=iso(time.time())))  # fmt: skip
    why = stopped.reason if stopped is not None else None
    settle(work, d, token, got, why)
    received = work.dispatch(d.id).state == "received"
    reason = None if received else why or no_result(got)
    _finished(work, worker_id, reason)
    return 0 if received else 1


def nobody_attached(socket: str, pane: str | None) -> Callable[[], bool]:
    """The end rule's question: is no tmux client showing the worker's pane? A pane that
    is not known, or a tmux that cannot answer, keeps the worker (until its timeout)."""

    def ask() -> bool:
        if pane is None:
            return False
        try:
            return Tmux(socket).clients_on(pane) == 0
        except (TmuxUnavailable, Blocked, UsageError):
            return False

    return ask


def _finished(work: Work, worker_id: str, reason: str | None) -> None:
    for _ in range(3):
        w = get(work, worker_id)
        if w.state not in ("starting", "running", "parked"):
            return
        try:
            move(work, worker_id, w.version, "exited", new_nonce(), reason=reason)
            return
        except StaleVersion:
            continue
