"""Summon and fan-out end to end: guest roles onto existing runs, with scripted `command:`
roles under the real `oms agent run` (bwrap), the real transfer gate and evidence log.

A summon or a fan-out is sidecar-only: the run's state, step, gate and role mapping stay as
they were, whatever it recorded beside them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.pty import approve_copied
from support.repos import commit_on
from support.runs import NEEDS, READ_ROLES, RunLab, module_env, run_lab

from evidence import EvidenceStore, state_root
from gatekeeper.errors import NotFound, UsageError
from gatekeeper.repo.git import open_repo
from gatekeeper.work.providers.base import RoleUnavailable
from gatekeeper.work.runs import api, guests
from gatekeeper.work.runs.api import opened_runs
from gatekeeper.work.runs.model import Run

pytestmark = pytest.mark.skipif(not NEEDS, reason="needs /usr/bin/bwrap and /usr/bin/python3")


@dataclass
class Lab:
    lab: RunLab
    done: str  # a completed plan run (it has plan-1)
    waiting: str  # a consult of the external critic, waiting at its transfer gate

    @property
    def repo(self) -> Path:
        return self.lab.repo


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("guests")
    with pytest.MonkeyPatch.context() as mp:
        env = module_env(root, mp)
        got = run_lab(root, env, external=("critic",), roles=(*READ_ROLES, "failer"),
                      modes={"failer": "fail"})  # fmt: skip
        done, code = api.plan(got.repo, "Add a feature flag")
        assert code == 0 and done["status"] == "completed", done
        waiting, code = api.consult(got.repo, "Critique the flag", "critic")
        assert code == 0 and waiting["status"] == "awaiting_approval", waiting
        yield Lab(got, done["run_id"], waiting["run_id"])


def _run(repo: Path, run_id: str) -> Run:
    with opened_runs(repo) as (_, runs):
        return runs.get(run_id)


def _events(repo: Path, run_id: str) -> list[Any]:
    with opened_runs(repo) as (_, runs):
        return runs.events(run_id)


def _text(repo: Path, run_id: str, ref: str) -> str:
    got, _ = api.read_artifact(repo, run_id, ref)
    return str(got["text"])


def _kinds(repo: Path) -> list[str]:
    r = open_repo(repo)
    store = EvidenceStore.open(state_root(), r.repo_id, common_dir=r.common_dir)
    return [e.kind for e in store.entries()]


def _same_place(before: Run, after: Run) -> None:
    assert (after.state, after.step, after.gate, after.roles, after.stop_reason) == (
        before.state, before.step, before.gate, before.roles, before.stop_reason)  # fmt: skip


# -- summon ---------------------------------------------------------------------------------


def test_a_summon_onto_a_completed_run_records_its_handoff_and_moves_nothing(lab: Lab) -> None:
    before = _run(lab.repo, lab.done)
    out, code = guests.summon(lab.repo, lab.done, "qa", "Is the plan testable?",
                              agent="orchestrator", persona="a careful tester",
                              evidence_refs=["plan-1"])  # fmt: skip
    assert code == 0, out
    assert out["summon_status"] == "completed"
    assert out["summon_kind"] == "qa"
    assert out["summoned_agent"] == "orchestrator"  # the one-call override
    after = _run(lab.repo, lab.done)
    _same_place(before, after)
    assert after.roles["qa"] == "qa"  # the override did not rewrite the mapping
    assert after.version == before.version + 1  # ONE step
    d_ref, r_ref = out["directive_ref"], out["response_ref"]
    assert d_ref.startswith("directive-") and r_ref.startswith("report-")
    directive = json.loads(_text(lab.repo, lab.done, d_ref))
    assert directive["brief"] == "Is the plan testable?"
    assert directive["persona"] == "a careful tester"
    assert directive["policy_role"] == "orchestrator"
    [ev] = directive["evidence"]
    assert ev["ref"] == "plan-1" and "planner answer (plan)" in ev["text"]
    answer = _text(lab.repo, lab.done, r_ref)
    assert "qa answer (qa)" in answer and '["plan-1"]' in answer
    last = _events(lab.repo, lab.done)[-1]
    assert last.kind == "agent_summoned"
    assert last.data == {"role": "qa", "policy_role": "orchestrator", "kind": "qa",
                         "agent": "orchestrator", "persona": "a careful tester",
                         "evidence_refs": ["plan-1"], "directive_ref": d_ref,
                         "response_ref": r_ref, "status": "completed",
                         "summon_key": last.data["summon_key"]}  # fmt: skip
    assert "evidence_captured" not in [e.kind for e in _events(lab.repo, lab.done)]


def test_a_summon_onto_a_run_at_its_gate_leaves_the_gate_as_it_was(lab: Lab) -> None:
    before = _run(lab.repo, lab.waiting)
    out, code = guests.summon(lab.repo, lab.waiting, "planner", "What would you plan?")
    assert code == 0, out
    assert out["summon_status"] == "completed" and out["summon_kind"] == "plan"
    assert out["response_ref"].startswith("plan-")
    after = _run(lab.repo, lab.waiting)
    _same_place(before, after)
    assert after.state == "awaiting_approval" and after.gate is not None
    assert out["next_actions"][0]["action"] == "approve_transfer"  # the run's own gate


def test_evidence_of_another_run_is_refused_and_nothing_changes(lab: Lab) -> None:
    with opened_runs(lab.repo) as (_, runs):  # a run with no artifacts; lab.done has plan-1
        other = runs.create("plan", "plan", "another run", (), {}, step="start")
    with pytest.raises(NotFound, match="has no artifact 'plan-1'"):
        guests.summon(lab.repo, other.id, "qa", "Check it", evidence_refs=["plan-1"])
    assert _run(lab.repo, other.id).version == other.version


@pytest.mark.parametrize(("args", "message"), [
    ({"role": "implementer"}, "a summoned role is one of"),
    ({"kind": "verdict"}, "a summon's kind is one of"),
    ({"brief": "  "}, "the brief is empty"),
    ({"evidence_refs": "plan-1"}, "evidence_refs are a list"),
    ({"constraints": ["x"] * 21}, "at most 20 constraints"),
])  # fmt: skip
def test_a_bad_summon_is_a_usage_error(lab: Lab, args: dict[str, Any], message: str) -> None:
    call: dict[str, Any] = {"role": "qa", "brief": "Check it", **args}
    with pytest.raises(UsageError, match=message):
        guests.summon(lab.repo, lab.done, **call)


def test_a_summon_by_a_role_the_policy_lacks_is_refused_before_anything(lab: Lab) -> None:
    before = _run(lab.repo, lab.done)
    with pytest.raises(RoleUnavailable, match="'nobody' is no role of the policy"):
        guests.summon(lab.repo, lab.done, "qa", "Check it", agent="nobody")
    assert _run(lab.repo, lab.done).version == before.version


def test_the_default_kind_follows_the_role() -> None:
    got = {
        r: guests.checked_call(r, "b").kind
        for r in ("qa", "critic", "researcher", "planner", "orchestrator", "verifier")
    }
    assert got == {"qa": "qa", "critic": "critique", "researcher": "research", "planner": "plan",
                   "orchestrator": "plan", "verifier": "review"}  # fmt: skip


def test_an_external_summon_waits_at_its_own_gate_then_runs_once_approved(lab: Lab) -> None:
    before = _run(lab.repo, lab.done)
    ask = {"role": "critic", "brief": "Critique the plan", "evidence_refs": ["plan-1"]}
    out, code = guests.summon(lab.repo, lab.done, **ask)
    assert code == 0, out
    assert out["summon_status"] == "awaiting_approval"
    assert out["response_ref"] is None and out["responses"] == []
    digest = out["transfer"]
    human, again = out["next_actions"][:2]
    assert human["action"] == "approve_transfer" and digest in human["command"]
    assert again["tool"] == "oms_summon"
    assert again["arguments"] == {"run_id": lab.done, "kind": "critique", **ask}
    waiting = _run(lab.repo, lab.done)
    _same_place(before, waiting)  # the run's own gate is untouched (it has none)
    [manifest] = [a for a in out["artifacts"] if a["kind"] == "transfer_manifest"]
    doc = json.loads(_text(lab.repo, lab.done, manifest["ref"]))
    assert doc["transfer"] == digest and doc["destination"] == "command:critic:scripted"
    assert _events(lab.repo, lab.done)[-1].kind == "approval_requested"

    # The same call again before a human said yes: the same answer, nothing recorded.
    out2, _ = guests.summon(lab.repo, lab.done, **ask)
    assert out2["summon_status"] == "awaiting_approval" and out2["transfer"] == digest
    assert _run(lab.repo, lab.done).version == waiting.version
    assert "transfer.release" not in _kinds(lab.repo)

    rc, said = approve_copied(env=lab.lab.env, cwd=lab.repo, argv=human["argv"])
    assert rc == 0, said
    out3, code = guests.summon(lab.repo, **again["arguments"])
    assert code == 0, out3
    assert out3["summon_status"] == "completed" and out3["transfer"] == digest
    assert "critic answer (critique)" in _text(lab.repo, lab.done, out3["response_ref"])
    _same_place(before, _run(lab.repo, lab.done))
    assert _kinds(lab.repo).count("transfer.release") == 1  # the approval is spent


# -- fan-out --------------------------------------------------------------------------------


def test_a_fanout_of_nine_runs_eight_marks_the_failure_and_moves_nothing(lab: Lab) -> None:
    before = _run(lab.repo, lab.waiting)
    roles = ["qa", "researcher", "verifier", "planner", "orchestrator", "qa", "researcher",
             "verifier", "qa"]  # fmt: skip
    items: list[dict[str, Any]] = [{"role": r, "brief": f"item {i}"} for i, r in enumerate(roles)]
    items[2]["agent"] = "failer"  # exits 3: that item fails, the others go on
    out, code = guests.fanout(lab.repo, lab.waiting, items)
    assert code == 0, out
    assert out["bounds"] == {"requested": 9, "cap": 8, "attempted": 8}
    got = [(i["role"], i["status"]) for i in out["items"]]
    assert [r for r, _ in got] == roles
    assert [s for _, s in got] == ["completed", "completed", "failed", *["completed"] * 5,
                                   "skipped"]  # fmt: skip
    assert out["items"][2]["stop_reason"] == "verifier: the provider exited 3"
    assert out["items"][8]["stop_reason"] == "over the cap of 8"
    assert out["fanout_status"] == "partial"
    assert all(len(i["summary"]) <= 200 for i in out["items"])
    assert len(json.dumps(out["items"])) < 8192
    recorded = json.loads(_text(lab.repo, lab.waiting, out["fanout_ref"]))
    assert recorded["items"] == out["items"] and recorded["sidecar_only"] is True
    # Sidecar-only: the run still waits at its gate exactly as before.
    after = _run(lab.repo, lab.waiting)
    _same_place(before, after)
    assert after.version == before.version + 9  # eight summons and the fan-out record
    summoned = [e for e in _events(lab.repo, lab.waiting) if e.kind == "agent_summoned"]
    assert "failed" in [e.data["status"] for e in summoned[-8:]]


def test_a_fanout_stops_at_the_first_item_its_gate_holds(lab: Lab) -> None:
    before = _run(lab.repo, lab.done)
    n_before = _events(lab.repo, lab.done)[-1].n
    items = [{"role": "critic", "brief": "Fan-out critique"}, {"role": "qa", "brief": "QA"}]
    out, code = guests.fanout(lab.repo, lab.done, items)
    assert code == 0, out
    assert out["fanout_status"] == "blocked"
    assert [i["status"] for i in out["items"]] == ["awaiting_approval", "not_attempted"]
    assert out["bounds"]["attempted"] == 1
    actions = [a["action"] for a in out["next_actions"]]
    assert actions[:2] == ["approve_transfer", "fanout_again"]
    after = _run(lab.repo, lab.done)
    _same_place(before, after)
    assert after.version == before.version + 2  # the manifest, then the fan-out record
    kinds = [e.kind for e in _events(lab.repo, lab.done) if e.n > n_before]
    assert kinds == ["approval_requested", "fanout_recorded"]  # the qa item never ran


@pytest.mark.parametrize(("items", "message"), [
    ([], "non-empty list"),
    ([{"role": "qa", "brief": "ok"}, {"role": "qa"}], "fan-out item 2: the brief is empty"),
    ([{"role": "qa", "brief": "ok", "tool": "x"}], "fan-out item 1: unknown key 'tool'"),
    ([{"role": "qa", "brief": "ok", "evidence_refs": ["nope-1"]}], "has no artifact"),
])  # fmt: skip
def test_a_bad_fanout_item_runs_nothing(lab: Lab, items: list[Any], message: str) -> None:
    before = _run(lab.repo, lab.done)
    with pytest.raises((UsageError, NotFound), match=message):
        guests.fanout(lab.repo, lab.done, items)
    assert _run(lab.repo, lab.done).version == before.version


def test_the_fanout_cap_is_the_least_of_the_call_policy_and_eight(lab: Lab) -> None:
    with opened_runs(lab.repo) as (work, _):
        assert guests.cap_of(work, None) == 8
        assert guests.cap_of(work, 3) == 3
        for bad in (0, 9, True):
            with pytest.raises(UsageError, match="max_items is 1 to 8"):
                guests.cap_of(work, bad)


def test_a_side_gate_whose_manifest_went_stale_previews_anew(lab: Lab) -> None:
    ask = {"role": "critic", "brief": "Critique again after a change"}
    first, _ = guests.summon(lab.repo, lab.done, **ask)
    assert first["summon_status"] == "awaiting_approval"
    commit_on(lab.repo, "main", {"notes.txt": "moved on\n"}, env=lab.lab.env,
              index=lab.lab.root / "index-stale", message="HEAD moves")  # fmt: skip
    # The old manifest names the old HEAD: approve and release would refuse it, so the
    # same summon asks for a fresh one instead of waiting on it for ever.
    second, _ = guests.summon(lab.repo, lab.done, **ask)
    assert second["summon_status"] == "awaiting_approval"
    assert second["transfer"] != first["transfer"]
    manifests = [a for a in second["artifacts"] if a["kind"] == "transfer_manifest"]
    assert len(manifests) >= 2


def test_a_fanout_whose_every_item_failed_exits_1(lab: Lab) -> None:
    items = [{"role": "qa", "brief": "Check it", "agent": "failer"}]
    out, code = guests.fanout(lab.repo, lab.done, items)
    assert code == 1, out
    assert out["fanout_status"] == "failed"
    assert out["items"][0]["stop_reason"] == "qa: the provider exited 3"
