"""The fenced state machine of goals, tickets, leases, dispatches, receipts and verifies.

Every operation that changes state is one `BEGIN IMMEDIATE` transaction (`Work._fenced`):
  1. the nonce is claimed (a unique row: a replayed nonce changes nothing);
  2. the object's expected version, or the lease whose token fences it, is checked;
  3. the rows change;
  4. ONE `work.*` evidence entry is appended (durable before it returns), and its seq is
     stored in `transitions` beside the nonce;
  5. the transaction commits.
A refusal at 1-3 rolls everything back: the database and the log are as they were. A crash
between 4 and 5 leaves an entry in the log whose nonce is not in the database: nothing
changed, and `consistency()` (the doctor) reports the interrupted transition by its seq.

Tickets: `pending -> leased -> running -> verifying -> completed | retryable | blocked |
parked`. `lease` takes a pending, retryable or parked ticket, or one whose lease expired
while leased, running or verifying (recovery: the open dispatch or verify is marked
abandoned and the attempt it used stays used). A worker's receipt moves a ticket only to
`verifying`; only `finish_verify` with the result gate's READY verdict completes it, and a
completed ticket is always on human hold.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import rfc8785

from evidence import Draft, EvidenceStore, state_root
from evidence.store import utc_now
from gatekeeper.errors import Blocked, NotFound, UsageError
from gatekeeper.gates.mark import trusted_mark
from gatekeeper.repo.git import Repo, open_repo
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.work import payloads as p
from gatekeeper.work.db import WorkDb
from gatekeeper.work.events import outbox
from gatekeeper.work.model import (
    DISPATCH_ID_RE,
    GOAL_ID_RE,
    LEASE_TOKEN_RE,
    MAX_BODY_BYTES,
    MAX_OBJECTIVE_CHARS,
    MAX_TITLE_CHARS,
    NONCE_RE,
    TICKET_ID_RE,
    VERIFY_ID_RE,
    Body,
    Dispatch,
    DispatchEnvelope,
    DispatchPlan,
    DispatchView,
    Goal,
    Horizon,
    LastTransition,
    Lease,
    LeaseView,
    Receipt,
    RunFacts,
    Ticket,
    Verification,
    VerificationView,
    VerifyOutcome,
)
from policy import LoadedPolicy

_TICKET_COLUMNS = frozenset({"activity", "health", "attempts", "human_hold", "reason"})
LEASABLE = ("pending", "retryable", "parked")
PARKABLE = ("pending", "retryable")  # by health: a lane parked for a human (`resume_ticket`)
RECOVERABLE = ("leased", "running", "verifying")  # when the lease has expired


class StaleVersion(Blocked):
    """The object is not at the version the caller expected."""


class NonceReplayed(Blocked):
    """The nonce was used by an earlier operation."""


class LeaseRefused(Blocked):
    """The lease token is unknown, another ticket's, released, or expired."""


class WrongState(Blocked):
    """The ticket is not in a state this operation may start from."""


class LaneParked(Blocked):
    """A pending or retryable ticket parked by health (budget, a refused login, a quota):
    it is not leased until a human resumes it (or a quota's reset does)."""


class AttemptsExhausted(Blocked):
    """The ticket has used every attempt the policy allows."""


class ReceiptRefused(Blocked):
    """A receipt that does not bind to this dispatch's own run and commit."""


def new_nonce() -> str:
    """A fresh nonce for a transition oms starts itself (recording a run, finishing a verify)."""
    return f"oms-{secrets.token_hex(16)}"


def parked_lane(state: str, health: str) -> bool:
    """A ticket that waits for a human (or a quota's reset): not dispatched meanwhile."""
    return state in PARKABLE and health == "parked"


def refuse_parked(ticket: str, state: str, health: str, reason: str | None) -> None:
    """LaneParked, with the reason, when `ticket` is a parked lane."""
    if parked_lane(state, health):
        why = (reason or "no reason recorded")[:300]
        raise LaneParked(f"ticket {ticket} is {state} and parked ({why}); `oms ticket resume "
                         f"{ticket}` once that is dealt with; nothing changed")  # fmt: skip


def _new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(6)}"


