"""The orchestration state in-process: an `oms init`ed repository, its `Work` with a clock
the test moves, a dump of every table of `work.db`, and the ticket walked through its states.

`snapshot()` is what "nothing changed" means in a refusal test: every row of every table
and the evidence head, compared before and after.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidence import Entry, EvidenceStore, state_root
from gatekeeper.gates.records import init
from gatekeeper.repo.git import open_repo
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import default_branch_ref
from gatekeeper.work.db import WorkDb
from gatekeeper.work.fence import Work
from gatekeeper.work.model import DispatchPlan, Lease, RunFacts, Ticket, VerifyOutcome

SHA_A = "a" * 40
SHA_B = "b" * 40


class Clock:
    """A clock the test sets: `Work(..., clock=Clock())`; `advance(s)` moves it on."""

    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def nonce() -> str:
    return f"test-{secrets.token_hex(8)}"


def open_work(repo_dir: Path, clock: Clock | None = None) -> Work:
    """`Work.open` as the CLI does, with `clock` in place of the wall clock."""
    repo = open_repo(repo_dir)
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    _, commit = default_branch_ref(repo)
    loaded = read_policy_at(repo.top, commit)
    return Work(repo, WorkDb.open(repo.repo_id), store, loaded, clock=clock or Clock())


@contextmanager
def initialised_work(repo_dir: Path, clock: Clock | None = None) -> Iterator[Work]:
    init(repo_dir)
    work = open_work(repo_dir, clock)
    try:
        yield work
    finally:
        work.close()


def plan(run_id: str | None = None, base: str = SHA_A) -> DispatchPlan:
    return DispatchPlan(
        role="implementer",
        provider="command:impl",
        engine="command:impl",
        model="none",
        authority="worktree-write",
        base=base,
        run_id=run_id or f"run-{secrets.token_hex(6)}",
        workspace=None,
        capabilities=("edit",),
        acceptance=("tests pass",),
    )


def facts(candidate: str | None = SHA_B) -> RunFacts:
    return RunFacts(
        exit_code=0,
        signal=None,
        timed_out=False,
        candidate=candidate,
        candidate_ref=None,
        workspace="/nonexistent/ws",
        evidence_seq=1,
    )


def outcome(decision: str = "READY_FOR_HUMAN", grade: str | None = "pass") -> VerifyOutcome:
    return VerifyOutcome.model_validate(
        {
            "decision": decision,
            "result_seq": 1,
            "grade": grade,
            "grade_problem": None if grade else "the grader is unavailable",
        }
    )


@dataclass
class Walk:
    """One ticket taken as far as a test needs: its lease, dispatch and verify."""

    work: Work
    ticket: Ticket
    lease: Lease | None = None
    dispatch: str | None = None

    @property
    def id(self) -> str:
        return self.ticket.id

    def leased(self, ttl_s: int | None = None) -> Walk:
        self.lease, self.ticket = self.work.lease_ticket(
            self.id, self.ticket.version, nonce(), ttl_s
        )
        return self

    def running(self) -> Walk:
        assert self.lease is not None
        d = self.work.begin_dispatch(self.id, self.lease.token, plan(), nonce())
        self.dispatch = d.id
        self.ticket = self.work.ticket(self.id)
        return self

    def ran(self, candidate: str | None = SHA_B) -> Walk:
        assert self.lease is not None and self.dispatch is not None
        self.work.record_run(self.dispatch, self.lease.token, facts(candidate), nonce())
        return self

    def verifying(self) -> Walk:
        assert self.lease is not None and self.dispatch is not None
        _, self.ticket = self.work.file_receipt(self.dispatch, self.lease.token, nonce(), SHA_B)
        return self


def new_ticket(work: Work, title: str = "a ticket") -> Walk:
    goal = work.create_goal("an objective", "when done", "until-empty", nonce())
    return Walk(work, work.add_ticket(goal.id, title, None, nonce()))


def tamper_db(work: Work, sql: str, *args: object) -> None:
    """Change work.db behind oms' back, in a transaction of its own (a tampering user)."""
    conn = sqlite3.connect(work.db.path)
    try:
        with conn:
            conn.execute(sql, args)
    finally:
        conn.close()


def tables(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    return [r[0] for r in rows]


def dump(db_file: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, read through a connection of its own."""
    conn = sqlite3.connect(db_file)
    try:
        return {
            t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall(), key=repr)  # nosec B608 -- table names from sqlite_master
            for t in tables(conn)
        }
    finally:
        conn.close()


def snapshot(work: Work) -> tuple[dict[str, list[tuple[Any, ...]]], int, bytes]:
    """What a refusal must leave as it was: the whole db, the log's length and its bytes."""
    return dump(work.db.path), work.store.head(), work.store.log_path.read_bytes()


def last_entry(work: Work) -> Entry:
    return work.store.entry(work.store.head() - 1)


def transition_row(work: Work, seq: int) -> sqlite3.Row:
    (row,) = work.db.read("SELECT * FROM transitions WHERE seq = ?", seq)
    return row
