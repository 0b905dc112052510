"""Orchestration benchmark: fenced ticket transitions per second, with real evidence.

One ticket's walk is six transitions, each one `BEGIN IMMEDIATE` transaction of work.db and
one durable evidence append: lease -> begin_dispatch -> record_run -> file_receipt ->
begin_verify -> finish_verify (the verify record with a fixed outcome; the gate is not run).
Runs: one process; 8 processes, each on its own tickets; 8 processes racing for the same
tickets with expected versions (a loser re-reads the ticket and moves on once it is taken).
After each run: transitions rows == work.* log entries == transitions the processes report,
the doctor's consistency check is clean, and every ticket was walked exactly once.

Anchor: the raw `fsync` rate of the same disk (a one-byte write and an fsync, in the bench's
own directory), measured in the same run; the raw `store.append` rate beside it, since the
fence is bounded by it. Issue 33's rows: single-process transitions/s >= 0.8 x the fsync
rate / 4 (three fsyncs for the append, one for the work.db commit), and the fsync calls
of one acknowledged append (os.fsync and os.fdatasync, counted as
tests/unit/evidence/test_fsync_count.py counts them) <= 3.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rows import record

from evidence import Draft, EvidenceStore
from gatekeeper.gates.records import init
from gatekeeper.work import payloads as p
from gatekeeper.work.audit import consistency
from gatekeeper.work.fence import LeaseRefused, StaleVersion, Work, WrongState
from gatekeeper.work.model import DispatchPlan, RunFacts, VerifyOutcome

PROCS = 8
GOAL_RATIO = 0.8  # of the raw fsync rate / 4
GOAL_FSYNCS = 3
PLAN = DispatchPlan(role="implementer", provider="command:bench", engine="command:bench",
                    model="none", authority="worktree-write", base="a" * 40, run_id="run-x",
                    workspace=None, capabilities=(), acceptance=())  # fmt: skip
FACTS = RunFacts(exit_code=0, signal=None, timed_out=False, candidate="b" * 40,
                 candidate_ref=None, workspace="/nonexistent", evidence_seq=1)  # fmt: skip
READY = VerifyOutcome(decision="READY_FOR_HUMAN", result_seq=1, grade="pass")


def _nonce() -> str:
    return f"bench-{secrets.token_hex(12)}"


def _repo(tmp: Path) -> Path:
    repo = tmp / "repo"
    repo.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp),
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}  # fmt: skip
    for args in (["init", "-q", "-b", "main"], ["config", "user.name", "bench"],
                 ["config", "user.email", "bench@example.invalid"],
                 ["commit", "-q", "--allow-empty", "-m", "initial"]):  # fmt: skip
        subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True)
    return repo


def walk(work: Work, ticket: str, version: int) -> int:
    """The six transitions of one ticket, from pending to completed; returns 6."""
    lease, _ = work.lease_ticket(ticket, version, _nonce())
    return 1 + _rest(work, ticket, lease.token)


def _rest(work: Work, ticket: str, token: str) -> int:
    d = work.begin_dispatch(ticket, token, PLAN.model_copy(update={"run_id": _nonce()}), _nonce())
    work.record_run(d.id, token, FACTS, _nonce())
    work.file_receipt(d.id, token, _nonce(), None)
    work.finish_verify(work.begin_verify(ticket, _nonce()), READY, _nonce())
    return 5


def _tickets(work: Work, n: int) -> list[str]:
    goal = work.create_goal("bench", "all walked", "until-empty", _nonce())
    return [work.add_ticket(goal.id, f"t{i}", None, _nonce()).id for i in range(n)]


def own_tickets(repo: Path, tickets: list[str], barrier: Any, out: Any) -> None:
    work = Work.open(repo)
    barrier.wait()
    out.put(sum(walk(work, t, 1) for t in tickets))
    work.close()


def contended(repo: Path, tickets: list[str], me: int, barrier: Any, out: Any) -> None:
    """Every process goes for every ticket (each from its own starting point); a stale
    version is re-read, and a ticket someone else leased is left to them."""
    work = Work.open(repo)
    order = tickets[me:] + tickets[:me]
    done, stale, won = 0, 0, []
    barrier.wait()
    for t in order:
        seen = work.ticket(t)
        while seen.state == "pending":
            try:
                lease, _ = work.lease_ticket(t, seen.version, _nonce())
            except StaleVersion:
                stale += 1
                seen = work.ticket(t)  # re-read: retry if still pending, else it is taken
                continue
            except (LeaseRefused, WrongState):
                break
            done += 1 + _rest(work, t, lease.token)
            won.append(t)
            break
    out.put((done, stale, won))
    work.close()


def _parallel(
    target: Callable[..., None], argsets: list[tuple[Any, ...]]
) -> tuple[float, list[Any]]:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(len(argsets) + 1), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*a, barrier, out)) for a in argsets]
    for pr in procs:
        pr.start()
    barrier.wait()
    t = time.perf_counter()
    results = [out.get(timeout=600) for _ in procs]
    dt = time.perf_counter() - t
    for pr in procs:
        pr.join()
        assert pr.exitcode == 0, pr.exitcode
    return dt, results


class Ledger:
    """The counts a run must leave consistent: transitions rows and work.* entries."""

    def __init__(self, work: Work) -> None:
        self.work = work
        self.rows, self.entries = self._now()

    def _now(self) -> tuple[int, int]:
        rows = self.work.db.read("SELECT count(*) AS n FROM transitions")[0]["n"]
        return int(rows), len(self.work.store.entries(p.WORK_KINDS))

    def check(self, reported: int, tickets: list[str]) -> None:
        rows, entries = self._now()
        new_rows, new_entries = rows - self.rows, entries - self.entries
        assert new_rows == new_entries == reported == 6 * len(tickets), (
            new_rows, new_entries, reported, 6 * len(tickets))  # fmt: skip
        found = consistency(self.work)
        assert found.ok and not found.interrupted, found
        leases = [r.ticket for _, r in self.work.store.payloads(p.TicketLeased)]
        assert all(leases.count(t) == 1 for t in tickets), "a ticket leased twice"
        assert {x.state for x in map(self.work.ticket, tickets)} == {"completed"}
        self.rows, self.entries = rows, entries


def fsync_rate(tmp: Path, n: int) -> float:
    """Raw fsyncs/s of the disk under `tmp`: a one-byte append and an fsync, `n` times."""
    fd = os.open(tmp / "fsync-probe", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        t = time.perf_counter()
        for _ in range(n):
            os.write(fd, b"x")
            os.fsync(fd)
        return n / (time.perf_counter() - t)
    finally:
        os.close(fd)


def fsyncs_per_append(store: EvidenceStore) -> int:
    """The os.fsync and os.fdatasync calls of one acknowledged single append."""
    calls = 0
    real = {name: getattr(os, name) for name in ("fsync", "fdatasync")}

    def counting(name: str) -> Callable[[int], None]:
        def call(fd: int) -> None:
            nonlocal calls
            calls += 1
            real[name](fd)

        return call

    try:
        for name in real:
            setattr(os, name, counting(name))
        store.append(Draft(kind="note", data={"counted": True}))
    finally:
        for name, fn in real.items():
            setattr(os, name, fn)
    return calls


def bench(tmp: Path, quick: bool) -> dict[str, float]:
    repo = _repo(tmp)
    init(repo)
    work = Work.open(repo)
    single_n, per_proc, shared_n = (15, 5, 24) if quick else (50, 15, 60)
    got: dict[str, float] = {}

    got["fsync"] = fsync_rate(tmp, 6 * single_n)
    raw = EvidenceStore.init(tmp / "raw", "rbench")[0]
    got["fsyncs"] = fsyncs_per_append(raw)
    t = time.perf_counter()
    for i in range(6 * single_n):
        raw.append(Draft(kind="note", data={"i": i}))
    got["raw_append"] = 6 * single_n / (time.perf_counter() - t)

    tickets = _tickets(work, single_n)
    ledger = Ledger(work)
    t = time.perf_counter()
    done = sum(walk(work, x, 1) for x in tickets)
    got["single"] = done / (time.perf_counter() - t)
    ledger.check(done, tickets)

    groups = [_tickets(work, per_proc) for _ in range(PROCS)]
    ledger = Ledger(work)
    dt, results = _parallel(own_tickets, [(repo, g) for g in groups])
    got["own"] = sum(results) / dt
    ledger.check(sum(results), [x for g in groups for x in g])

    shared = _tickets(work, shared_n)
    ledger = Ledger(work)
    dt, answers = _parallel(contended, [(repo, shared, i) for i in range(PROCS)])
    done = sum(a[0] for a in answers)
    won = [x for a in answers for x in a[2]]
    assert sorted(won) == sorted(shared), "a ticket walked twice, or not at all"
    got["contended"] = done / dt
    got["stale"] = sum(a[1] for a in answers)
    ledger.check(done, shared)
    work.close()
    return got


def main() -> int:
    quick = "--quick" in sys.argv
    with tempfile.TemporaryDirectory(prefix="oms-bench-", dir=os.environ.get("BENCH_TMP")) as d:
        tmp = Path(d)
        os.environ["OMS_HOME"] = str(tmp / "state")  # the children inherit it
        r = bench(tmp, quick)
    anchor = r["fsync"] / 4
    print(f"raw fsync (one-byte append + fsync):    {r['fsync']:7.0f} /s"
          f"   anchor: / 4 = {anchor:.0f}/s")  # fmt: skip
    print(f"evidence append, raw (durable):         {r['raw_append']:7.0f} /s"
          f"   {r['fsyncs']:.0f} fsync calls each")  # fmt: skip
    share = r["single"] / r["raw_append"]
    print(
        f"ticket transitions, 1 process:          {r['single']:7.0f} /s"
        f"   {r['single'] / anchor:.2f}x the anchor   ({share:.0%} of the raw append rate)"
    )
    print(f"ticket transitions, {PROCS} processes (own): {r['own']:7.0f} /s   total")
    print(f"ticket transitions, {PROCS} processes racing: {r['contended']:6.0f} /s   total, "
          f"{r['stale']:.0f} stale-version refusals re-read")  # fmt: skip
    print("no transition lost or doubled: transitions rows == work.* entries == reported")
    ratio = r["single"] / anchor
    record("durable `work.*` transitions, one process", f"{r['single']:.0f}/s",
           f"raw fsync {r['fsync']:.0f}/s / 4 = {anchor:.0f}/s", ratio,
           f">= {GOAL_RATIO} x fsync rate / 4", ratio >= GOAL_RATIO)  # fmt: skip
    record("fsync calls per acknowledged append", f"{r['fsyncs']:.0f}",
           "files and directories, the work.db commit apart", None,
           f"<= {GOAL_FSYNCS}", r["fsyncs"] <= GOAL_FSYNCS)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
