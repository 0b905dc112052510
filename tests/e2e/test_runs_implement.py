"""Implement runs end to end: the implementer through the core's ticket, lease, dispatch and
receipt, then the result gate and one grade; scripted `command:` roles under the real
`oms agent run` (bwrap), the real scanners, the real evidence log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.pty import continue_at_pty
from support.repos import git
from support.runs import NEEDS, RunLab, policy, run_lab
from support.work import open_work

from evidence import EvidenceStore, state_root
from gatekeeper.repo.git import open_repo
from gatekeeper.work.runs import api

pytestmark = pytest.mark.skipif(not NEEDS, reason="needs /usr/bin/bwrap and /usr/bin/python3")

NO_PLANNER = ("researcher", "qa", "verifier", "critic")


def kinds(repo: Path) -> list[str]:
    r = open_repo(repo)
    store = EvidenceStore.open(state_root(), r.repo_id, common_dir=r.common_dir)
    return [e.kind for e in store.entries()]


def events(repo: Path, run_id: str) -> list[str]:
    out, _ = api.status(repo, run_id, detail="full")
    return [e["kind"] for e in out["recent_events"]]


@pytest.fixture
def lab(tmp_path: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> RunLab:
    monkeypatch.setenv("OMS_WORK_DIR", str(tmp_path / "work"))
    return run_lab(tmp_path, {**oms_env, "OMS_WORK_DIR": str(tmp_path / "work")},
                   roles=NO_PLANNER)  # fmt: skip


def test_an_implement_run_without_a_planner_goes_through_the_core_to_completed(
    lab: RunLab,
) -> None:
    before = len(kinds(lab.repo))
    out, code = api.orchestrate(lab.repo, "Add a feature", auto_loop=True)
    assert code == 0, out
    assert out["status"] == "completed", out
    assert out["stop"] == "terminal"
    ticket = out["ticket"]
    assert ticket is not None and out["goal"] is not None
    shown = api.read_artifact(lab.repo, out["run_id"], "report-1")[0]
    assert '"decision": "READY_FOR_HUMAN"' in shown["text"]
    work = [k for k in kinds(lab.repo)[before:] if k.startswith("work.")]
    assert work == [
        "work.run.create", "work.run.step",  # start
        "work.goal.create", "work.ticket.add", "work.run.step",  # the ticket, once
        "work.ticket.lease", "work.dispatch.start", "work.dispatch.run", "work.receipt",
        "work.run.step",  # dispatched: verifying
        "work.verify.start", "work.verify.finish", "work.run.step",  # completed
    ]  # fmt: skip
    actions = [a["action"] for a in out["next_actions"]]
    assert actions == ["inspect_final_report", "review_candidate", "reconcile"]
    w = open_work(lab.repo)
    try:
        got = w.ticket(ticket)
        assert got.state == "completed" and got.human_hold
        commit = w.dispatch(got.dispatch.id).run.candidate  # type: ignore[union-attr]
    finally:
        w.close()
    files = git(lab.repo, "ls-tree", "--name-only", commit, env=lab.env).split()
    assert "feature.py" in files
    assert events(lab.repo, out["run_id"]) == ["run_started", "ticket_created", "dispatched",
                                               "verified"]  # fmt: skip


def test_a_failing_implementer_retries_then_fails_the_run_at_max_attempts(lab: RunLab) -> None:
    lab.set_policy(policy(roles=NO_PLANNER, modes={"implementer": "fail"}))
    out, code = api.orchestrate(lab.repo, "Add a feature", auto_loop=True)
    assert code == 1, out
    assert out["status"] == "failed"
    assert "is blocked" in out["stop_reason"] and "exited 3" in out["stop_reason"]
    ev = [e for e in events(lab.repo, out["run_id"]) if e == "dispatched"]
    assert len(ev) == 2
    logs = [a for a in out["artifacts"] if a["kind"] == "log"]
    assert [a["ref"] for a in logs] == ["log-1", "log-2"]
    assert "attempt 1: ended" in logs[0]["summary"] and "attempt 2: ended" in logs[1]["summary"]
    assert kinds(lab.repo).count("work.ticket.lease") == 2


def test_an_external_grader_holds_the_run_at_its_transfer_gate_until_a_human_approves(
    lab: RunLab,
) -> None:
    lab.set_policy(policy(roles=NO_PLANNER, external=("grader",)))
    out, code = api.orchestrate(lab.repo, "Add a feature", auto_loop=True)
    assert code == 0, out
    assert out["status"] == "awaiting_approval" and out["stop"] == "gate", out
    g = out["gate"]
    assert (g["kind"], g["step"], g["role"], g["policy_role"]) == (
        "transfer", "verify", "verifier", "grader")  # fmt: skip
    assert "work.verify.start" not in kinds(lab.repo)
    got = continue_at_pty(lab.repo, out["run_id"], b"yes\n", env=lab.env)
    assert got.code == 0, got
    assert "Approve this transfer?" in got.screen
    done = json.loads(got.out)
    assert done["status"] == "completed", done
    log = kinds(lab.repo)
    assert log.count("transfer.approve") == 1 and log.count("transfer.release") == 1
    assert log.index("transfer.release") < log.index("work.verify.start")
    report, _ = api.read_artifact(lab.repo, out["run_id"], "report-1")
    assert json.loads(report["text"])["grade"]["grade"] == "pass"
