"""The run tools over MCP, end to end: a real `ClientSession` over stdio drives `oms mcp`
against an `oms init`ed repository whose main has scripted `command:` roles (under the
real `oms agent run`, bwrap), the real scanners and the real evidence log.

The scenario (one server, one lab, in order): consult -> plan -> orchestrate an
implement run -> a revise at its plan gate -> the plan approved at a pty -> the external
implementer's transfer gate -> `approve` over MCP refused with the human's command ->
the copied `oms transfer approve …` at a pty -> continue -> verifying -> completed on
human hold; a reject; a fan-out of 9 items capped at 8; an abort; a reconcile pausing at
its manifest. Every result is measured as sent (the text content's bytes) against the
8 KiB bound.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from support.oms import parse_single_json, run_oms
from support.pty import oms_at_pty
from support.runs import MAX_RESULT_BYTES, NEEDS, Mcp, RunLab, module_env, run_lab

pytestmark = pytest.mark.skipif(not NEEDS, reason="needs /usr/bin/bwrap and /usr/bin/python3")


EXTERNAL = ("implementer", "critic", "orchestrator")


@dataclass
class World:
    lab: RunLab
    mcp: Mcp
    runs: dict[str, str] = field(default_factory=dict)  # name -> run id, as the scenario goes

    def at_pty(self, *args: str) -> Any:
        assert oms_at_pty is not None
        return oms_at_pty(list(args), b"yes\n", env=self.lab.env, cwd=self.lab.root)

    def oms(self, *args: str) -> dict[str, Any]:
        proc = run_oms([*args, "--repo", str(self.lab.repo), "--json"], env=self.lab.env,
                       cwd=self.lab.root, start_new_session=True, timeout=120)  # fmt: skip
        return parse_single_json(proc)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("runs-mcp")
    with pytest.MonkeyPatch.context() as mp:
        env = module_env(root, mp)
        lab = run_lab(root, env, external=EXTERNAL)
        with Mcp(lab) as mcp:
            yield World(lab, mcp)


def actions_of(data: dict[str, Any]) -> list[str]:
    return [a["action"] for a in data["next_actions"]]


# -- the scenario, in order ---------------------------------------------------------------------


def test_1_consult_answers_with_a_bounded_summary_and_its_artifact(world: World) -> None:
    got = world.mcp.ok("oms_consult", {"goal": "Which tests are missing?", "role": "qa"})
    assert got["status"] == "completed" and got["consulted_role"] == "qa", got
    [resp] = got["responses"]
    assert resp["ok"] is True and resp["summary"].startswith("# qa answer"), resp
    [report] = [a for a in got["artifacts"] if a["kind"] == "report"]
    page = world.mcp.ok("oms_read_artifact", {"run_id": got["run_id"], "ref": report["ref"]})
    assert "goal: Which tests are missing?" in page["text"] and page["next_offset"] is None
    world.runs["consult"] = got["run_id"]


def test_2_plan_then_status_runs_and_a_paged_artifact(world: World) -> None:
    got = world.mcp.ok("oms_plan", {"goal": "Add a feature flag",
                                    "constraints": ["keep it small"]})  # fmt: skip
    assert got["status"] == "completed" and "planner answer (plan)" in got["plan"], got
    rid = world.runs["plan"] = got["run_id"]
    assert actions_of(got) == ["inspect_final_report", "reconcile"]
    st = world.mcp.ok("oms_status", {"run_id": rid})
    assert st["status"] == "completed" and "all_artifacts" not in st
    full = world.mcp.ok("oms_status", {"run_id": rid, "detail": "full"})
    assert full["constraints"] == ["keep it small"] and full["all_artifacts"]
    today = world.mcp.ok("oms_status")
    assert set(today) == {"head", "evidence_entries", "last_verdict"}  # as before runs
    listed = world.mcp.ok("oms_runs", {"limit": 5})
    assert [r["run_id"] for r in listed["work_runs"][:2]] == [rid, world.runs["consult"]]
    assert isinstance(listed["runs"], list)
    first = world.mcp.ok("oms_read_artifact", {"run_id": rid, "ref": "plan-1", "limit": 20})
    # 20 bytes of JSON text: a newline takes two, so fewer bytes of the artifact fit
    assert first["offset"] == 0 and first["truncated"] is True
    assert first["next_offset"] == len(first["text"].encode()) <= 20, first
    rest = world.mcp.ok("oms_read_artifact", {"run_id": rid, "ref": "plan-1",
                                              "offset": first["next_offset"]})  # fmt: skip
    assert (first["text"] + rest["text"]).startswith("# planner answer (plan)")
    assert "not_found" in world.mcp.error("oms_read_artifact", {"run_id": rid, "ref": "plan-9"})
    assert "not_found" in world.mcp.error("oms_read_artifact",
                                          {"run_id": world.runs["consult"],
                                           "ref": "plan-1"})  # fmt: skip


def test_3_an_implement_run_revised_then_approved_at_a_pty_stops_at_its_transfer_gate(
    world: World,
) -> None:
    got = world.mcp.ok("oms_orchestrate", {"goal": "Add feature()", "mode": "implement"})
    rid = world.runs["implement"] = got["run_id"]
    assert got["status"] == "awaiting_approval" and got["gate"]["kind"] == "plan", got
    # no agent action offers approve: only a human's command does
    assert all(a.get("arguments", {}).get("approval") != "approve" for a in got["next_actions"])
    revised = world.mcp.ok("oms_continue", {"run_id": rid, "approval": "revise",
                                            "message": "smaller, please"})  # fmt: skip
    assert revised["status"] == "awaiting_approval" and revised["gate"]["kind"] == "plan"
    kinds = [a["kind"] for a in revised["artifacts"]]
    assert "revision_packet" in kinds and kinds.count("plan") == 2, kinds
    refused = world.mcp.doc("oms_continue", {"run_id": rid, "approval": "approve"})
    assert refused["ok"] is False and refused["data"]["run_id"] == rid
    shown = world.at_pty("run", "continue", rid, "--approve", "--repo", str(world.lab.repo))
    assert shown.code == 0, shown
    assert "Approve this plan?" in shown.screen and "plan plan-2:" in shown.screen, shown
    st = world.mcp.ok("oms_status", {"run_id": rid})
    assert st["status"] == "awaiting_approval" and st["gate"]["kind"] == "transfer", st
    assert st["gate"]["role"] == "implementer"
    assert actions_of(st)[:3] == ["approve_transfer", "approve_gate", "preview_transfer"]


def test_4_approve_over_mcp_is_refused_with_what_the_human_runs(world: World) -> None:
    rid = world.runs.get("implement") or pytest.skip("the implement run did not start")
    before = world.mcp.ok("oms_status", {"run_id": rid, "detail": "full"})
    refused = world.mcp.doc("oms_continue", {"run_id": rid, "approval": "approve"})
    assert refused["ok"] is False, refused
    data = refused["data"]
    assert data["run_id"] == rid and "refused over mcp" in data["refused"]
    [act] = data["next_actions"]
    assert act["owner"]["kind"] == "human" and act["argv"][-3:] == ["continue", rid, "--approve"]
    after = world.mcp.ok("oms_status", {"run_id": rid, "detail": "full"})
    assert after["version"] == before["version"]  # nothing changed


def test_5_the_manifest_read_then_approved_at_a_pty_and_the_run_completes_on_hold(
    world: World,
) -> None:
    rid = world.runs.get("implement") or pytest.skip("the implement run did not start")
    st = world.mcp.ok("oms_status", {"run_id": rid})
    digest = st["gate"]["transfer"]
    m = world.mcp.ok("oms_transfer_preview", {"run_id": rid})
    assert (m["digest"], m["status"]) == (digest, "previewed"), m
    assert m["destination"]["model"] == "implementer:scripted" and m["approvals"] == 0
    assert m["next_actions"][0]["action"] == "approve_transfer"
    again = world.mcp.ok("oms_transfer_preview", {"run_id": rid})
    assert again["digest"] == digest  # reading records nothing new
    [copy] = [a for a in st["next_actions"] if a["action"] == "approve_transfer"]
    words = copy["argv"][copy["argv"].index("transfer") :]
    assert words[:3] == ["transfer", "approve", digest] and "--code" in words
    approved = world.at_pty(*words)
    assert approved.code == 0, approved
    seen = []
    for _ in range(4):
        got = world.mcp.ok("oms_continue", {"run_id": rid, "approval": "none"})
        seen.append(got["status"])
        if got["status"] == "completed":
            break
    assert seen[-1] == "completed", seen
    assert got["ticket"] is not None
    assert actions_of(got) == ["inspect_final_report", "review_candidate", "reconcile"], got
    full = world.mcp.ok("oms_status", {"run_id": rid, "detail": "full"})
    events = [e["kind"] for e in full["recent_events"]]
    assert {"dispatched", "verified"} <= set(events), events
    ticket = world.oms("ticket", "show", got["ticket"])["ticket"]
    assert ticket["state"] == "completed" and ticket["human_hold"] is True, ticket
    assert world.mcp.ok("oms_transfer_preview", {"run_id": rid})["releases"] == 1


def test_6_a_reject_at_the_plan_gate_fails_the_run(world: World) -> None:
    got = world.mcp.ok("oms_orchestrate", {"goal": "Something else", "mode": "implement"})
    rid = got["run_id"]
    assert got["gate"]["kind"] == "plan", got
    rejected = world.mcp.doc("oms_continue", {"run_id": rid, "approval": "reject",
                                              "message": "not now"})  # fmt: skip
    assert rejected["ok"] is False and rejected["data"]["status"] == "failed", rejected
    assert "not now" in rejected["data"]["stop_reason"]
    assert world.mcp.ok("oms_loop", {"run_id": world.runs["plan"]})["status"] == "completed"


def test_7_a_fanout_of_9_items_runs_8(world: World) -> None:
    items = [{"role": "qa", "brief": f"Angle {i}"} for i in range(9)]
    got = world.mcp.doc("oms_fanout", {"run_id": world.runs["plan"], "items": items})
    data = got["data"]
    assert got["ok"] is True, data
    assert any(a["kind"] == "fanout" for a in data["artifacts"]), data
    [fan] = [a for a in world.mcp.ok("oms_status", {"run_id": world.runs["plan"],
                                                    "detail": "full"})["all_artifacts"]
             if a["kind"] == "fanout"]  # fmt: skip
    doc = json.loads(world.mcp.ok("oms_read_artifact", {"run_id": world.runs["plan"],
                                                        "ref": fan["ref"]})["text"])  # fmt: skip
    assert doc["bounds"] == {"requested": 9, "cap": 8, "attempted": 8}, doc
    assert [i["status"] for i in doc["items"]] == ["completed"] * 8 + ["skipped"], doc
    assert data["fanout_status"] == doc["status"] == "partial" and doc["sidecar_only"] is True
    summon = world.mcp.ok("oms_summon", {"run_id": world.runs["plan"], "role": "critic",
                                         "brief": "Poke holes"})  # fmt: skip
    assert summon["status"] == "completed"  # a summon never moves the run
    assert summon["gate"] is None or summon["gate"]["kind"] == "transfer"


def test_8_abort_an_open_run(world: World) -> None:
    got = world.mcp.ok("oms_consult", {"goal": "Critique", "role": "critic"})
    assert got["status"] == "awaiting_approval", got
    aborted = world.mcp.ok("oms_abort", {"run_id": got["run_id"], "reason": "not needed"})
    assert aborted["status"] == "aborted" and aborted["next_actions"] == [], aborted
    assert "usage" in world.mcp.error("oms_abort", {"run_id": "r-nothex", "reason": "x"})


def test_9_reconcile_pauses_at_its_manifest_and_cannot_be_approved_here(world: World) -> None:
    got = world.mcp.ok("oms_reconcile", {"run_id": world.runs["plan"], "role": "orchestrator"})
    assert got["status"] == "awaiting_approval" and got["gate"]["kind"] == "transfer", got
    assert got["progress_ref"] and got["parent_run"] == world.runs["plan"]
    m = world.mcp.ok("oms_transfer_preview", {"run_id": got["run_id"]})
    assert m["status"] == "previewed", m
    assert m["destination"]["model"] == "orchestrator:scripted", m
    refused = world.mcp.doc("oms_reconcile", {"run_id": world.runs["plan"],
                                              "approval": "approve"})  # fmt: skip
    assert refused["ok"] is False and refused["data"]["next_actions"][0]["argv"][-1] == "--approve"
    cap = world.mcp.error("oms_capture_evidence", {"run_id": world.runs["plan"], "check": "no"})
    assert "no check 'no'" in cap
    captured = world.mcp.ok("oms_capture_evidence", {"run_id": world.runs["plan"],
                                                      "check": "unit"})  # fmt: skip
    assert any(a["kind"] == "log" for a in captured["artifacts"]), captured


# -- inside an agent run: the relayed `oms mcp` acts only on the runs its agent run started ----

AGENT_RUN, OTHER_AGENT_RUN = "20261201T150000Z-0a1b2c3d", "20261201T150000Z-ffffffff"
# Every run-addressing tool, with arguments it would act on (tests/unit/mcp/test_own_runs.py
# holds the table to every such tool of the server).
RUN_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("oms_status", {"detail": "full"}),
    ("oms_read_artifact", {"ref": "report-1"}),
    ("oms_transfer_preview", {}),
    ("oms_agent_board", {}),
    ("oms_summon", {"role": "qa", "brief": "look again"}),
    ("oms_fanout", {"items": [{"role": "qa", "brief": "look again"}]}),
    ("oms_continue", {"approval": "reject", "message": "no"}),
    ("oms_continue", {"approval": "revise", "message": "again"}),
    ("oms_loop", {}),
    ("oms_reconcile", {"role": "orchestrator"}),
    ("oms_abort", {"reason": "not yours"}),
    ("oms_capture_evidence", {"check": "unit"}),
]


@dataclass
class Inside:
    mcp: Mcp  # the server for AGENT_RUN
    own: str  # the run it started
    elsewhere: dict[str, str]  # whose -> a run started there


@pytest.fixture(scope="module")
def inside(world: World) -> Iterator[Inside]:
    with Mcp(world.lab, agent_run=AGENT_RUN) as mine, \
            Mcp(world.lab, agent_run=OTHER_AGENT_RUN) as other:  # fmt: skip
        own = mine.ok("oms_consult", {"goal": "What is risky here?", "role": "qa"})
        theirs = other.ok("oms_consult", {"goal": "What is slow here?", "role": "qa"})
        elsewhere = {"outside": world.runs["plan"], "another agent run": theirs["run_id"]}
        yield Inside(mine, own["run_id"], elsewhere)


def test_10_a_run_started_inside_is_acted_on_and_so_is_what_it_starts(inside: Inside) -> None:
    mine, own = inside.mcp, inside.own
    full = mine.ok("oms_status", {"run_id": own, "detail": "full"})
    assert full["status"] == "completed" and full["all_artifacts"], full
    page = mine.ok("oms_read_artifact", {"run_id": own, "ref": "report-1"})
    assert "goal: What is risky here?" in page["text"]
    rec = mine.ok("oms_reconcile", {"run_id": own, "role": "orchestrator"})
    assert rec["status"] == "awaiting_approval" and rec["parent_run"] == own, rec
    # The reconcile run was started through this server too: it is this agent run's.
    assert mine.ok("oms_transfer_preview", {"run_id": rec["run_id"]})["status"] == "previewed"
    aborted = mine.ok("oms_abort", {"run_id": rec["run_id"], "reason": "enough"})
    assert aborted["status"] == "aborted", aborted


@pytest.mark.parametrize("whose", ["outside", "another agent run"])
@pytest.mark.parametrize(("tool", "args"), RUN_CALLS, ids=[f"{t}-{i}" for i, (t, _) in
                                                          enumerate(RUN_CALLS)])  # fmt: skip
def test_11_a_run_started_elsewhere_is_refused_by_every_run_tool(
    inside: Inside, world: World, whose: str, tool: str, args: dict[str, Any]
) -> None:
    run = inside.elsewhere[whose]
    before = world.oms("run", "status", run, "--full")
    msg = inside.mcp.error(tool, {"run_id": run, **args})
    assert f"blocked: run {run} was not started by this agent run" in msg, msg
    assert world.oms("run", "status", run, "--full") == before, "a refused call changed the run"


def test_every_tool_was_measured_under_the_bound(world: World) -> None:
    assert all(n <= MAX_RESULT_BYTES for n in world.mcp.sizes.values())
    assert {
        "oms_plan",
        "oms_consult",
        "oms_continue",
        "oms_status",
        "oms_read_artifact",
        "oms_transfer_preview",
        "oms_runs",
    } <= set(world.mcp.sizes), world.mcp.sizes
