"""SIGKILL of the process that holds a ticket: during a dispatch, during a verify, and inside
a transition between its evidence append and its commit. Afterwards `oms ticket show` says
where the ticket is, a new lease (once the old one expired) recovers it, and nothing is lost
or doubled: the log and work.db agree, save an interrupted transition the doctor names.

The process is real (`python -c`, the fence in-process) and is killed with SIGKILL; the
test moves its own clock past the lease instead of waiting for it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.work import Clock, Walk, new_ticket, nonce, open_work, outcome

from gatekeeper.gates.records import init
from gatekeeper.work import payloads as p
from gatekeeper.work.audit import chain, consistency
from gatekeeper.work.fence import Work

OmsJson = Callable[..., tuple[int, dict[str, Any]]]
TESTS = Path(__file__).resolve().parents[1]

# argv: repo, ticket, how far. Walks the ticket, says where it is, then waits to be killed.
HOLDER = f"""
import json, os, signal, sys, time
sys.path.insert(0, {str(TESTS)!r})
from support.work import Walk, facts, nonce, open_work, outcome
from gatekeeper.work import payloads as p
repo, ticket, upto = sys.argv[1], sys.argv[2], sys.argv[3]
work = open_work(__import__("pathlib").Path(repo), clock=time.time)
walk = Walk(work, work.ticket(ticket)).leased(ttl_s=60).running()
said = {{"dispatch": walk.dispatch}}
if upto == "verify":
    walk.ran().verifying()
    said["verify"] = work.begin_verify(ticket, nonce()).id
