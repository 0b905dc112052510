"""`oms reconcile watchdog` in-process: one pass marks what is proven dead or stalled (a
killed worker and its never-run dispatch ended by the core, an expired lease whose holder
is dead, a quiet session, a dead waiter, a dead conductor), records ONE `work.watchdog`
entry, and a second pass changes nothing; live processes (the same ProcId) are untouched;
and the real command prints one JSON envelope.

A real git repository in tmp_path, `oms init`ed; real processes, really killed.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.conductor import recorded_worker
from support.oms import parse_single_json, run_oms
from support.work import Clock, initialised_work, new_ticket, nonce, snapshot

from gatekeeper.work.conductor import sessions, tokens, waiter
from gatekeeper.work.conductor.proc import ProcId
from gatekeeper.work.events import hooks
from gatekeeper.work.fence import Work
from gatekeeper.work.watchdog import watchdog


@pytest.fixture
def clock() -> Clock:
    return Clock(time.time())


@pytest.fixture
def work(git_repo: Path, oms_home: Path, clock: Clock) -> Iterator[Work]:
    with initialised_work(git_repo, clock) as w:
        yield w


def dead_proc() -> ProcId:
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    proc = ProcId.of(child.pid)
    assert proc is not None and proc.alive()
    child.kill()
    child.wait()
    assert not proc.alive()
    return proc


def conductor(work: Work, proc: ProcId) -> str:
    c = sessions.create(work, "sock", "oms-t", ["claude"], nonce())
    return sessions.move(work, c.id, c.version, "active", nonce(), proc=proc).id


def observed(work: Work, wid: str, event: str = "PreToolUse") -> None:
    hooks.observe(work, wid, hooks.Observation.model_validate({
        "client": "claude-code", "event": event, "session": f"s-{wid}-{event}", "tool": "Bash",
        "observed": "2026-12-02T12:00:00Z", "input_sha256": "1" * 64}))  # fmt: skip


def test_one_pass_recovers_what_is_dead_and_a_second_pass_changes_nothing(
    work: Work, clock: Clock
) -> None:
    stall = work.loaded.policy.conductor.stall_after_s
    a = new_ticket(work, "dies before it runs").leased(ttl_s=86_400).running()
    assert a.lease is not None
    tokens.keep(work.repo.repo_id, a.id, a.lease.token)
    wa = recorded_worker(work, a, dead_proc())
    observed(work, wa)
    b = new_ticket(work, "its lease expires").leased(ttl_s=60).running()
    wb = recorded_worker(work, b, dead_proc(), "parked")  # parked, then its process died
    observed(work, wb, "Stop")  # a completion seen: the one kind here that notifies
    cid = conductor(work, dead_proc())
    gen = waiter.arm(work, cid, nonce(), dead_proc())
    never = sessions.create(work, "sock", "oms-t2", ["claude"], nonce()).id  # no process, ever
    clock.advance(stall + 60)

    first = watchdog(work)
    assert first["evidence_seq"] is not None
    assert {w["did"] for w in first["workers"]} == {"dead"} and len(first["workers"]) == 2
    assert {(c["id"], c["did"]) for c in first["conductors"]} == {(cid, "dead"), (never, "stalled")}
    assert first["waiters"][0]["generation"] == gen.generation
    assert [s["did"] for s in first["sessions"]] == ["stalled"]
    assert [(x["ticket"], x["holder"], x["did"]) for x in first["leases"]] == [
        (b.id, "dead", "stalled")
    ]
    ended = {d["ticket"]: d["did"] for d in first["dispatches"]}
    assert ended[a.id] == "ended" and ended[b.id] == "left"  # b's lease expired: core reclaims
    assert work.ticket(a.id).state == "retryable"
    tb = work.ticket(b.id)
    assert (tb.state, tb.health) == ("running", "stalled")
    assert waiter.get(work, gen.generation).state == "failed"
    assert sessions.get(work, cid).state == "dead"
    assert [b_["id"] for b_ in first["batches"]] and first["outbox"] == []  # reported only
    kinds = [work.store.entry(s).kind for s in range(work.store.head())]
    assert kinds.count("work.watchdog") == 1 and kinds[-1] == "work.dispatch.end"

    before = snapshot(work)
    second = watchdog(work)
    assert second["changed"] == 0 and second["evidence_seq"] is None
    assert snapshot(work) == before


def test_live_processes_are_untouched_pid_reuse_is_not(work: Work, clock: Clock) -> None:
    me = ProcId.me()
    a = new_ticket(work).leased(ttl_s=86_400).running()
    live = recorded_worker(work, a, me)
    cid = conductor(work, me)
    waiter.arm(work, cid, nonce(), me)
    before = snapshot(work)
    assert watchdog(work)["changed"] == 0
    assert snapshot(work) == before
    b = new_ticket(work).leased(ttl_s=86_400).running()
    reused = recorded_worker(
        work, b, ProcId(me.pid, me.start_ticks + 1)
    )  # a live pid, another process
    out = watchdog(work)
    assert [w["id"] for w in out["workers"]] == [reused]
    assert live not in {w["id"] for w in out["workers"]}


def test_the_command_prints_one_envelope(work: Work, git_repo: Path,
                                         oms_env: dict[str, str]) -> None:  # fmt: skip
    proc = run_oms(["reconcile", "watchdog", "--repo", git_repo, "--json"], env=oms_env)
    assert proc.returncode == 0, proc.stderr
    data = parse_single_json(proc)
    assert data["ok"] is True and data["watchdog"]["changed"] == 0