def token_digest(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _checked(value: str, pattern: Any, what: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise UsageError(f"not a {what}: {value!r}"[:200])
    return value


def _line(text: str, what: str, limit: int) -> str:
    if not text.strip():
        raise UsageError(f"the {what} is empty")
    if len(text) > limit:
        raise UsageError(f"the {what} is longer than {limit} characters")
    if "\x00" in text:
        raise UsageError(f"the {what} contains NUL")
    return text


@dataclass
class _Tx:
    """One fenced transaction: the connection and the entry it will record."""

    conn: sqlite3.Connection
    now: str
    record: p.WorkRecord | None = None
    subject: str = ""
    # Who asked, as extra subjects of the entry (an agent run's `agent-run:<id>`): the
    # signed log, not a row, says which agent run started a run.
    requested_by: tuple[Mapping[str, Any], ...] = ()
    target: str = ""
    detail: dict[str, p.Small] = field(default_factory=dict)
    blobs: tuple[str, ...] = ()  # hex digests of evidence blobs the entry names
    # Run before the entry is appended, with `p.PENDING` for its seq (rows that name the entry
    # that recorded them: a run's artifacts and events); the fence sets their seq once known.
    after: list[Callable[[int], None]] = field(default_factory=list)
    seq: int | None = None  # the entry's, once appended
    changes: p.ChangeSet | None = None

    def one(self, sql: str, *args: object) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self.conn.execute(sql, args).fetchone()
        return row

    def run(self, sql: str, *args: object) -> int:
        return self.conn.execute(sql, args).rowcount


class Work:
    """One repository's orchestration state: its `work.db`, its evidence store, the policy
    from its default branch (never a worktree's)."""

    def __init__(self, repo: Repo, db: WorkDb, store: EvidenceStore, loaded: LoadedPolicy,
                 clock: Any = time.time, default_commit: str | None = None) -> None:  # fmt: skip
        self.repo = repo
        self.db = db
        self.store = store
        self.loaded = loaded
        self.clock = clock
        # the default branch's commit the policy was read at (None: read it when needed)
        self.default_commit = default_commit

    @classmethod
    def open(cls, repo_dir: Path) -> Work:
        repo = open_repo(repo_dir)
        store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
        store.key  # noqa: B018 -- fail closed before anything changes when the key is unusable
        commit = trusted_mark(store, repo).commit
        loaded = read_policy_at(repo, commit)
        return cls(repo, WorkDb.open(repo.repo_id), store, loaded, default_commit=commit)

    def base(self) -> str:
        """The default branch's commit this `Work` read its policy at: what a run's provider
        call is cloned at, so the policy and the workspace are of one commit."""
        if self.default_commit is None:
            self.default_commit = trusted_mark(self.store, self.repo).commit
        return self.default_commit

    def close(self) -> None:
        self.db.close()

    @property
    def max_attempts(self) -> int:
        return self.loaded.policy.work.max_attempts

    @property
    def lease_ttl_s(self) -> int:
        return self.loaded.policy.work.lease_ttl_s

    # -- the critical section ----------------------------------------------------------------

    @contextmanager
    def fenced(self, nonce: str, op: str) -> Iterator[_Tx]:
        """The critical section, for the runs (`gatekeeper.work.runs.store`): the caller sets
        `tx.record`, `tx.subject` and `tx.target` as `_record` does."""
        with self._fenced(nonce, op) as tx:
            yield tx

    @contextmanager
    def _fenced(self, nonce: str, op: str) -> Iterator[_Tx]:
        _checked(nonce, NONCE_RE, "nonce (8-128 of A-Z a-z 0-9 . _ : -)")
        with self.db.mutation() as conn:
            tx = _Tx(conn, utc_now())
            try:
                conn.execute("INSERT INTO nonces (nonce, op, created) VALUES (?, ?, ?)",
                             (nonce, op, tx.now))  # fmt: skip
            except sqlite3.IntegrityError:
                raise NonceReplayed(f"nonce {nonce} was used already; nothing changed") from None
            yield tx
            if tx.record is None:
                raise AssertionError(f"{op}: a fenced transaction recorded no transition")
            for then in tx.after:
                then(p.PENDING)
            entry = self.store.append(self._replayable(tx))
            tx.seq = entry.seq
            self._settle_pending(tx, entry.seq)
            conn.execute("INSERT INTO transitions (seq, kind, object, nonce, time) "
                         "VALUES (?, ?, ?, ?, ?)",
                         (entry.seq, entry.kind, tx.target, nonce, entry.time))  # fmt: skip

    def _replayable(self, tx: _Tx) -> Draft:
        """The entry's draft: the record with the rows this transaction set (a blob) and the
        seq of the last committed `work.*` entry (the database lock makes it the last)."""
        assert tx.record is not None  # checked by the caller
        changes = p.ChangeSet(rows=self.db.changed(tx.conn))
        blob = self.store.blobs.put(changes.encoded())
        last = tx.one("SELECT max(seq) AS seq FROM transitions")
        record = type(tx.record).model_validate(
            {**tx.record.model_dump(), "v": p.REPLAYABLE, "changes": f"sha256:{blob}",
             "after": None if last is None else last["seq"]})  # fmt: skip
        tx.changes = changes
        subject = [*p.subject(tx.subject), *(dict(s) for s in tx.requested_by)]
        return Draft.of(record, subject=subject,
                        blobs=tuple(dict.fromkeys((*tx.blobs, blob))),
                        policy=self.loaded.digest)  # fmt: skip

    def _settle_pending(self, tx: _Tx, seq: int) -> None:
        """Rows that name the entry recording them (`seq` columns) get its seq now."""
        for r in tx.changes.rows if tx.changes else ():
            if r.row is not None and r.row.get("seq") == p.PENDING:
                pk = self.db.keys[r.table]
                where = " AND ".join(f"{c} = ?" for c in pk)
                tx.run(f"UPDATE {r.table} SET seq = ? WHERE {where}", seq, *r.key)  # noqa: S608 # nosec B608 -- names from sqlite_master
        self.db.changed(tx.conn)  # those updates are this entry's, already carried

    def _record(self, tx: _Tx, kind: type[p.WorkRecord], ticket: str | None, goal: str | None,
                **fields: Any) -> None:  # fmt: skip
        tx.record = kind(ticket=ticket, goal=goal, **fields)
        tx.target = ticket or goal or fields["id"]
        tx.subject = f"oms-ticket:{ticket}" if ticket else f"oms-goal:{goal}"

    # -- goals and tickets -------------------------------------------------------------------

    def create_goal(self, objective: str, stop_when: str, horizon: Horizon, nonce: str) -> Goal:
        _line(objective, "objective", MAX_OBJECTIVE_CHARS)
        _line(stop_when, "stop-when", MAX_OBJECTIVE_CHARS)
        if horizon not in ("until-empty", "12h", "24h"):
            raise UsageError(f"horizon must be until-empty, 12h or 24h, not {horizon!r}")
        gid = _new_id("g")
        with self._fenced(nonce, "goal.create") as tx:
            tx.run("INSERT INTO goals (id, version, objective, stop_when, horizon, state, "
                   "created, updated) VALUES (?, 1, ?, ?, ?, 'open', ?, ?)",
                   gid, objective, stop_when, horizon, tx.now, tx.now)  # fmt: skip
            digest = "sha256:" + hashlib.sha256(objective.encode()).hexdigest()
            self._record(tx, p.GoalCreated, None, gid, object="goal", id=gid, from_state=None,
                         to_state="open", version=1, nonce=nonce,
                         detail={"horizon": horizon, "objective_sha256": digest})  # fmt: skip
        return self.goal(gid)

    def add_ticket(self, goal: str, title: str, body: bytes | None, nonce: str,
                   detail: Mapping[str, p.Small] | None = None, *,
                   wake: bool = False) -> Ticket:  # fmt: skip
        """A pending ticket in an open goal; `detail` (ids and oms' own words: where it came
        from, why it is in this goal) goes into its entry. With `wake` (a GitHub sync's
        ticket) the conductor is told in the same transaction (`work.ticket`): a waiter
        woken by the sync's own batch before the ticket existed is woken again by it."""
        _checked(goal, GOAL_ID_RE, "goal id")
        _line(title, "title", MAX_TITLE_CHARS)
        if "\n" in title or "\r" in title:
            raise UsageError("the title must be one line")
        if body is not None and len(body) > MAX_BODY_BYTES:
            raise UsageError(f"the body is larger than {MAX_BODY_BYTES} bytes")
        blob = self.store.blobs.put(body) if body is not None else None
        tid = _new_id("t")
        with self._fenced(nonce, "ticket.add") as tx:
            row = tx.one("SELECT state FROM goals WHERE id = ?", goal)
            if row is None:
                raise NotFound(f"no goal {goal}")
            if row["state"] != "open":
                raise WrongState(f"goal {goal} is {row['state']}; tickets join open goals only")
            tx.run(
                "INSERT INTO tickets (id, goal, version, state, activity, health, title, "
                "body_blob, body_bytes, created, updated) VALUES (?, ?, 1, 'pending', 'idle', "
                "'healthy', ?, ?, ?, ?, ?)",
                tid,
                goal,
                title,
                f"sha256:{blob}" if blob else None,
                len(body or b""),
                tx.now,
                tx.now,
            )
            self._record(tx, p.TicketAdded, tid, goal, object="ticket", id=tid, from_state=None,
                         to_state="pending", version=1, nonce=nonce,
                         detail={**(detail or {}),
                                 "body_blob": f"sha256:{blob}" if blob else None})  # fmt: skip
            if wake:
                outbox.notify_change(
                    tx,
                    "work.ticket",
                    f"work:ticket:{tid}",
                    {"ticket": tid, "goal": goal, "state": "pending"},
                )
        return self.ticket(tid)

    def move_ticket(self, ticket: str, from_goal: str, to_goal: str, expected_version: int,
                    nonce: str) -> Ticket:  # fmt: skip
        """A pending, retryable or parked ticket of `from_goal` attached to the open goal
        `to_goal`, fenced on its version and its goal (DESIGN: transitions are fenced)."""
        _checked(to_goal, GOAL_ID_RE, "goal id")
        with self._fenced(nonce, "ticket.move") as tx:
            row = self._ticket_row(tx, ticket)
            if row["goal"] != from_goal or int(row["version"]) != expected_version:
                raise StaleVersion(f"ticket {ticket} is not at version {expected_version} of "
                                   f"goal {from_goal}; nothing changed"[:300])  # fmt: skip
            if row["state"] not in LEASABLE:
                raise WrongState(f"ticket {ticket} is {row['state']}; only a pending, retryable "
                                 "or parked ticket changes goal; nothing changed")  # fmt: skip
            goal = tx.one("SELECT state FROM goals WHERE id = ?", to_goal)
            if goal is None:
                raise NotFound(f"no goal {to_goal}")
            if goal["state"] != "open":
                raise WrongState(f"goal {to_goal} is {goal['state']}; tickets join open goals only")
            version = self._move(tx, row, row["state"])
            tx.run("UPDATE tickets SET goal = ? WHERE id = ?", to_goal, ticket)
            self._record(tx, p.TicketMoved, ticket, to_goal, object="ticket", id=ticket,
                         from_state=row["state"], to_state=row["state"], version=version,
                         nonce=nonce, detail={"from_goal": from_goal})  # fmt: skip
        return self.ticket(ticket)

    def resume_ticket(self, ticket: str, nonce: str) -> Ticket:
        """A human dealt with what parked a pending or retryable ticket's lane: its health
        `healthy` again, the reason cleared, fenced on its version, and the conductor told
        in the same transaction (`work.resume`). Any other ticket is refused unchanged."""
        with self._fenced(nonce, "ticket.resume") as tx:
            row = self._ticket_row(tx, ticket)
            if not parked_lane(row["state"], row["health"]):
                raise WrongState(f"ticket {ticket} is {row['state']}, health {row['health']}; "
                                 "only a pending or retryable ticket parked by health is "
                                 "resumed; nothing changed")  # fmt: skip
            version = self._move(tx, row, row["state"], health="healthy", reason=None)
            self._record(tx, p.TicketResumed, ticket, row["goal"], object="ticket", id=ticket,
                         from_state=row["state"], to_state=row["state"], version=version,
                         nonce=nonce, detail={"parked": (row["reason"] or "")[:500]})  # fmt: skip
            outbox.notify_change(tx, "work.resume", f"work:resume:{ticket}@{version}",
                                 {"ticket": ticket, "goal": row["goal"], "state": row["state"],
                                  "health": "healthy"})  # fmt: skip
        return self.ticket(ticket)

    def _ticket_row(self, tx: _Tx, ticket: str) -> sqlite3.Row:
        _checked(ticket, TICKET_ID_RE, "ticket id")
        row = tx.one("SELECT * FROM tickets WHERE id = ?", ticket)
        if row is None:
            raise NotFound(f"no ticket {ticket}")
        return row

    def _move(self, tx: _Tx, row: sqlite3.Row, state: str, **cols: Any) -> int:
        """The ticket to `state` at version + 1, fenced on the version it was read at."""
        version = int(row["version"]) + 1
        if not set(cols) <= _TICKET_COLUMNS:
            raise AssertionError(f"not a ticket column: {sorted(set(cols) - _TICKET_COLUMNS)}")
        sets = "".join(f", {c} = ?" for c in cols)
        sql = f"UPDATE tickets SET state = ?, version = ?, updated = ?{sets} WHERE id = ? AND version = ?"  # noqa: S608,E501 # nosec B608 -- our column names, ? values
        changed = tx.run(sql, state, version, tx.now, *cols.values(), row["id"], row["version"])
        if changed != 1:
            raise StaleVersion(f"ticket {row['id']} changed meanwhile; nothing changed")
        return version

    # -- leases -------------------------------------------------------------------------------

    def lease_ticket(self, ticket: str, expected_version: int, nonce: str,
                     ttl_s: int | None = None) -> tuple[Lease, Ticket]:  # fmt: skip
        ttl = self.lease_ttl_s if ttl_s is None else ttl_s
        if not 1 <= ttl <= 86_400:
            raise UsageError("the lease ttl must be 1..86400 seconds")
        token = f"lease-{secrets.token_hex(24)}"
        digest = token_digest(token)
        with self._fenced(nonce, "ticket.lease") as tx:
            row = self._ticket_row(tx, ticket)
            if int(row["version"]) != expected_version:
                raise StaleVersion(f"ticket {ticket} is at version {row['version']}, not "
                                   f"{expected_version}; nothing changed")  # fmt: skip
            now = self.clock()
            state = row["state"]
            recovered: str | None = None
            if state in RECOVERABLE:
                held = tx.one("SELECT * FROM leases WHERE ticket = ? AND state = 'active'", ticket)
                if held is not None and float(held["expires"]) > now:
                    raise LeaseRefused(
                        f"ticket {ticket} is {state} under a lease until "
                        f"{_iso(float(held['expires']))}; nothing changed"
                    )
                recovered = state
                self._end_lease(tx, ticket, "expired")
                tx.run(
                    "UPDATE dispatches SET state = 'abandoned', reason = ?, version = "
                    "version + 1, updated = ? WHERE ticket = ? AND state IN ('started', 'ran')",
                    f"its lease expired while the ticket was {state}",
                    tx.now,
                    ticket,
                )
                tx.run(
                    "UPDATE verifications SET state = 'abandoned', version = version + 1, "
                    "updated = ? WHERE ticket = ? AND state = 'started'",
                    tx.now,
                    ticket,
                )
            elif state not in LEASABLE:
                raise WrongState(
                    f"ticket {ticket} is {state}; only a pending, retryable or "
                    "parked ticket (or one whose lease expired) can be leased"
                )
            refuse_parked(ticket, state, row["health"], row["reason"])
            expires = now + ttl
            tx.run(
                "INSERT INTO leases (token_sha256, ticket, state, expires, created) "
                "VALUES (?, ?, 'active', ?, ?)",
                digest,
                ticket,
                expires,
                tx.now,
            )
            version = self._move(tx, row, "leased", activity="idle", health="healthy",
                                 reason=None)  # fmt: skip
            self._record(tx, p.TicketLeased, ticket, row["goal"], object="ticket", id=ticket,
                         from_state=state, to_state="leased", version=version, nonce=nonce,
                         lease=digest, detail={"expires": _iso(expires), "ttl_s": ttl,
                                               "recovered_from": recovered})  # fmt: skip
        return Lease(token=token, expires=_iso(expires)), self.ticket(ticket)

    def _end_lease(self, tx: _Tx, ticket: str, how: str) -> None:
        tx.run("UPDATE leases SET state = ?, ended = ? WHERE ticket = ? AND state = 'active'",
               how, tx.now, ticket)  # fmt: skip

    def _held(self, tx: _Tx, ticket: str, token: str) -> str:
        """The digest of `token` when it is `ticket`'s active, unexpired lease."""
        if not isinstance(token, str) or not LEASE_TOKEN_RE.fullmatch(token):
            raise LeaseRefused("not a lease token; nothing changed")
        digest = token_digest(token)
        row = tx.one("SELECT * FROM leases WHERE token_sha256 = ?", digest)
        if row is None:
            raise LeaseRefused("no such lease in this repository; nothing changed")
        if row["ticket"] != ticket:
            raise LeaseRefused(f"the lease is another ticket's, not {ticket}'s; nothing changed")
        if row["state"] != "active":
            raise LeaseRefused(f"the lease on {ticket} was {row['state']}; nothing changed")
        if float(row["expires"]) <= self.clock():
            raise LeaseRefused(f"the lease on {ticket} expired at "
                               f"{_iso(float(row['expires']))}; nothing changed")  # fmt: skip
        return digest

    # -- dispatch, run, receipt ---------------------------------------------------------------

    def begin_dispatch(self, ticket: str, token: str, plan: DispatchPlan, nonce: str,
                       min_left_s: float = 0) -> Dispatch:  # fmt: skip
        """The envelope validated and persisted, the ticket `running`, before any delivery.
        `min_left_s`: the lease must have at least that long to run (a run is cut to it)."""
        did = _new_id("d")
        with self._fenced(nonce, "dispatch") as tx:
            row = self._ticket_row(tx, ticket)
            digest = self._held(tx, ticket, token)
            if self.lease_left(ticket) < min_left_s:
                raise LeaseRefused(f"the lease on {ticket} has too little time left for a run "
                                   "(lease again, longer); nothing changed")  # fmt: skip
            if row["state"] != "leased":
                raise WrongState(f"ticket {ticket} is {row['state']}, not leased; "
                                 "nothing changed")  # fmt: skip
            attempt = int(row["attempts"]) + 1
            if attempt > self.max_attempts:
                raise AttemptsExhausted(f"ticket {ticket} has used all {self.max_attempts} "
                                        "attempts; nothing changed")  # fmt: skip
            envelope = DispatchEnvelope(**plan.model_dump(), id=did, goal=row["goal"],
                                        ticket=ticket, lease=digest, attempt=attempt,
                                        nonce=nonce)  # fmt: skip
            body = envelope.to_json()
            env_digest = "sha256:" + hashlib.sha256(rfc8785.dumps(body)).hexdigest()
            tx.run(
                "INSERT INTO dispatches (id, ticket, lease, attempt, version, state, role, "
                "run_id, envelope, envelope_digest, created, updated) VALUES "
                "(?, ?, ?, ?, 1, 'started', ?, ?, ?, ?, ?, ?)",
                did,
                ticket,
                digest,
                attempt,
                plan.role,
                plan.run_id,
                json.dumps(body),
                env_digest,
                tx.now,
                tx.now,
            )
            tx.run("INSERT INTO attempts (ticket, number, dispatch) VALUES (?, ?, ?)",
                   ticket, attempt, did)  # fmt: skip
            version = self._move(tx, row, "running", attempts=attempt, activity="working")
            self._record(tx, p.DispatchStarted, ticket, row["goal"], object="dispatch", id=did,
                         from_state="leased", to_state="running", version=version, nonce=nonce,
                         lease=digest, detail={"attempt": attempt, "role": plan.role,
                                               "engine": plan.engine, "run_id": plan.run_id,
                                               "envelope": env_digest,
                                               "transfer": plan.transfer})  # fmt: skip
        return self.dispatch(did)

    def _dispatch_row(self, tx: _Tx, dispatch: str) -> sqlite3.Row:
        _checked(dispatch, DISPATCH_ID_RE, "dispatch id")
        row = tx.one("SELECT * FROM dispatches WHERE id = ?", dispatch)
        if row is None:
            raise NotFound(f"no dispatch {dispatch}")
        return row

    def record_run(self, dispatch: str, token: str, facts: RunFacts,
                   nonce: str | None = None) -> Dispatch:  # fmt: skip
        """What the adapter's agent run came back with; the ticket stays `running`."""
        nonce = nonce or new_nonce()
        with self._fenced(nonce, "dispatch.run") as tx:
            d = self._dispatch_row(tx, dispatch)
            digest = self._held(tx, d["ticket"], token)
            if d["state"] != "started" or d["lease"] != digest:
                raise WrongState(f"dispatch {dispatch} is {d['state']}; nothing changed")
            version = int(d["version"]) + 1
            tx.run(
                "UPDATE dispatches SET state = 'ran', run = ?, version = ?, updated = ? "
                "WHERE id = ?",
                json.dumps(facts.to_json()),
                version,
                tx.now,
                dispatch,
            )
            goal = self._goal_of(tx, d["ticket"])
            self._record(tx, p.DispatchRan, d["ticket"], goal, object="dispatch", id=dispatch,
                         from_state="started", to_state="ran", version=version, nonce=nonce,
                         lease=digest, detail={"exit_code": facts.exit_code,
                                               "candidate": facts.candidate,
                                               "agent_run_seq": facts.evidence_seq})  # fmt: skip
        return self.dispatch(dispatch)

    def _goal_of(self, tx: _Tx, ticket: str) -> str:
        row = tx.one("SELECT goal FROM tickets WHERE id = ?", ticket)
        return str(row["goal"]) if row else ""

    def _next_after_failure(self, row: sqlite3.Row) -> str:
        return "blocked" if int(row["attempts"]) >= self.max_attempts else "retryable"

    def end_dispatch(self, dispatch: str, token: str, reason: str,
                     nonce: str | None = None) -> Ticket:  # fmt: skip
        """A dispatch that ends with no receipt (no commit): the attempt is used, the ticket
        `retryable`, or `blocked` at the attempt limit; the lease is released. A lane parked
        by health keeps the park's reason on the ticket (what a human or a quota's reset
        lifts); the dispatch records `reason`."""
        nonce = nonce or new_nonce()
        with self._fenced(nonce, "dispatch.end") as tx:
            d = self._dispatch_row(tx, dispatch)
            digest = self._held(tx, d["ticket"], token)
            if d["state"] not in ("started", "ran"):
                raise WrongState(f"dispatch {dispatch} is {d['state']}; nothing changed")
            row = self._ticket_row(tx, d["ticket"])
            if row["state"] != "running":
                raise WrongState(f"ticket {row['id']} is {row['state']}; nothing changed")
            tx.run("UPDATE dispatches SET state = 'ended', reason = ?, version = version + 1, "
                   "updated = ? WHERE id = ?", reason[:500], tx.now, dispatch)  # fmt: skip
            tx.run("UPDATE attempts SET outcome = 'no-result' WHERE dispatch = ?", dispatch)
            state = self._next_after_failure(row)
            self._end_lease(tx, row["id"], "released")
            kept = row["reason"] if row["health"] == "parked" and row["reason"] else None
            version = self._move(tx, row, state, activity="idle", reason=kept or reason[:500])
            self._record(tx, p.DispatchEnded, row["id"], row["goal"], object="dispatch",
                         id=dispatch, from_state="running", to_state=state, version=version,
                         nonce=nonce, lease=digest, detail={"attempt": d["attempt"]})  # fmt: skip
        return self.ticket(d["ticket"])

    def file_receipt(self, dispatch: str, token: str, nonce: str, commit: str | None,
                     exit_code: int | None = None) -> tuple[Receipt, Ticket]:  # fmt: skip
        """The worker's typed receipt: the only move to `verifying`, and never further. The
        commit must be the one this dispatch's own run produced."""
        rid = _new_id("r")
        with self._fenced(nonce, "receipt") as tx:
            d = self._dispatch_row(tx, dispatch)
            digest = self._held(tx, d["ticket"], token)
            if d["state"] not in ("ran", "started"):
                raise WrongState(f"dispatch {dispatch} is {d['state']}; nothing changed")
            row = self._ticket_row(tx, d["ticket"])
            if row["state"] != "running":
                raise WrongState(f"ticket {row['id']} is {row['state']}; nothing changed")
            run = RunFacts.model_validate_json(d["run"]) if d["run"] else None
            produced = run.candidate if run else None
            if produced is None:
                raise ReceiptRefused(f"dispatch {dispatch} has no commit from its run; "
                                     "nothing changed")  # fmt: skip
            if commit is not None and commit != produced:
                raise ReceiptRefused(
                    f"commit {commit[:12]} is not the commit of dispatch "
                    f"{dispatch}'s run ({produced[:12]}); nothing changed"
                )
            tx.run("INSERT INTO receipts (id, dispatch, ticket, commit_sha, body, created) "
                   "VALUES (?, ?, ?, ?, ?, ?)", rid, dispatch, row["id"], produced,
                   json.dumps({"exit_code": exit_code}), tx.now)  # fmt: skip
            tx.run("UPDATE dispatches SET state = 'received', version = version + 1, "
                   "updated = ? WHERE id = ?", tx.now, dispatch)  # fmt: skip
            version = self._move(tx, row, "verifying", activity="done")
            self._record(tx, p.ReceiptFiled, row["id"], row["goal"], object="ticket",
                         id=row["id"], from_state="running", to_state="verifying",
                         version=version, nonce=nonce, lease=digest,
                         detail={"dispatch": dispatch, "receipt": rid, "commit": produced,
                                 "attempt": d["attempt"]})  # fmt: skip
            outbox.notify_change(tx, "work.receipt", f"work:receipt:{rid}",
                                 {"ticket": row["id"], "goal": row["goal"], "dispatch": dispatch,
                                  "receipt": rid, "state": "verifying"})  # fmt: skip
        return self.receipt(rid), self.ticket(d["ticket"])

    # -- verify -------------------------------------------------------------------------------

    def begin_verify(self, ticket: str, nonce: str) -> Verification:
        """Bind a verify to the ticket's receipt, dispatch, attempt and live lease."""
        vid = _new_id("v")
        with self._fenced(nonce, "verify.start") as tx:
            row = self._ticket_row(tx, ticket)
            if row["state"] != "verifying":
                raise WrongState(f"ticket {ticket} is {row['state']}, not verifying; "
                                 "nothing changed")  # fmt: skip
            lease = tx.one("SELECT * FROM leases WHERE ticket = ? AND state = 'active'", ticket)
            if lease is None or float(lease["expires"]) <= self.clock():
                raise LeaseRefused(f"ticket {ticket} has no live lease; lease it again to "
                                   "recover; nothing changed")  # fmt: skip
            r = tx.one("SELECT r.*, d.attempt, d.envelope, d.lease AS dlease FROM receipts r "
                       "JOIN dispatches d ON d.id = r.dispatch WHERE r.ticket = ? AND "
                       "d.state = 'received' ORDER BY d.attempt DESC LIMIT 1", ticket)  # fmt: skip
            if r is None or r["dlease"] != lease["token_sha256"]:
                raise WrongState(f"ticket {ticket} has no receipt under its lease; nothing changed")
            tx.run(
                "UPDATE verifications SET state = 'abandoned', version = version + 1, "
                "updated = ? WHERE ticket = ? AND state = 'started'",
                tx.now,
                ticket,
            )
            version = self._move(tx, row, "verifying")
            tx.run(
                "INSERT INTO verifications (id, ticket, dispatch, receipt, lease, version, "
                "state, created, updated) VALUES (?, ?, ?, ?, ?, 1, 'started', ?, ?)",
                vid,
                ticket,
                r["dispatch"],
                r["id"],
                lease["token_sha256"],
                tx.now,
                tx.now,
            )
            env = DispatchEnvelope.model_validate_json(r["envelope"])
            self._record(tx, p.VerifyStarted, ticket, row["goal"], object="verification",
                         id=vid, from_state="verifying", to_state="verifying", version=version,
                         nonce=nonce, lease=lease["token_sha256"],
                         detail={"dispatch": r["dispatch"], "receipt": r["id"],
                                 "commit": r["commit_sha"], "attempt": r["attempt"]})  # fmt: skip
        return Verification(id=vid, ticket=ticket, ticket_version=version, dispatch=r["dispatch"],
                            receipt=r["id"], attempt=int(r["attempt"]), lease=lease["token_sha256"],
                            commit=r["commit_sha"], base=env.base, role=env.role,
                            engine=env.engine, run_id=env.run_id)  # fmt: skip

    def finish_verify(self, v: Verification, outcome: VerifyOutcome,
                      nonce: str | None = None) -> Ticket:  # fmt: skip
        """The ticket's next state from the deterministic verdict; the grade never makes a
        failure pass. READY: `completed` on human hold. FAILED: `retryable`, or `blocked` at
        the attempt limit. BLOCKED: `blocked`. No grade obtained: `parked`, visibly."""
        nonce = nonce or new_nonce()
        _checked(v.id, VERIFY_ID_RE, "verification id")
        with self._fenced(nonce, "verify.finish") as tx:
            row = self._ticket_row(tx, v.ticket)
            if int(row["version"]) != v.ticket_version or row["state"] != "verifying":
                raise StaleVersion(
                    f"ticket {v.ticket} changed during the verify (now "
                    f"{row['state']}, version {row['version']}); nothing changed"
                )
            lease = tx.one("SELECT state FROM leases WHERE token_sha256 = ?", v.lease)
            if lease is None or lease["state"] != "active":
                raise LeaseRefused(f"the lease the verify of {v.ticket} ran under is gone; "
                                   "nothing changed")  # fmt: skip
            state, hold, reason = _verdict_state(outcome, self._next_after_failure(row))
            tx.run("UPDATE verifications SET state = 'finished', decision = ?, outcome = ?, "
                   "version = version + 1, updated = ? WHERE id = ? AND state = 'started'",
                   outcome.decision, json.dumps(outcome.to_json()), tx.now, v.id)  # fmt: skip
            tx.run("UPDATE attempts SET outcome = ?, reflection_blob = ? WHERE dispatch = ?",
                   outcome.decision, outcome.reflection_blob, v.dispatch)  # fmt: skip
            self._end_lease(tx, v.ticket, "released")
            health = "parked" if state == "parked" else "healthy"
            activity = "blocked" if state in ("blocked", "parked") else "idle"
            version = self._move(tx, row, state, human_hold=int(hold), reason=reason,
                                 health=health, activity=activity)  # fmt: skip
            self._record(tx, p.VerifyFinished, v.ticket, row["goal"], object="verification",
                         id=v.id, from_state="verifying", to_state=state, version=version,
                         nonce=nonce, lease=v.lease,
                         detail={"decision": outcome.decision, "result_seq": outcome.result_seq,
                                 "grade": outcome.grade, "grade_seq": outcome.grade_seq,
                                 "commit": v.commit, "attempt": v.attempt,
                                 "dispatch": v.dispatch, "human_hold": hold,
                                 "reflection_blob": outcome.reflection_blob})  # fmt: skip
            outbox.notify_change(tx, "work.verdict", f"work:verdict:{v.id}",
                                 {"ticket": v.ticket, "goal": row["goal"], "verification": v.id,
                                  "decision": outcome.decision, "state": state})  # fmt: skip
            if outcome.reflection_blob is not None:
                tx.blobs = (outcome.reflection_blob.removeprefix("sha256:"),)
        return self.ticket(v.ticket)

    # -- reads --------------------------------------------------------------------------------

    def goal(self, goal: str) -> Goal:
        _checked(goal, GOAL_ID_RE, "goal id")
        rows = self.db.read("SELECT * FROM goals WHERE id = ?", goal)
        if not rows:
            raise NotFound(f"no goal {goal}")
        return Goal(**{k: rows[0][k] for k in rows[0].keys()})

    def goals(self) -> list[Goal]:
        return [Goal(**{k: r[k] for k in r.keys()})
                for r in self.db.read("SELECT * FROM goals ORDER BY created, id")]  # fmt: skip

    def ticket(self, ticket: str) -> Ticket:
        _checked(ticket, TICKET_ID_RE, "ticket id")
        rows = self.db.read("SELECT * FROM tickets WHERE id = ?", ticket)
        if not rows:
            raise NotFound(f"no ticket {ticket}")
        return self._ticket_view(rows[0])

    def tickets(self, state: str | None = None, goal: str | None = None) -> list[Ticket]:
        sql, args = "SELECT * FROM tickets WHERE 1 = 1", list[str]()
        if state is not None:
            sql, args = sql + " AND state = ?", [*args, state]
        if goal is not None:
            sql, args = sql + " AND goal = ?", [*args, goal]
        return [self._ticket_view(r) for r in self.db.read(sql + " ORDER BY created, id", *args)]

    def _ticket_view(self, r: sqlite3.Row) -> Ticket:
        tid = r["id"]
        lease = self.db.read("SELECT * FROM leases WHERE ticket = ? ORDER BY created DESC, "
                             "rowid DESC LIMIT 1", tid)  # fmt: skip
        disp = self.db.read("SELECT * FROM dispatches WHERE ticket = ? ORDER BY attempt DESC, "
                            "created DESC LIMIT 1", tid)  # fmt: skip
        ver = self.db.read("SELECT * FROM verifications WHERE ticket = ? ORDER BY created DESC, "
                           "rowid DESC LIMIT 1", tid)  # fmt: skip
        last = self.db.read("SELECT * FROM transitions WHERE object = ? ORDER BY seq DESC "
                            "LIMIT 1", tid)  # fmt: skip
        now = self.clock()
        return Ticket(
            id=tid, goal=r["goal"], version=r["version"], state=r["state"],
            activity=r["activity"], health=r["health"], title=r["title"],
            body=Body(blob=r["body_blob"], bytes=r["body_bytes"]), attempts=r["attempts"],
            max_attempts=self.max_attempts, human_hold=bool(r["human_hold"]), reason=r["reason"],
            lease=LeaseView(lease=lease[0]["token_sha256"], state=lease[0]["state"],
                            expires=_iso(float(lease[0]["expires"])),
                            expired=lease[0]["state"] == "active"
                            and float(lease[0]["expires"]) <= now) if lease else None,
            dispatch=DispatchView(id=disp[0]["id"], attempt=disp[0]["attempt"],
                                  state=disp[0]["state"], role=disp[0]["role"],
                                  run_id=disp[0]["run_id"], reason=disp[0]["reason"])
            if disp else None,
            verification=VerificationView(id=ver[0]["id"], state=ver[0]["state"],
                                          decision=ver[0]["decision"]) if ver else None,
            last=LastTransition(kind=last[0]["kind"], seq=last[0]["seq"], time=last[0]["time"])
            if last else None,
            created=r["created"], updated=r["updated"],
        )  # fmt: skip

    def dispatch(self, dispatch: str) -> Dispatch:
        _checked(dispatch, DISPATCH_ID_RE, "dispatch id")
        rows = self.db.read("SELECT * FROM dispatches WHERE id = ?", dispatch)
        if not rows:
            raise NotFound(f"no dispatch {dispatch}")
        d = rows[0]
        return Dispatch(id=d["id"], ticket=d["ticket"], attempt=d["attempt"],
                        version=d["version"], state=d["state"], run_id=d["run_id"],
                        envelope=DispatchEnvelope.model_validate_json(d["envelope"]),
                        envelope_digest=d["envelope_digest"],
                        run=RunFacts.model_validate_json(d["run"]) if d["run"] else None,
                        reason=d["reason"])  # fmt: skip

    def receipt(self, receipt: str) -> Receipt:
        rows = self.db.read("SELECT * FROM receipts WHERE id = ?", receipt)
        if not rows:
            raise NotFound(f"no receipt {receipt}")
        r = rows[0]
        return Receipt(id=r["id"], dispatch=r["dispatch"], ticket=r["ticket"],
                       commit=r["commit_sha"], exit_code=json.loads(r["body"])["exit_code"],
                       created=r["created"])  # fmt: skip

    def lease_left(self, ticket: str) -> float:
        """Seconds until the ticket's active lease expires (0 when it has none)."""
        rows = self.db.read("SELECT expires FROM leases WHERE ticket = ? AND state = 'active'",
                            ticket)  # fmt: skip
        return max(0.0, float(rows[0]["expires"]) - self.clock()) if rows else 0.0

    def reflection(self, ticket: str, attempt: int) -> bytes | None:
        """The bounded reflection stored for a failed attempt (for the next attempt's task)."""
        rows = self.db.read("SELECT reflection_blob FROM attempts WHERE ticket = ? AND number = ?",
                            ticket, attempt)  # fmt: skip
        blob = rows[0]["reflection_blob"] if rows else None
        return self.store.blobs.get(blob.removeprefix("sha256:")) if blob else None

    def transitions(self) -> Sequence[sqlite3.Row]:
        return self.db.read("SELECT * FROM transitions ORDER BY seq")


def _verdict_state(outcome: VerifyOutcome, on_failure: str) -> tuple[str, bool, str | None]:
    """(next state, human hold, reason). The deterministic verdict decides and a grade can
    never make a pass; a verify that could not get its one grade parks the ticket visibly
    (whatever the verdict: no grade is ever skipped), the verdict recorded beside it."""
    if outcome.grade is None:
        why = outcome.grade_problem or "unknown"
        return "parked", False, f"{outcome.decision}, and no supplemental grade: {why}"
    if outcome.decision == "BLOCKED":
        return "blocked", False, "the result gate blocked the commit"
    if outcome.decision == "FAILED":
        return on_failure, False, "the result gate's checks failed"
    return "completed", True, None