if upto == "mid-transition":
    real = work.store.append
    def append_then_die(draft):
        entry = real(draft)
        print(json.dumps({{"seq": entry.seq}}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # after the durable append, before the commit
    work.store.append = append_then_die
    work.record_run(walk.dispatch, walk.lease.token, facts(), "killed-nonce-0001")
if upto == "mid-finish":
    walk.ran().verifying()
    v = work.begin_verify(ticket, nonce())
    real = work.store.append
    def append_then_die(draft):
        entry = real(draft)
        print(json.dumps({{"seq": entry.seq}}), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # READY appended, the commit never comes
    work.store.append = append_then_die
    work.finish_verify(v, outcome("READY_FOR_HUMAN"), "killed-nonce-0002")
print(json.dumps(said), flush=True)
time.sleep(600)
"""


@pytest.fixture
def work(git_repo: Path, oms_home: Path) -> Iterator[Work]:
    init(git_repo)
    w = open_work(git_repo, Clock(time.time()))
    try:
        yield w
    finally:
        w.close()


def _hold_then_kill(repo: Path, ticket: str, upto: str, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(repo), ticket, upto], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None
        said = json.loads(proc.stdout.readline() or "null")
        assert said is not None, proc.communicate(timeout=60)[1]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    return dict(said)


def _agree(work: Work, interrupted: int = 0) -> None:
    found = consistency(work)
    assert found.ok and len(found.interrupted) == interrupted, found
    assert found.transitions + interrupted == found.entries


def _show(oms_json: OmsJson, repo: Path, ticket: str) -> dict[str, Any]:
    code, out = oms_json(["ticket", "show", ticket, "--repo", repo])
    assert code == 0, out
    return dict(out["ticket"])


def _recover_and_finish(work: Work, ticket: str, was: str) -> None:
    """Past the dead holder's lease, a new lease recovers the ticket, and it walks on to
    completed on the next attempt, each transition once."""
    (held,) = work.db.read("SELECT expires FROM leases WHERE ticket = ? AND state = 'active'",
                           ticket)  # fmt: skip
    work.clock.now = float(held["expires"]) + 1  # type: ignore[attr-defined]
    walk = Walk(work, work.ticket(ticket)).leased()
    rec = p.TicketLeased.of(work.store.entry(work.store.head() - 1))
    assert rec.detail["recovered_from"] == was
    active = work.db.read("SELECT * FROM leases WHERE ticket = ? AND state = 'active'", ticket)
    assert len(active) == 1
    walk.running().ran().verifying()
    done = work.finish_verify(work.begin_verify(ticket, nonce()), outcome())
    assert (done.state, done.attempts, done.human_hold) == ("completed", 2, True)


def test_sigkill_during_a_dispatch(
    work: Work, git_repo: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    walk = new_ticket(work)
    said = _hold_then_kill(git_repo, walk.id, "dispatch", oms_env)
    shown = _show(oms_json, git_repo, walk.id)
    assert (shown["state"], shown["attempts"]) == ("running", 1)
    assert shown["dispatch"]["id"] == said["dispatch"] and shown["dispatch"]["state"] == "started"
    assert shown["lease"]["state"] == "active" and shown["last"]["kind"] == "work.dispatch.start"
    _agree(work)
    _recover_and_finish(work, walk.id, "running")
    assert work.dispatch(said["dispatch"]).state == "abandoned"  # its attempt stayed used
    _agree(work)


def test_sigkill_during_a_verify(
    work: Work, git_repo: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    walk = new_ticket(work)
    said = _hold_then_kill(git_repo, walk.id, "verify", oms_env)
    shown = _show(oms_json, git_repo, walk.id)
    assert shown["state"] == "verifying"
    assert shown["verification"] == {"id": said["verify"], "state": "started", "decision": None}
    _agree(work)
    _recover_and_finish(work, walk.id, "verifying")
    (row,) = work.db.read("SELECT state FROM verifications WHERE id = ?", said["verify"])
    assert row["state"] == "abandoned"
    _agree(work)


def test_sigkill_between_append_and_commit(
    work: Work, git_repo: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    walk = new_ticket(work)
    said = _hold_then_kill(git_repo, walk.id, "mid-transition", oms_env)
    seq = said["seq"]
    # the appended entry is durable; the db never saw the transition
    assert work.store.head() == seq + 1
    assert p.DispatchRan.of(work.store.entry(seq)).nonce == "killed-nonce-0001"
    assert not work.db.read("SELECT * FROM nonces WHERE nonce = 'killed-nonce-0001'")
    (d,) = work.db.read("SELECT state, run FROM dispatches WHERE ticket = ?", walk.id)
    assert (d["state"], d["run"]) == ("started", None)
    shown = _show(oms_json, git_repo, walk.id)
    assert shown["state"] == "running" and shown["last"]["kind"] == "work.dispatch.start"
    found = consistency(work)
    assert found.ok and [c.seq for c in found.interrupted] == [seq]
    _, report = oms_json(["doctor", "--repo", git_repo])
    assert [c["seq"] for c in report["work"]["interrupted"]] == [seq]
    assert report["work"]["ok"] is True
    _recover_and_finish(work, walk.id, "running")
    _agree(work, interrupted=1)


def test_sigkill_between_a_ready_finish_and_its_commit(
    work: Work, git_repo: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    """The READY finish is in the log, its transition never happened: the ticket is still
    verifying, the next finish (FAILED) skips the killed entry, which stays interrupted."""
    walk = new_ticket(work)
    killed = _hold_then_kill(git_repo, walk.id, "mid-finish", oms_env)["seq"]
    assert p.VerifyFinished.of(work.store.entry(killed)).detail["decision"] == "READY_FOR_HUMAN"
    assert _show(oms_json, git_repo, walk.id)["state"] == "verifying"
    (held,) = work.db.read("SELECT expires FROM leases WHERE ticket = ? AND state = 'active'",
                           walk.id)  # fmt: skip
    work.clock.now = float(held["expires"]) + 1  # type: ignore[attr-defined]
    again = Walk(work, work.ticket(walk.id)).leased().running().ran().verifying()
    done = work.finish_verify(work.begin_verify(again.id, nonce()), outcome("FAILED"))
    assert done.state == "retryable"
    entries = work.store.entries(p.WORK_KINDS)
    assert killed not in chain(entries, {})  # no later entry names it committed
    assert all(p.KINDS_BY_KIND[e.kind].of(e).after != killed for e in entries)
    found = consistency(work)
    assert found.ok and [c.seq for c in found.interrupted] == [killed]
    _, report = oms_json(["doctor", "--repo", git_repo])
    assert report["work"]["ok"] is True and report["work"]["tampered"] == []
