"""`oms run …` through the real CLI: each subcommand renders one runs function, human text
is sanitised, and every bad input is one clear line with its exit code.

One lab for the module (an `oms init`ed repository whose main has scripted `command:`
roles; the critic and the orchestrator are external, so they need a transfer), so the
provider runs stay few: a plan run, a consult stopping at its transfer gate, and what the
other helpers' functions need when they are present on this branch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from support.oms import parse_single_json, run_oms
from support.runs import NEEDS, RunLab, module_env, run_lab

pytestmark = pytest.mark.skipif(not NEEDS, reason="needs /usr/bin/bwrap and /usr/bin/python3")

ESC_GOAL = "Add a flag \x1b[31mred\x1b[0m \u202e"
RUN_LINE = re.compile(r"^run (r-[0-9a-f]{12}) \(")


@dataclass
class Lab:
    lab: RunLab
    plan_id: str
    plan_out: str  # the plan run's human output
    gate_id: str  # a consult waiting at its transfer gate
    review_id: str = ""  # an orchestrate run waiting at its critic's gate

    def oms(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        # A new session: no controlling terminal, whatever the test runner has.
        return run_oms([*args, "--repo", str(self.lab.repo)], env=self.lab.env,
                       cwd=self.lab.root, start_new_session=True, timeout=180, **kw)  # fmt: skip

    def json(self, *args: str) -> tuple[int, dict[str, Any]]:
        proc = self.oms(*args, "--json")
        return proc.returncode, parse_single_json(proc)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("runs-cli")
    with pytest.MonkeyPatch.context() as mp:
        env = module_env(root, mp)
        got = run_lab(root, env, external=("critic", "orchestrator"))
        first = Lab(got, "", "", "")
        proc = first.oms("run", "plan", ESC_GOAL)
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        m = RUN_LINE.match(proc.stdout)
        assert m is not None, proc.stdout
        code, consult = first.json("run", "consult", "Critique it", "--role", "critic")
        assert code == 0 and consult["status"] == "awaiting_approval", consult
        yield Lab(got, m.group(1), proc.stdout, consult["run_id"])


def test_plan_prints_a_few_sanitised_lines_with_its_artifacts_and_next_actions(lab: Lab) -> None:
    out = lab.plan_out
    assert "\x1b" not in out and "\u202e" not in out
    lines = out.splitlines()
    assert lines[0].startswith(f"run {lab.plan_id} (plan, plan): completed at step "), lines
    assert any(line.startswith("artifacts: plan-1 (plan, ") for line in lines), out
    assert any("response from planner (ok): # planner answer (plan)" in line for line in lines)
    assert "next:" in lines
    assert any("tool oms_read_artifact" in line and "plan-1" in line for line in lines), out
    assert len(lines) < 15, out


def test_artifact_text_is_sanitised_per_line_without_json_and_exact_with_it(lab: Lab) -> None:
    proc = lab.oms("run", "artifact", lab.plan_id, "plan-1")
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\u202e" not in proc.stdout
    assert "goal: Add a flag \\u001b[31mred\\u001b[0m \\u202e" in proc.stdout.splitlines()
    code, data = lab.json("run", "artifact", lab.plan_id, "plan-1", "--max-bytes", "10")
    assert code == 0
    assert data["text"] == "# planner "[:10] and data["next_offset"] == 10, data
    code, data = lab.json("run", "artifact", lab.plan_id, "plan-1", "--offset", "10")
    assert f"goal: {ESC_GOAL}" in data["text"] and data["next_offset"] is None


def test_status_and_list_show_the_runs(lab: Lab) -> None:
    code, st = lab.json("run", "status", lab.gate_id)
    assert code == 0 and st["status"] == "awaiting_approval" and st["gate"]["kind"] == "transfer"
    assert [e["kind"] for e in st["recent_events"]][-1] == "approval_requested"
    proc = lab.oms("run", "status", lab.gate_id)
    text = proc.stdout
    assert f"run {lab.gate_id} (consult, research): awaiting_approval" in text
    assert "gate: transfer for critic: critic (command:critic:scripted) would receive" in text
    assert re.search(r"\[human\] Approve the transfer at your terminal: \S+.* transfer approve "
                     r"sha256:[0-9a-f]{64} --code \S+", text), text  # fmt: skip
    assert f"run continue {lab.gate_id} --approve" in text
    assert "events: " in text and "approval_requested" in text
    code, listed = lab.json("run", "list", "--limit", "5")
    assert [r["run_id"] for r in listed["runs"]][:2] == [lab.gate_id, lab.plan_id]


# Each is a real `oms` process (a few seconds under load): the brief's list, and the rest
# of the input checks in the functions' and the CLI's unit tests.
@pytest.mark.parametrize(("args", "code", "message"), [
    (("run", "status", "r-nothex"), 2, "run id"),
    (("run", "orchestrate", "Do it", "--mode", "bogus"), 2, "mode is one of plan, research"),
    (("run", "consult", "Do it", "--role", "critic", "--agent", "nosuch"), 4,
     "'nosuch' is no role of the policy"),
    (("run", "plan", "   "), 2, "the goal is empty"),
    (("run", "continue", "r-000000000000", "--approve", "--reject"), 2,
     "--approve, --reject and --revise exclude one another"),
])  # fmt: skip
def test_every_bad_input_is_one_clear_line(lab: Lab, args: tuple[str, ...], code: int,
                                           message: str) -> None:  # fmt: skip
    proc = lab.oms(*args)
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    assert proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert line.startswith("oms: ") and message in line, line


def test_fanout_items_must_be_a_bounded_regular_file_holding_a_json_list(lab: Lab) -> None:
    d = lab.lab.root / "items"
    d.mkdir(exist_ok=True)
    fifo = d / "fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    cases = {  # the other cases: tests/unit/cli/test_run_render.py
        fifo: "a regular file",  # never opened for a blocking read
        d / "object.json": "a JSON list of objects",
    }
    (d / "object.json").write_text(json.dumps({"role": "critic", "brief": "b"}))
    for path, message in cases.items():
        proc = lab.oms("run", "fanout", lab.plan_id, "--items", str(path))
        assert proc.returncode == 2, (path, proc.stderr)
        assert message in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr


def test_approve_without_a_terminal_is_refused_with_exit_3_and_what_to_run(lab: Lab) -> None:
    # (the human text of the same refusal: the reconcile test below)
    code, got = lab.json("run", "continue", lab.gate_id, "--approve")
    assert code == 3 and got["error"]["kind"] == "blocked", got
    assert "controlling terminal" in got["error"]["message"], got
    assert f"run continue {lab.gate_id} --approve" in got["next_actions"][0]["command"]
    _, st = lab.json("run", "status", lab.gate_id)
    assert st["status"] == "awaiting_approval", st  # nothing changed


def test_continue_none_then_reject_at_the_gate_fails_the_run(lab: Lab) -> None:
    rid = lab.gate_id
    code, same = lab.json("run", "continue", rid)
    assert code == 0 and same["status"] == "awaiting_approval", same
    proc = lab.oms("run", "continue", rid, "--reject", "--message", "not \x1b now")
    assert proc.returncode == 1, proc.stderr
    assert f"run {rid} (consult, research): failed" in proc.stdout
    assert "rejected at the transfer gate: not \\u001b now" in proc.stdout


def test_orchestrate_review_maps_a_role_and_stops_at_the_critics_gate(lab: Lab) -> None:
    proc = lab.oms("run", "orchestrate", "Review it", "--mode", "review",
                   "--role", "critic=command:critic:scripted")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [head, *rest] = proc.stdout.splitlines()
    m = re.match(r"run (r-[0-9a-f]{12}) \(orchestrate, review\): awaiting_approval", head)
    assert m is not None, head
    assert any(line.startswith("gate: transfer for critic:") for line in rest), rest
    lab.review_id = m.group(1)


def test_loop_on_a_finished_run_and_abort_of_an_open_one(lab: Lab) -> None:
    code, looped = lab.json("run", "loop", lab.plan_id, "--max-cycles", "2")
    assert code == 0 and looped["status"] == "completed", looped
    rid = lab.review_id or pytest.skip("the review run did not start")
    proc = lab.oms("run", "abort", rid, "--reason", "changed \x07 my mind")
    assert proc.returncode == 0, proc.stderr
    assert f"run {rid} (orchestrate, review): aborted" in proc.stdout
    assert "\x07" not in proc.stdout and "\\u0007" in proc.stdout, proc.stdout
    proc = lab.oms("run", "abort", rid, "--reason", "again")
    assert proc.returncode != 0 and len(proc.stderr.splitlines()) == 1, proc.stderr


def test_summon_attaches_an_advisory_answer_to_the_run(lab: Lab) -> None:
    code, got = lab.json("run", "summon", lab.plan_id, "--role", "qa", "--brief", "Check it",
                         "--kind", "qa", "--evidence", "plan-1")  # fmt: skip
    assert code == 0, got
    code, st = lab.json("run", "status", lab.plan_id)
    assert "agent_summoned" in [e["kind"] for e in st["recent_events"]]
    assert st["roles"] == got["roles"]  # a summon does not rewrite the mapping


def test_fanout_from_an_items_file(lab: Lab) -> None:
    items = lab.lab.root / "two.json"
    items.write_text(json.dumps([{"role": "qa", "brief": "Test ideas"},
                                 {"role": "researcher", "brief": "Prior art"}]))  # fmt: skip
    code, got = lab.json("run", "fanout", lab.plan_id, "--items", str(items))
    assert code == 0, got
    assert any(a["kind"] == "fanout" for a in got["artifacts"]), got


def test_capture_runs_a_check_of_the_trusted_plan(lab: Lab) -> None:
    proc = lab.oms("run", "capture", lab.plan_id, "unit")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^captured: check unit passed on [0-9a-f]{12} \(default_branch\), "
                     r"runtime evidence log-\d+$", proc.stdout, re.M), proc.stdout  # fmt: skip
    proc = lab.oms("run", "capture", lab.plan_id, "nosuchcheck")
    assert proc.returncode == 2 and "nosuchcheck" in proc.stderr, proc.stderr


def test_reconcile_pauses_at_its_manifest_and_takes_no_approve_without_a_terminal(
    lab: Lab,
) -> None:
    proc = lab.oms("run", "reconcile", lab.plan_id, "--role", "orchestrator")
    assert proc.returncode == 0, proc.stderr
    assert "awaiting_approval" in proc.stdout.splitlines()[0]
    assert f"parent run: {lab.plan_id}" in proc.stdout
    assert "gate: transfer for orchestrator:" in proc.stdout
    proc = lab.oms("run", "reconcile", lab.plan_id, "--approve")
    assert proc.returncode == 3 and "controlling terminal" in proc.stderr, proc.stderr
