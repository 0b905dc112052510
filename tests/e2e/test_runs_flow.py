"""`continue`, `loop` and `abort` end to end: gates only a human at a terminal (or an
autopilot rule) passes, rejections and revisions, bounded loops; scripted `command:` roles
under the real `oms agent run` (bwrap), a real pty as the human's terminal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.pty import continue_at_pty, continue_without_terminal
from support.runs import NEEDS, RunLab, policy, run_lab
from support.work import open_work, snapshot

from gatekeeper.work.runs import api, flow
from gatekeeper.work.runs.gates import ApprovalRefused
from gatekeeper.work.runs.store import RunFinished

pytestmark = pytest.mark.skipif(not NEEDS, reason="needs /usr/bin/bwrap and /usr/bin/python3")

AUTOPILOT_PLAN = '[runs]\nautopilot = ["plan"]\n'


@pytest.fixture
def lab(tmp_path: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> RunLab:
    monkeypatch.setenv("OMS_WORK_DIR", str(tmp_path / "work"))
    return run_lab(tmp_path, {**oms_env, "OMS_WORK_DIR": str(tmp_path / "work")},
                   external=("implementer",))  # fmt: skip


def state(lab: RunLab) -> Any:
    w = open_work(lab.repo)
    try:
        return snapshot(w)
    finally:
        w.close()


def log_kinds(lab: RunLab) -> list[str]:
    w = open_work(lab.repo)
    try:
        return [e.kind for e in w.store.entries()]
    finally:
        w.close()


def run_events(lab: RunLab, run_id: str) -> list[dict[str, Any]]:
    out, _ = api.status(lab.repo, run_id, detail="full")
    return list(out["recent_events"])


def at_plan_gate(lab: RunLab) -> dict[str, Any]:
    out, code = api.orchestrate(lab.repo, "Add a feature")
    assert code == 0, out
    assert out["status"] == "awaiting_approval" and out["gate"]["kind"] == "plan", out
    return out


def test_only_a_human_at_a_terminal_passes_the_plan_and_transfer_gates(lab: RunLab) -> None:
    out = at_plan_gate(lab)
    rid = out["run_id"]
    assert out["gate"]["artifact"] == "plan-1"
    before = state(lab)
    with pytest.raises(ApprovalRefused) as refused:
        flow.continue_run(lab.repo, rid, "approve", via="mcp")
    assert refused.value.exit_code == 3
    [action] = refused.value.data["next_actions"]  # type: ignore[index]
    assert action["argv"][-4:] == ["run", "continue", rid, "--approve"]
    assert action["owner"]["kind"] == "human"
    with pytest.raises(ApprovalRefused):
        flow.continue_run(lab.repo, rid, "approve", via="cli")
    # `--approve` with no controlling terminal, `yes` on stdin: refused, nothing changed
    cli = continue_without_terminal(lab.repo, rid, env=lab.env)
    assert cli.returncode == 3, cli
    err = json.loads(cli.stdout)["error"]
    assert err["kind"] == "blocked" and "terminal" in err["message"]
    assert err["data"]["next_actions"][0]["action"] == "approve_gate"
    assert state(lab) == before

    # the human approves the plan at a terminal: it shows the plan; then the implementer's
    # transfer gate
    got = continue_at_pty(lab.repo, rid, b"yes\n", env=lab.env)
    assert got.code == 0, got
    assert "asks you to approve its plan" in got.screen and "planner answer" in got.screen
    shown = json.loads(got.out)
    assert shown["status"] == "awaiting_approval" and shown["gate"]["kind"] == "transfer"
    assert shown["gate"]["role"] == "implementer" and shown["ticket"] is not None
    kinds = [e["kind"] for e in run_events(lab, rid)]
    assert kinds[-3:] == ["approval_granted", "ticket_created", "approval_requested"]
    assert "work.ticket.lease" not in log_kinds(lab)  # nothing leased before the transfer

    # the transfer, at the same terminal: its own manifest prompt; then dispatch and verify
    got = continue_at_pty(lab.repo, rid, b"yes\n", env=lab.env)
    assert got.code == 0, got
    assert "Approve this transfer?" in got.screen
    shown = json.loads(got.out)
    assert shown["status"] == "completed", shown
    log = log_kinds(lab)
    assert log.count("transfer.approve") == 1 and log.count("transfer.release") == 1
    assert log.index("transfer.release") < log.index("work.dispatch.start")
    granted = [e for e in run_events(lab, rid) if e["kind"] == "approval_granted"]
    assert [e["data"]["gate"] for e in granted] == ["plan", "transfer"]
    assert granted[0]["data"]["who"].startswith("human:")
    w = open_work(lab.repo)
    try:
        t = w.ticket(shown["ticket"])
        assert t.state == "completed" and t.human_hold
        assert t.body.blob is not None
        body = w.store.blobs.get(t.body.blob.removeprefix("sha256:")).decode()
    finally:
        w.close()
    assert body.startswith("Add a feature\n") and "## Approved plan (plan-1)" in body
    assert "planner answer (plan)" in body


def test_a_no_at_the_terminal_approves_nothing(lab: RunLab) -> None:
    rid = at_plan_gate(lab)["run_id"]
    before = state(lab)
    got = continue_at_pty(lab.repo, rid, b"no\n", env=lab.env)
    assert got.code == 3, got
    assert "not approved" in json.loads(got.out)["error"]["message"]
    assert state(lab) == before


def test_reject_fails_the_run_and_a_finished_run_is_not_aborted(lab: RunLab) -> None:
    rid = at_plan_gate(lab)["run_id"]
    out, code = flow.continue_run(lab.repo, rid, "reject", "not this way", via="mcp")
    assert code == 1
    assert out["status"] == "failed"
    assert out["stop_reason"] == "rejected at the plan gate: not this way"
    [ev] = [e for e in run_events(lab, rid) if e["kind"] == "approval_rejected"]
    assert ev["data"] == {"gate": "plan", "via": "mcp", "message": "not this way"}
    assert out["ticket"] is None and "work.goal.create" not in log_kinds(lab)
    before = state(lab)
    with pytest.raises(RunFinished) as finished:
        flow.abort(lab.repo, rid, "too late")
    assert finished.value.exit_code == 3
    again, code = flow.continue_run(lab.repo, rid, "none")  # a no-op on a finished run
    assert code == 1 and again["status"] == "failed"
    assert state(lab) == before


def test_revise_replans_with_the_revision_packet_as_evidence(lab: RunLab) -> None:
    rid = at_plan_gate(lab)["run_id"]
    with pytest.raises(Exception, match="revise needs a message"):
        flow.continue_run(lab.repo, rid, "revise", via="mcp")
    out, code = flow.continue_run(lab.repo, rid, "revise", "split it in two", via="mcp")
    assert code == 0, out
    assert out["status"] == "awaiting_approval" and out["gate"]["artifact"] == "plan-2"
    packet, _ = api.read_artifact(lab.repo, rid, "revision_packet-1")
    assert packet["text"] == "split it in two"
    plan, _ = api.read_artifact(lab.repo, rid, "plan-2")
    assert 'evidence: ["revision_packet-1"]' in plan["text"]
    first, _ = api.read_artifact(lab.repo, rid, "plan-1")
    assert "evidence: []" in first["text"]
    kinds = [e["kind"] for e in run_events(lab, rid)]
    assert "revision_requested" in kinds


def test_none_at_a_closed_gate_records_nothing_and_revise_at_a_transfer_gate_is_refused(
    lab: RunLab,
) -> None:
    rid = at_plan_gate(lab)["run_id"]
    before = state(lab)
    out, code = flow.continue_run(lab.repo, rid, "none")
    assert code == 0 and out["status"] == "awaiting_approval" and out["stop"] == "gate"
    assert [a["action"] for a in out["next_actions"]][:2] == ["read_plan", "approve_gate"]
    assert state(lab) == before
    lab.set_policy(policy(external=("critic", "implementer")))
    consult, _ = api.consult(lab.repo, "Critique it", "critic")
    assert consult["gate"]["kind"] == "transfer"
    before = state(lab)
    with pytest.raises(Exception, match="takes approve or reject"):
        flow.continue_run(lab.repo, consult["run_id"], "revise", "other", via="mcp")
    assert state(lab) == before


def test_the_plan_autopilot_passes_the_plan_gate_and_records_it(lab: RunLab) -> None:
    lab.set_policy(policy(extra=AUTOPILOT_PLAN))
    out, code = api.orchestrate(lab.repo, "Add a feature", auto_loop=True)
    assert code == 0, out
    assert out["status"] == "completed", out
    ev = run_events(lab, out["run_id"])
    [auto] = [e for e in ev if e["kind"] == "approval_auto_approved"]
    assert auto["data"] == {"gate": "plan", "rule": "runs.autopilot", "artifact": "plan-1"}
    assert "approval_granted" not in [e["kind"] for e in ev]


def test_loop_stops_at_the_cycle_cap_then_at_a_gate_and_abort_ends_it(lab: RunLab) -> None:
    out, code = api.orchestrate(lab.repo, "Add a feature", auto_loop=True, max_cycles=1,
                                max_steps=1)  # fmt: skip
    assert code == 0 and out["stop"] == "cycle_cap" and out["status"] == "planning"
    rid = out["run_id"]
    looped, code = flow.loop_run(lab.repo, rid)
    assert code == 0 and looped["stop"] == "gate" and looped["gate"]["kind"] == "plan"
    assert looped["cycle_count"] == 1
    assert looped["cycles"][0]["steps"][-1]["to"] == "awaiting_approval"
    again, _ = flow.loop_run(lab.repo, rid)
    assert again["stop"] == "gate" and again["version"] == looped["version"]
    with pytest.raises(Exception, match="reason is empty"):
        flow.abort(lab.repo, rid, " ")
    aborted, code = flow.abort(lab.repo, rid, "changed my mind")
    assert code == 0 and aborted["status"] == "aborted" and aborted["gate"] is None
    assert aborted["stop_reason"] == "changed my mind"
    done, _ = flow.loop_run(lab.repo, rid)
    assert done["stop"] == "terminal"
