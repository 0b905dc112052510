"""Runs' refusals in-process, with no provider: bad input to `continue`/`loop`/`abort`, an
approval asked for where no human is, a gate that is not there, a finished run, a stale
version, an unknown step; every refusal changing nothing (the whole db and the log).

A real git repository in tmp_path, `oms init`ed; runs made and moved with `Runs` directly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.work import Clock, initialised_work, new_ticket, snapshot

from gatekeeper.errors import EXIT_BLOCKED, NotFound, UsageError
from gatekeeper.work.fence import StaleVersion, Work
from gatekeeper.work.model import MAX_BODY_BYTES
from gatekeeper.work.runs import actions, engine, flow, gates, implement
from gatekeeper.work.runs.gates import ApprovalRefused
from gatekeeper.work.runs.model import Gate, Run
from gatekeeper.work.runs.store import NewArtifact, RunFinished, Runs

PLAN_GATE = Gate(kind="plan", step="implement", role="planner", policy_role="planner",
                 artifact="plan-1", reason="approve the plan")  # fmt: skip
TRANSFER_GATE = Gate(kind="transfer", step="implement", role="implementer",
                     policy_role="implementer", transfer="sha256:" + "a" * 64,
                     reason="a transfer")  # fmt: skip


@pytest.fixture
def work(git_repo: Path, oms_home: Path) -> Iterator[Work]:
    with initialised_work(git_repo) as w:
        yield w


def new_run(work: Work, gate: Gate | None = None) -> Run:
    runs = Runs(work)
    run = runs.create("orchestrate", "implement", "Add a feature", (), {}, step="start")
    if gate is not None:
        run = runs.step(run, state="awaiting_approval", step=gate.step, gate=gate).run
    return run


@pytest.mark.parametrize(
    ("approval", "message", "via", "match"),
    [
        ("yes", None, "mcp", "approval is one of"),
        ("approve", None, "tty", "via is one of"),
        ("revise", "", "mcp", "message is empty"),
        ("revise", "x" * 5000, "mcp", "longer than"),
        ("revise", "a\x00b", "mcp", "contains NUL"),
    ],
)
def test_bad_continue_input_is_refused_before_anything(
    work: Work, approval: str, message: str | None, via: str, match: str
) -> None:
    run = new_run(work, PLAN_GATE)
    before = snapshot(work)
    with pytest.raises(UsageError, match=match):
        flow.continue_run(work.repo.top, run.id, approval, message, via=via)
    assert snapshot(work) == before


def test_a_bad_run_id_is_refused(work: Work) -> None:
    for call in (lambda: flow.continue_run(work.repo.top, "r-nothex"),
                 lambda: flow.loop_run(work.repo.top, "../x"),
                 lambda: flow.abort(work.repo.top, "r-", "why")):  # fmt: skip
        with pytest.raises(UsageError, match="not a run id"):
            call()
    with pytest.raises(NotFound):
        flow.continue_run(work.repo.top, "r-" + "0" * 12)


@pytest.mark.parametrize("via", ["mcp", "cli"])
def test_approve_over_mcp_or_the_cli_is_refused_with_the_command_to_run(
    work: Work, via: str
) -> None:
    run = new_run(work, PLAN_GATE)
    before = snapshot(work)
    with pytest.raises(ApprovalRefused) as refused:
        flow.continue_run(work.repo.top, run.id, "approve", via=via)
    assert refused.value.exit_code == EXIT_BLOCKED
    assert f"oms run continue {run.id} --approve" in refused.value.message
    [action] = refused.value.data["next_actions"]  # type: ignore[index]
    assert action["owner"]["kind"] == "human" and action["action"] == "approve_gate"
    assert action["argv"][-4:] == ["run", "continue", run.id, "--approve"]
    assert snapshot(work) == before


@pytest.mark.parametrize("approval", ["approve", "reject", "revise"])
def test_an_answer_to_a_gate_that_is_not_open_is_refused(work: Work, approval: str) -> None:
    run = new_run(work)
    before = snapshot(work)
    with pytest.raises(UsageError, match=f"run {run.id} has no open gate"):
        flow.continue_run(work.repo.top, run.id, approval, "msg", via="terminal")
    assert snapshot(work) == before


def test_revise_at_a_transfer_gate_is_refused(work: Work) -> None:
    run = new_run(work, TRANSFER_GATE)
    before = snapshot(work)
    with pytest.raises(UsageError, match="takes approve or reject"):
        flow.continue_run(work.repo.top, run.id, "revise", "other", via="mcp")
    assert snapshot(work) == before


def test_reject_at_a_transfer_gate_fails_the_run_and_names_the_gate(work: Work) -> None:
    run = new_run(work, TRANSFER_GATE)
    out, code = flow.continue_run(work.repo.top, run.id, "reject", via="cli")
    assert code == 1
    assert out["status"] == "failed" and out["gate"] is None
    assert out["stop_reason"] == "rejected at the transfer gate"
    assert out["next_actions"] == []
    [ev] = Runs(work).events(run.id, last=1)
    assert ev.kind == "approval_rejected" and ev.data["via"] == "cli"


def test_abort_needs_a_reason_and_a_finished_run_is_not_aborted(work: Work) -> None:
    run = new_run(work, PLAN_GATE)
    before = snapshot(work)
    with pytest.raises(UsageError, match="reason is empty"):
        flow.abort(work.repo.top, run.id, "")
    assert snapshot(work) == before
    out, code = flow.abort(work.repo.top, run.id, "no longer needed")
    assert code == 0 and out["status"] == "aborted" and out["gate"] is None
    [ev] = Runs(work).events(run.id, last=1)
    assert ev.kind == "aborted" and ev.data == {"reason": "no longer needed", "ticket": None,
                                                "ticket_state": None}  # fmt: skip
    before = snapshot(work)
    with pytest.raises(RunFinished) as finished:
        flow.abort(work.repo.top, run.id, "again")
    assert finished.value.exit_code == EXIT_BLOCKED
    out, code = flow.continue_run(work.repo.top, run.id, "approve", via="mcp")
    assert code == 0 and out["status"] == "aborted"  # continue of a finished run: a no-op
    assert snapshot(work) == before


def test_a_finished_run_takes_no_new_state_and_a_stale_version_changes_nothing(
    work: Work,
) -> None:
    runs = Runs(work)
    run = new_run(work)
    moved = runs.step(run, state="planning", step="plan").run
    before = snapshot(work)
    with pytest.raises(StaleVersion):
        runs.step(run, state="failed")
    assert snapshot(work) == before
    done = runs.step(moved, state="aborted", gate=None).run
    before = snapshot(work)
    with pytest.raises(RunFinished):
        runs.step(done, state="planning")
    assert snapshot(work) == before


def test_an_unknown_step_and_bad_loop_bounds_are_refused(work: Work) -> None:
    runs = Runs(work)
    run = runs.create("orchestrate", "implement", "goal", (), {}, step="nowhere")
    with pytest.raises(NotFound, match="no step 'nowhere'"):
        engine.advance(work, runs, run)
    for cycles, steps in ((0, 1), (51, 1), (1, 0), (1, 51)):
        with pytest.raises(UsageError, match="cycles are 1 to 50"):
            engine.loop(work, runs, run, cycles, steps)


def test_a_plan_gate_passes_on_its_own_only_with_the_plan_autopilot(work: Work) -> None:
    assert work.loaded.policy.runs.autopilot == []
    assert not gates.auto_passes(work, PLAN_GATE)
    assert not gates.auto_passes(work, None)
    runs = work.loaded.policy.runs.model_copy(update={"autopilot": ["plan"]})
    policy = work.loaded.policy.model_copy(update={"runs": runs})
    work.loaded = dataclasses.replace(work.loaded, policy=policy)
    assert gates.auto_passes(work, PLAN_GATE)
    assert not gates.auto_passes(work, TRANSFER_GATE)


def test_no_next_action_lets_an_agent_approve(work: Work) -> None:
    run = new_run(work, PLAN_GATE)
    got = actions.derive(work, run, [])
    approving = [a for a in got if "approve" in a.action]
    assert approving and all(a.owner == "human" and a.tool is None for a in approving)
    assert {a.arguments.get("approval") for a in got if a.tool == "oms_continue"} == {
        "revise", "reject"}  # fmt: skip


def test_a_lease_that_ran_out_before_verify_sends_the_run_back_to_the_core(
    git_repo: Path, oms_home: Path
) -> None:
    clock = Clock()
    with initialised_work(git_repo, clock) as work:
        walk = new_ticket(work).leased(ttl_s=60).running().ran().verifying()
        runs = Runs(work)
        run = runs.create("orchestrate", "implement", "goal", (), {}, step="start")
        run = runs.step(run, state="verifying", step="verify", ticket=walk.id).run
        clock.advance(61)
        got = engine.advance(work, runs, run)
        assert got.moved and got.run.state == "implementing" and got.run.step == "implement"
        [ev] = runs.events(run.id, last=1)
        assert ev.kind == "lease_expired" and ev.data == {"ticket": walk.id}
        t = work.ticket(walk.id)
        assert t.state == "verifying" and t.verification is None  # the core's, untouched


def test_a_ticket_body_holds_the_goal_and_the_plan_within_the_cores_bound(work: Work) -> None:
    runs = Runs(work)
    run = new_run(work)
    ref, body = implement.ticket_body(runs, run)
    assert ref is None and body.startswith(b"Add a feature\n\n## Approved plan (none")
    big = NewArtifact(kind="plan", data=b"step\n" * 60_000, summary="a long plan")
    run = runs.step(run, artifacts=[big]).run
    ref, body = implement.ticket_body(runs, run)
    assert ref == "plan-1" and len(body) == MAX_BODY_BYTES
    assert body.endswith(f"the whole plan is artifact plan-1 of run {run.id})".encode())
