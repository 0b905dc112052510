"""Runs' groundwork end to end: a plan run, a consult, a transfer gate, with scripted
`command:` roles under the real `oms agent run` (bwrap) and the real evidence log."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.runs import NEEDS, run_lab
from support.secrets import fake_aws_key

from evidence import EvidenceStore, state_root
from gatekeeper.errors import EXIT_BLOCKED
from gatekeeper.repo.git import open_repo
from gatekeeper.work.runs import api, guests
from gatekeeper.work.runs.gates import TransferBlocked

pytestmark = pytest.mark.skipif(not NEEDS, reason="needs /usr/bin/bwrap and /usr/bin/python3")


def _kinds(repo: Path) -> list[str]:
    r = open_repo(repo)
    store = EvidenceStore.open(state_root(), r.repo_id, common_dir=r.common_dir)
    return [e.kind for e in store.entries()]


def test_a_plan_run_asks_the_planner_and_completes(tmp_path: Path, oms_env: dict[str, str]) -> None:
    lab = run_lab(tmp_path, oms_env)
    out, code = api.plan(lab.repo, "Add a feature flag")
    assert code == 0, out
    assert out["status"] == "completed"
    [plan] = [a for a in out["artifacts"] if a["kind"] == "plan"]
    assert plan["ref"] == "plan-1"
    assert "planner answer (plan)" in out["plan"]
    got, _ = api.read_artifact(lab.repo, out["run_id"], "plan-1")
    assert "goal: Add a feature flag" in got["text"]
    kinds = _kinds(lab.repo)
    assert kinds.count("work.run.create") == 1
    assert kinds.count("work.run.step") == 2
    assert [a["action"] for a in out["next_actions"]] == ["inspect_final_report", "reconcile"]


def test_an_external_consult_stops_at_its_transfer_gate(
    tmp_path: Path, oms_env: dict[str, str]
) -> None:
    lab = run_lab(tmp_path, oms_env, external=("critic",))
    out, code = api.consult(lab.repo, "Critique it", "critic")
    assert code == 0, out
    assert out["status"] == "awaiting_approval"
    assert out["gate"]["kind"] == "transfer"
    actions = [a["action"] for a in out["next_actions"]]
    assert actions[:2] == ["approve_transfer", "approve_gate"]
    assert "transfer.preview" in _kinds(lab.repo)
    assert "provider_invoked" not in str(out["responses"])


def test_an_autopilot_rule_passes_the_transfer_gate(
    tmp_path: Path, oms_env: dict[str, str]
) -> None:
    lab = run_lab(tmp_path, oms_env, external=("critic",), autopilot=("critic",))
    out, code = api.consult(lab.repo, "Critique it", "critic")
    assert code == 0, out
    assert out["status"] == "completed"
    kinds = _kinds(lab.repo)
    assert kinds.count("transfer.approve") == 1
    assert kinds.count("transfer.release") == 1
    status, _ = api.status(lab.repo, out["run_id"])
    assert "approval_auto_approved" in [e["kind"] for e in status["recent_events"]]


def test_a_blocked_manifest_fails_the_run_and_nothing_is_sent(
    tmp_path: Path, oms_env: dict[str, str]
) -> None:
    """A goal holding a secret blocks the manifest it is the purpose of: the run fails with
    that reason, no provider is invoked, and no approval or release is recorded, even with an
    autopilot rule covering the destination."""
    lab = run_lab(tmp_path, oms_env, external=("critic",), autopilot=("critic",))
    goal = f"Critique it; the key is {fake_aws_key()}"
    out, code = api.consult(lab.repo, goal, "critic")
    assert code == 1, out
    assert out["status"] == "failed"
    assert "is blocked" in out["stop_reason"], out["stop_reason"]
    assert out["responses"] == []
    kinds = _kinds(lab.repo)
    assert "transfer.preview" in kinds
    assert "transfer.approve" not in kinds and "transfer.release" not in kinds
    assert "agent.run.start" not in kinds
    # a summon of the same role is refused outright (exit 3) and records no step
    done, _ = api.plan(lab.repo, "Add a feature flag")
    before = kinds.count("work.run.step") + 2  # the plan run's two steps
    with pytest.raises(TransferBlocked) as caught:
        guests.summon(lab.repo, done["run_id"], "critic", f"look at {fake_aws_key()}")
    assert caught.value.exit_code == EXIT_BLOCKED
    assert _kinds(lab.repo).count("work.run.step") == before
