"""The fenced state machine in-process: every transition with its `work.*` entry and the
`transitions` row beside it, every refusal changing nothing (the whole db and the log), lease
recovery after expiry, and the schema's migrations.

A real git repository in tmp_path, `oms init`ed, and `Work` with a clock the test moves.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.work import (
    SHA_A,
    Clock,
    Walk,
    facts,
    initialised_work,
    last_entry,
    new_ticket,
    nonce,
    outcome,
    plan,
    snapshot,
    tables,
    transition_row,
)

from gatekeeper.errors import (
    EXIT_BLOCKED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    NotFound,
    OmsError,
    UsageError,
)
from gatekeeper.work import payloads as p
from gatekeeper.work.db import MIGRATIONS, SCHEMA_VERSION, WorkDb, WorkDbUnavailable
from gatekeeper.work.fence import (
    AttemptsExhausted,
    LeaseRefused,
    NonceReplayed,
    ReceiptRefused,
    StaleVersion,
    Work,
    WrongState,
    token_digest,
)

TABLES = [
    "attempts",
    "batches",
    "conductors",
    "deliveries",
    "dispatches",
    "events",
    "goals",
    "intents",
    "leases",
    "nonces",
    "notifications",
    "outbox",
    "quotas",
    "receipts",
    "run_artifacts",
    "run_events",
    "runs",
    "sessions",
    "teams",
    "tickets",
    "transitions",
    "verifications",
    "waiters",
    "watermarks",
    "workers",
]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def work(git_repo: Path, oms_home: Path, clock: Clock) -> Iterator[Work]:
    with initialised_work(git_repo, clock) as w:
        yield w


def _recorded(work: Work, kind: type[p.WorkRecord], **want: Any) -> p.WorkRecord:
    """The last entry is `kind` with the fields `want`, and its transitions row agrees."""
    entry = last_entry(work)
    assert entry.kind == kind.KIND
    rec = kind.of(entry)
    for key, value in want.items():
        assert getattr(rec, key) == value, (key, getattr(rec, key), value)
    row = transition_row(work, entry.seq)
    assert (row["kind"], row["nonce"], row["time"]) == (entry.kind, rec.nonce, entry.time)
    assert row["object"] == (rec.ticket or rec.goal)
    (claimed,) = work.db.read("SELECT op FROM nonces WHERE nonce = ?", rec.nonce)
    assert claimed["op"]
    return rec


def _no_token_anywhere(work: Work, token: str) -> None:
    assert token.encode() not in work.store.log_path.read_bytes()
    assert token not in repr(snapshot(work)[0])


# -- every transition, with its entry and transitions row ------------------------------------


def test_create_goal_and_add_ticket_are_recorded(work: Work) -> None:
    n1, n2 = nonce(), nonce()
    goal = work.create_goal("ship it", "it shipped", "12h", n1)
    assert (goal.version, goal.state, goal.horizon) == (1, "open", "12h")
    _recorded(
        work,
        p.GoalCreated,
        object="goal",
        id=goal.id,
        goal=goal.id,
        from_state=None,
        to_state="open",
        version=1,
        nonce=n1,
        lease=None,
    )
    ticket = work.add_ticket(goal.id, "do it", b"the body", n2)
    assert (ticket.version, ticket.state, ticket.body.bytes) == (1, "pending", 8)
    rec = _recorded(
        work,
        p.TicketAdded,
        object="ticket",
        id=ticket.id,
        ticket=ticket.id,
        goal=goal.id,
        from_state=None,
        to_state="pending",
        version=1,
        nonce=n2,
    )
    assert rec.detail["body_blob"] == ticket.body.blob
    assert ticket.body.blob is not None
    assert work.store.blobs.get(ticket.body.blob.removeprefix("sha256:")) == b"the body"


def test_lease_moves_pending_to_leased_and_records_the_digest_never_the_token(work: Work) -> None:
    walk = new_ticket(work)
    n = nonce()
    lease, ticket = work.lease_ticket(walk.id, 1, n, ttl_s=60)
    assert (ticket.state, ticket.version) == ("leased", 2)
    assert ticket.lease is not None and ticket.lease.lease == token_digest(lease.token)
    rec = _recorded(
        work,
        p.TicketLeased,
        object="ticket",
        id=walk.id,
        from_state="pending",
        to_state="leased",
        version=2,
        nonce=n,
        lease=token_digest(lease.token),
    )
    assert rec.detail["ttl_s"] == 60 and rec.detail["recovered_from"] is None
    _no_token_anywhere(work, lease.token)


def test_dispatch_run_receipt_verify_each_record_one_transition(work: Work) -> None:
    walk = new_ticket(work).leased()
    assert walk.lease is not None
    digest = token_digest(walk.lease.token)
    n = nonce()
    d = work.begin_dispatch(walk.id, walk.lease.token, plan(), n)
    assert (d.attempt, d.state, d.envelope.lease, d.envelope.nonce) == (1, "started", digest, n)
    rec = _recorded(
        work,
        p.DispatchStarted,
        object="dispatch",
        id=d.id,
        ticket=walk.id,
        from_state="leased",
        to_state="running",
        version=3,
        nonce=n,
        lease=digest,
    )
    assert rec.detail["envelope"] == d.envelope_digest and rec.detail["attempt"] == 1
    assert work.ticket(walk.id).state == "running"

    walk.dispatch = d.id
    n = nonce()
    work.record_run(d.id, walk.lease.token, facts(), n)
    _recorded(
        work,
        p.DispatchRan,
        object="dispatch",
        id=d.id,
        from_state="started",
        to_state="ran",
        version=2,
        nonce=n,
        lease=digest,
    )
    assert work.ticket(walk.id).state == "running"  # a run is a fact, not a move

    n = nonce()
    receipt, ticket = work.file_receipt(d.id, walk.lease.token, n, None)
    assert (ticket.state, ticket.version, receipt.commit) == ("verifying", 4, "b" * 40)
    _recorded(
        work,
        p.ReceiptFiled,
        object="ticket",
        id=walk.id,
        from_state="running",
        to_state="verifying",
        version=4,
        nonce=n,
        lease=digest,
    )

    n = nonce()
    v = work.begin_verify(walk.id, n)
    assert (v.commit, v.base, v.attempt, v.lease) == ("b" * 40, SHA_A, 1, digest)
    _recorded(
        work,
        p.VerifyStarted,
        object="verification",
        id=v.id,
        from_state="verifying",
        to_state="verifying",
        version=5,
        nonce=n,
        lease=digest,
    )

    n = nonce()
    done = work.finish_verify(v, outcome(), n)
    assert (done.state, done.human_hold, done.version) == ("completed", True, 6)
    assert done.lease is not None and done.lease.state == "released"
    _recorded(
        work,
        p.VerifyFinished,
        object="verification",
        id=v.id,
        from_state="verifying",
        to_state="completed",
        version=6,
        nonce=n,
        lease=digest,
    )
    _no_token_anywhere(work, walk.lease.token)
    seqs = [r["seq"] for r in work.transitions()]
    assert seqs == [e.seq for e in work.store.entries(p.WORK_KINDS)]  # one row per entry


@pytest.mark.parametrize(
    ("decision", "grade", "state", "hold"),
    [
        ("FAILED", "pass", "retryable", False),  # a pass grade never turns FAILED into a pass
        ("BLOCKED", "pass", "blocked", False),
        ("READY_FOR_HUMAN", None, "parked", False),
    ],  # no grade obtained: parked, visibly
)
def test_finish_verify_state_follows_the_verdict(
    work: Work, decision: str, grade: str | None, state: str, hold: bool
) -> None:
    walk = new_ticket(work).leased().running().ran().verifying()
    ticket = work.finish_verify(work.begin_verify(walk.id, nonce()), outcome(decision, grade))
    assert (ticket.state, ticket.human_hold) == (state, hold)
    _recorded(work, p.VerifyFinished, to_state=state, version=6)


def test_end_dispatch_without_a_receipt_uses_the_attempt(work: Work) -> None:
    walk = new_ticket(work).leased().running()
    assert walk.lease is not None and walk.dispatch is not None
    n = nonce()
    ticket = work.end_dispatch(walk.dispatch, walk.lease.token, "the worker exited 1", n)
    assert (ticket.state, ticket.attempts, ticket.reason) == ("retryable", 1, "the worker exited 1")
    _recorded(
        work,
        p.DispatchEnded,
        object="dispatch",
        id=walk.dispatch,
        from_state="running",
        to_state="retryable",
        version=4,
        nonce=n,
    )


def test_the_last_attempt_failing_blocks_the_ticket(work: Work) -> None:
    walk = new_ticket(work)
    for _ in range(work.max_attempts):
        walk.leased().running().ran().verifying()
        walk.ticket = work.finish_verify(work.begin_verify(walk.id, nonce()), outcome("FAILED"))
    assert (walk.ticket.state, walk.ticket.attempts) == ("blocked", work.max_attempts)


# -- refusals: each changes nothing ----------------------------------------------------------


def _refused(
    work: Work,
    call: Callable[[], object],
    kind: type[OmsError],
    says: str,
    code: int = EXIT_BLOCKED,
) -> OmsError:
    before = snapshot(work)
    with pytest.raises(kind) as caught:
        call()
    assert caught.value.exit_code == code
    assert says in caught.value.message and "\n" not in str(caught.value)
    assert snapshot(work) == before, "a refusal changed the db or the log"
    return caught.value


def test_stale_version_refuses_a_lease(work: Work) -> None:
    walk = new_ticket(work)
    _refused(
        work, lambda: work.lease_ticket(walk.id, 2, nonce()), StaleVersion, "is at version 1, not 2"
    )


def test_replayed_nonce_refuses_the_same_operation(work: Work, clock: Clock) -> None:
    walk = new_ticket(work)
    n = nonce()
    _, ticket = work.lease_ticket(walk.id, 1, n, ttl_s=30)
    clock.advance(31)  # expired, at the version it is now: only the nonce refuses
    _refused(
        work,
        lambda: work.lease_ticket(walk.id, ticket.version, n),
        NonceReplayed,
        f"nonce {n} was used already",
    )


def test_replayed_nonce_refuses_across_operations(work: Work) -> None:
    walk = new_ticket(work).leased()
    assert walk.lease is not None and walk.lease is not None
    used = work.transitions()[-1]["nonce"]  # the lease's nonce, replayed on a dispatch
    token = walk.lease.token
    _refused(
        work,
        lambda: work.begin_dispatch(walk.id, token, plan(), used),
        NonceReplayed,
        "was used already",
    )


def test_expired_lease_refuses_a_dispatch(work: Work, clock: Clock) -> None:
    walk = new_ticket(work).leased(ttl_s=30)
    assert walk.lease is not None
    clock.advance(30)
    token = walk.lease.token
    _refused(
        work,
        lambda: work.begin_dispatch(walk.id, token, plan(), nonce()),
        LeaseRefused,
        "expired at",
    )


# Each lease-fenced step after the dispatch, reached with a live lease, then the clock past it.
AFTER_DISPATCH: dict[str, tuple[str, Callable[[Walk], object], str]] = {
    "record_run": ("running", lambda w: w.work.record_run(str(w.dispatch), _token(w), facts(),
                                                          nonce()), "expired at"),
    "end_dispatch": ("running", lambda w: w.work.end_dispatch(str(w.dispatch), _token(w), "x",
                                                              nonce()), "expired at"),
    "file_receipt": ("ran", lambda w: w.work.file_receipt(str(w.dispatch), _token(w), nonce(),
                                                          None), "expired at"),
    "begin_verify": ("verifying", lambda w: w.work.begin_verify(w.id, nonce()), "no live lease"),
}  # fmt: skip


def _token(walk: Walk) -> str:
    assert walk.lease is not None
    return walk.lease.token


@pytest.mark.parametrize("step", sorted(AFTER_DISPATCH))
def test_an_expired_lease_refuses_every_fenced_step(work: Work, clock: Clock, step: str) -> None:
    upto, call, says = AFTER_DISPATCH[step]
    walk = new_ticket(work).leased(ttl_s=30).running()
    if upto in ("ran", "verifying"):
        walk.ran()
    if upto == "verifying":
        walk.verifying()
    clock.advance(30)
    _refused(work, lambda: call(walk), LeaseRefused, says)


def test_foreign_lease_refuses_a_dispatch(work: Work) -> None:
    mine, theirs = new_ticket(work).leased(), new_ticket(work).leased()
    assert theirs.lease is not None
    token = theirs.lease.token
    _refused(
        work,
        lambda: work.begin_dispatch(mine.id, token, plan(), nonce()),
        LeaseRefused,
        "another ticket's",
    )


def test_released_lease_refuses_a_dispatch(work: Work) -> None:
    walk = new_ticket(work).leased().running()
    assert walk.lease is not None and walk.dispatch is not None
    old = walk.lease.token
    work.end_dispatch(walk.dispatch, old, "no commit")  # releases the lease: retryable
    walk.ticket = work.ticket(walk.id)
    walk.leased()
    _refused(
        work,
        lambda: work.begin_dispatch(walk.id, old, plan(), nonce()),
        LeaseRefused,
        "was released",
    )


def test_unknown_token_refuses_a_dispatch(work: Work) -> None:
    walk = new_ticket(work).leased()
    made_up = "lease-" + "0" * 48
    _refused(
        work,
        lambda: work.begin_dispatch(walk.id, made_up, plan(), nonce()),
        LeaseRefused,
        "no such lease",
    )
    _refused(
        work,
        lambda: work.begin_dispatch(walk.id, "not-a-token", plan(), nonce()),
        LeaseRefused,
        "not a lease token",
    )


def test_a_completed_ticket_cannot_be_leased(work: Work) -> None:
    walk = new_ticket(work).leased().running().ran().verifying()
    done = work.finish_verify(work.begin_verify(walk.id, nonce()), outcome())
    _refused(
        work, lambda: work.lease_ticket(walk.id, done.version, nonce()), WrongState, "is completed"
    )


def test_a_blocked_ticket_cannot_be_leased(work: Work) -> None:
    walk = new_ticket(work).leased().running().ran().verifying()
    done = work.finish_verify(work.begin_verify(walk.id, nonce()), outcome("BLOCKED"))
    _refused(
        work, lambda: work.lease_ticket(walk.id, done.version, nonce()), WrongState, "is blocked"
    )


def test_a_live_lease_refuses_another_lease(work: Work) -> None:
    walk = new_ticket(work).leased().running()
    version = work.ticket(walk.id).version
    _refused(
        work,
        lambda: work.lease_ticket(walk.id, version, nonce()),
        LeaseRefused,
        "under a lease until",
    )


def test_no_dispatch_of_a_ticket_that_is_not_leased(work: Work) -> None:
    walk = new_ticket(work).leased().running()
    assert walk.lease is not None
    token = walk.lease.token
    _refused(
        work, lambda: work.begin_dispatch(walk.id, token, plan(), nonce()), WrongState, "not leased"
    )


def test_a_receipt_for_another_commit_is_refused(work: Work) -> None:
    walk = new_ticket(work).leased().running().ran()
    assert walk.lease is not None and walk.dispatch is not None
    token, did = walk.lease.token, walk.dispatch
    _refused(
        work,
        lambda: work.file_receipt(did, token, nonce(), "c" * 40),
        ReceiptRefused,
        "is not the commit of dispatch",
    )


def test_a_receipt_before_the_run_has_a_commit_is_refused(work: Work) -> None:
    walk = new_ticket(work).leased().running()
    assert walk.lease is not None and walk.dispatch is not None
    token, did = walk.lease.token, walk.dispatch
    _refused(
        work,
        lambda: work.file_receipt(did, token, nonce(), None),
        ReceiptRefused,
        "has no commit from its run",
    )


def test_attempts_exhausted_refuses_a_dispatch(work: Work) -> None:
    walk = new_ticket(work)
    for _ in range(work.max_attempts - 1):
        walk.leased().running().ran().verifying()
        walk.ticket = work.finish_verify(work.begin_verify(walk.id, nonce()), outcome("FAILED"))
    walk.leased().running().ran().verifying()
    # parked (no grade) after the last attempt: leasable, but no attempt is left
    walk.ticket = work.finish_verify(work.begin_verify(walk.id, nonce()), outcome("FAILED", None))
    assert walk.ticket.state == "parked"
    walk.leased()
    assert walk.lease is not None
    token = walk.lease.token
    _refused(
        work,
        lambda: work.begin_dispatch(walk.id, token, plan(), nonce()),
        AttemptsExhausted,
        f"used all {work.max_attempts} attempts",
    )


# `$` alone would let a trailing newline through: "nonce-1234\n" a nonce apart from "nonce-1234"
@pytest.mark.parametrize(
    "bad", ["short", "has space 12345", "-leading-dash", "x" * 129, "", "nonce-12345678\n"]
)
def test_a_bad_nonce_is_a_usage_error(work: Work, bad: str) -> None:
    walk = new_ticket(work)
    _refused(
        work, lambda: work.lease_ticket(walk.id, 1, bad), UsageError, "not a nonce", EXIT_USAGE
    )


@pytest.mark.parametrize(
    "bad", ["t-XYZ", "t-0123456789ab\n", "../t-0123456789ab", "g-0123456789ab"]
)
def test_a_bad_ticket_id_is_a_usage_error(work: Work, bad: str) -> None:
    new_ticket(work)
    _refused(
        work, lambda: work.lease_ticket(bad, 1, nonce()), UsageError, "not a ticket id", EXIT_USAGE
    )


def test_a_bad_goal_id_is_a_usage_error(work: Work) -> None:
    _refused(
        work,
        lambda: work.add_ticket("goal-1", "t", None, nonce()),
        UsageError,
        "not a goal id",
        EXIT_USAGE,
    )


def test_a_verify_overtaken_by_a_recovery_cannot_finish(work: Work, clock: Clock) -> None:
    walk = new_ticket(work).leased(ttl_s=30).running().ran().verifying()
    v = work.begin_verify(walk.id, nonce())
    clock.advance(31)
    work.lease_ticket(walk.id, work.ticket(walk.id).version, nonce())
    _refused(
        work, lambda: work.finish_verify(v, outcome()), StaleVersion, "changed during the verify"
    )


# -- recovery after expiry ------------------------------------------------------------------


def _recover(work: Work, walk: Walk, clock: Clock, was: str) -> Walk:
    clock.advance(31)
    old = walk.lease
    assert old is not None
    assert work.ticket(walk.id).lease.expired  # type: ignore[union-attr]  # show says so
    walk.ticket = work.ticket(walk.id)
    walk.leased()
    rec = _recorded(work, p.TicketLeased, from_state=was, to_state="leased")
    assert rec.detail["recovered_from"] == was
    (row,) = work.db.read(
        "SELECT state FROM leases WHERE token_sha256 = ?", token_digest(old.token)
    )
    assert row["state"] == "expired"
    active = work.db.read("SELECT * FROM leases WHERE ticket = ? AND state = 'active'", walk.id)
    assert len(active) == 1
    return walk


def test_recovery_of_an_expired_leased_ticket(work: Work, clock: Clock) -> None:
    walk = _recover(work, new_ticket(work).leased(ttl_s=30), clock, "leased")
    assert walk.running().ticket.attempts == 1


def test_recovery_of_an_expired_running_ticket_abandons_the_dispatch(
    work: Work, clock: Clock
) -> None:
    walk = new_ticket(work).leased(ttl_s=30).running().ran()
    first = walk.dispatch
    _recover(work, walk, clock, "running")
    assert first is not None
    gone = work.dispatch(first)
    assert gone.state == "abandoned" and "lease expired" in (gone.reason or "")
    assert work.ticket(walk.id).attempts == 1  # the abandoned attempt stays used
    assert walk.running().ticket.attempts == 2


def test_recovery_of_an_expired_verifying_ticket_abandons_the_verify(
    work: Work, clock: Clock
) -> None:
    walk = new_ticket(work).leased(ttl_s=30).running().ran().verifying()
    v = work.begin_verify(walk.id, nonce())
    _recover(work, walk, clock, "verifying")
    (row,) = work.db.read("SELECT state FROM verifications WHERE id = ?", v.id)
    assert row["state"] == "abandoned"
    ticket = work.ticket(walk.id)
    assert (ticket.state, ticket.attempts) == ("leased", 1)


# -- the schema and its migrations -----------------------------------------------------------


def test_a_fresh_db_is_at_the_schema_version_with_every_table(work: Work) -> None:
    assert SCHEMA_VERSION == len(MIGRATIONS) == 3
    conn = sqlite3.connect(work.db.path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert tables(conn) == TABLES
    finally:
        conn.close()
    assert work.db.path.stat().st_mode & 0o777 == 0o600


def test_a_db_from_a_newer_oms_is_refused(work: Work) -> None:
    repo_id = work.repo.repo_id
    work.db.conn.execute("PRAGMA user_version = 4")
    with pytest.raises(WorkDbUnavailable) as caught:
        WorkDb.open(repo_id)
    assert caught.value.exit_code == EXIT_UNAVAILABLE
    assert "has schema 4; this oms knows up to 3" in caught.value.message
    assert work.db.conn.execute("PRAGMA user_version").fetchone()[0] == 4  # left as it was


def test_a_db_file_that_is_not_sqlite_is_unavailable(git_repo: Path, oms_home: Path) -> None:
    with initialised_work(git_repo) as w:
        path, repo_id = w.db.path, w.repo.repo_id
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.write_bytes(b"this is not a database, just text\n" * 200)
    with pytest.raises(WorkDbUnavailable) as caught:
        WorkDb.open(repo_id)
    assert caught.value.exit_code == EXIT_UNAVAILABLE
    assert path.read_bytes() == b"this is not a database, just text\n" * 200  # never replaced


def test_a_ticket_changes_goal_only_fenced_and_only_while_leasable(work: Work) -> None:
    walk = new_ticket(work)
    source = walk.ticket.goal
    target = work.create_goal("the human's", "when done", "until-empty", nonce()).id
    v = walk.ticket.version
    for exc, args in ((StaleVersion, (source, target, v + 1)),  # a stale version
                      (StaleVersion, (target, target, v)),  # not where the caller says
                      (NotFound, (source, "g-" + "0" * 12, v))):  # fmt: skip
        before = snapshot(work)
        with pytest.raises(exc):
            work.move_ticket(walk.id, *args, nonce())
        assert snapshot(work) == before
    moved = work.move_ticket(walk.id, source, target, v, nonce())
    assert (moved.goal, moved.state, moved.version) == (target, "pending", v + 1)
    entry = last_entry(work)
    assert entry.kind == "work.ticket.move" and entry.data["detail"] == {"from_goal": source}
    walk.ticket = moved
    walk.leased()
    before = snapshot(work)
    with pytest.raises(WrongState):  # leased: its goal is fixed until it is leasable again
        work.move_ticket(walk.id, target, source, walk.ticket.version, nonce())
    assert snapshot(work) == before
