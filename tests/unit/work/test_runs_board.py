"""The board (gatekeeper/work/runs/board.py): the loop heuristic and contract draft (pure),
role assignments and their refusals (a real `oms init`ed repository, the real evidence
store), the roles view, and the board of a real plan run (scripted roles under bwrap)."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from pathlib import Path

import pytest
from support.runs import NEEDS, policy, run_lab
from support.secrets import fake_aws_key

from evidence import EvidenceStore, state_root
from gatekeeper.errors import UsageError
from gatekeeper.integrations import oms_command
from gatekeeper.repo.git import open_repo
from gatekeeper.work.runs import api, board, mapping
from gatekeeper.work.runs.store import NewArtifact
from policy import LoadedPolicy, Policy


def _entries(repo: Path, kind: str) -> list[dict[str, object]]:
    r = open_repo(repo)
    store = EvidenceStore.open(state_root(), r.repo_id, common_dir=r.common_dir)
    return [dict(e.data) for e in store.entries() if e.kind == kind]


def _path(repo: Path) -> Path:
    return mapping.assignments_path(open_repo(repo).repo_id)


# -- the heuristic (pure) ----------------------------------------------------------------------


@pytest.mark.parametrize(("goal", "recipe"), [
    ("Fix the off-by-one in the pager", "implement-verify"),
    ("Add a --quiet flag", "implement-verify"),
    ("Refactor the storage layer and migrate every caller", "plan-implement-verify"),
    ("Review the error handling in the CLI", "review"),
    ("Investigate why the cache misses on rename", "research"),
    ("Design a roadmap for the plugin system", "plan-only"),
    ("zxqv", "plan-only"),
])  # fmt: skip
def test_the_goal_s_words_pick_the_recipe(goal: str, recipe: str) -> None:
    got, confidence, _ = board.classify(goal)
    assert got == recipe
    assert 0 <= confidence <= 1
    assert board.classify(goal) == (got, confidence, board.classify(goal)[2])  # deterministic


def test_a_goal_without_cue_words_is_a_plan_with_low_confidence() -> None:
    recipe, confidence, _ = board.classify("zxqv qwerty")
    assert (recipe, confidence) == ("plan-only", 0.35)
    _, sure, _ = board.classify("Fix the pager")
    assert sure > confidence


def _loaded(**over: object) -> LoadedPolicy:
    doc = {"version": 1, "checks": [{"name": "unit", "cmd": ["true"]}],
           "protected": {"paths": ["secrets/"]}, "work": {"max_attempts": 4}, **over}  # fmt: skip
    return LoadedPolicy(Policy.model_validate(doc), "test", "sha256:" + "0" * 64)


def test_the_contract_trusts_only_policy_checks_and_always_forbids_protected_paths() -> None:
    given = {"acceptance_criteria": [], "validation_commands": ["rm -rf /"],
             "allowed_paths": ["src/"], "forbidden_changes": ["no new deps"]}  # fmt: skip
    doc = board.contract(_loaded(), "Fix it", given, None)
    assert doc["validation_commands"]["trusted"] == ["unit"]
    assert doc["validation_commands"]["proposed_not_trusted"] == ["rm -rf /"]
    assert doc["forbidden_changes"][:2] == ["no new deps", "protected path secrets/"]
    assert "built-in protected paths" in doc["forbidden_changes"][2]
    assert doc["max_iterations"] == 4  # [work] max_attempts
    assert any("'unit' passes" in c for c in doc["acceptance_criteria"])
    assert board.contract(_loaded(), "x", given, 2)["max_iterations"] == 2


def test_run_action_names_the_tool_that_starts_the_recipe() -> None:
    stack = {"implementer": "impl"}
    small = board.run_action("implement-verify", "g", ["c"], stack, 3)
    assert small == {"tool": "oms_orchestrate", "arguments": {
        "goal": "g", "mode": "implement", "constraints": ["c"], "role_mapping": stack,
        "auto_loop": True, "max_cycles": 3}}  # fmt: skip
    big = board.run_action("plan-implement-verify", "g", [], stack, 3)
    assert "auto_loop" not in big["arguments"]  # the plan gate waits for a human
    assert board.run_action("plan-only", "g", [], {"planner": "p"}, 3) == {
        "tool": "oms_plan",
        "arguments": {"goal": "g", "constraints": [], "orchestrator": "p"},
    }


# -- recommend_loop and pro_access on a repository -----------------------------------------------


def test_recommend_loop_falls_back_to_a_plan_when_policy_has_no_implementer(
    tmp_path: Path, oms_env: dict[str, str]
) -> None:
    lab = run_lab(tmp_path, oms_env, implementer=False)
    out, code = board.recommend_loop(lab.repo, "Fix the pager", validation_commands=["make x"])
    assert code == 0
    assert out["recipe"] == "plan-only" and out["confidence"] <= 0.3
    assert "lacks" in out["reason"]
    assert out["runAction"]["tool"] == "oms_plan"
    assert out["recommended_stack"] == {"planner": "planner"}
    assert out["completion_contract"]["validation_commands"]["trusted"] == ["unit"]
    assert out["artifact"]["surface"] == "loop_plan"
    assert {"field": "check", "value": "unit"} in out["artifact"]["snapshot"]["rows"]
    lab.set_policy(policy())
    out, _ = board.recommend_loop(lab.repo, "Fix the pager")
    assert out["recipe"] == "implement-verify"
    assert out["runAction"]["arguments"]["role_mapping"]["implementer"] == "implementer"
    assert not os.path.exists(_path(lab.repo))  # no side effect


@pytest.mark.parametrize(("kw", "message"), [
    ({"goal": ""}, "goal is empty"),
    ({"goal": "x", "max_iterations": 0}, "max_iterations is 1 to 20"),
    ({"goal": "x", "allowed_paths": ["a"] * 21}, "at most 20 allowed paths"),
    ({"goal": "x", "validation_commands": [""]}, "validation commands is empty"),
])  # fmt: skip
def test_recommend_loop_refuses_bad_input(
    tmp_path: Path, oms_env: dict[str, str], kw: dict[str, object], message: str
) -> None:
    lab = run_lab(tmp_path, oms_env)
    with pytest.raises(UsageError, match=message):
        board.recommend_loop(lab.repo, **kw)  # type: ignore[arg-type]


def test_pro_access_withholds_a_prompt_whose_goal_holds_a_secret(
    tmp_path: Path, oms_env: dict[str, str]
) -> None:
    lab = run_lab(tmp_path, oms_env, autopilot=("critic",))
    key = fake_aws_key()
    out, _ = board.pro_access(lab.repo, f"use {key} to deploy", ["be brief"])
    [_, prompt, _] = out["paths"]
    assert prompt["prompt"] is None and prompt["secret_found"] is True
    assert prompt["findings"][0]["item"] == "<goal>"
    assert key not in json.dumps(out)
    out, _ = board.pro_access(lab.repo, "Sketch a retry policy", ["be brief"])
    [connector, prompt, transfer] = out["paths"]
    assert "Goal: Sketch a retry policy" in prompt["prompt"] and "- be brief" in prompt["prompt"]
    assert out["approval_policy"]["transfer_autopilot"] == ["auto-critic"]
    init = connector["commands"][0]
    assert init.startswith("tunnel-client init --sample sample_mcp_stdio_local --profile "
                           "oms-local --tunnel-id '<tunnel-id>' --mcp-command ")  # fmt: skip
    assert f"mcp --repo {lab.repo.resolve()}" in init
    assert transfer["first"]["tool"] == "oms_model_access"
    assert out["calls_made"] == 0 and out["context_sent"] == "none"
    # A scanner that cannot be trusted never means "no secret": the prompt is withheld.
    lab.set_policy(policy(extra=f'[scanners]\ngitleaks_sha256 = "{"0" * 64}"\n'))
    out, _ = board.pro_access(lab.repo, "Sketch a retry policy")
    [connector, prompt, _] = out["paths"]
    assert prompt["prompt"] is None and "scanners cannot run" in prompt["note"]
    assert connector["commands"]


# -- assignments ----------------------------------------------------------------------------------


def test_assigning_persists_merges_records_evidence_and_steers_new_runs(
    tmp_path: Path, oms_env: dict[str, str]
) -> None:
    lab = run_lab(tmp_path, oms_env)
    out, code = board.assign_roles(lab.repo, {"critic": "command:qa:scripted"})
    assert code == 0 and out["assigned"] == {"critic": "qa"}
    out, _ = board.assign_roles(lab.repo, {"planner": "researcher"})
    assert out["roles"] == {"critic": "qa", "planner": "researcher"}  # merged
    path = _path(lab.repo)
    assert json.loads(path.read_text()) == {"version": 1, "roles": out["roles"]}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [e["roles"] for e in _entries(lab.repo, "work.roles.assign")] == [
        {"critic": "qa"}, {"planner": "researcher"}]  # fmt: skip
    view, _ = board.roles_view(lab.repo)
    rows = {r["run_role"]: r for r in view["run_roles"]}
    assert (rows["critic"]["policy_role"], rows["critic"]["source"]) == ("qa", "assigned")
    assert rows["qa"]["source"] == "policy" and rows["qa"]["eligible"] is True
    assert rows["implementer"]["authority"]["edit"] is True
    assert rows["critic"]["authority"]["network"] == "none"
    assert "grants nothing" in view["authority_note"]


@pytest.mark.parametrize(("given", "message"), [
    ({}, "at least one run role"),
    ({"boss": "qa"}, "not a run role: 'boss'"),
    ({"critic": "nobody"}, "is no role of the policy"),
    ({"critic": "codex-cli:gpt-5"}, "is no role of the policy"),
    ({"critic": ""}, "is empty"),
])  # fmt: skip
def test_a_refused_assignment_writes_and_records_nothing(
    tmp_path: Path, oms_env: dict[str, str], given: dict[str, str], message: str
) -> None:
    lab = run_lab(tmp_path, oms_env)
    with pytest.raises(UsageError, match=message):
        board.assign_roles(lab.repo, {**given})
    assert not os.path.lexists(_path(lab.repo))
    assert _entries(lab.repo, "work.roles.assign") == []


def test_a_symlink_at_the_assignment_path_is_refused_and_left_alone(
    tmp_path: Path, oms_env: dict[str, str]
) -> None:
    lab = run_lab(tmp_path, oms_env)
    target = tmp_path / "elsewhere.json"
    target.write_text("keep me")
    path = _path(lab.repo)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    with pytest.raises(UsageError, match="symlink"):
        board.assign_roles(lab.repo, {"critic": "qa"})
    assert path.is_symlink() and os.readlink(path) == str(target)
    assert target.read_text() == "keep me"
    assert _entries(lab.repo, "work.roles.assign") == []


# -- the board of a run ---------------------------------------------------------------------------


@pytest.mark.skipif(not NEEDS, reason="needs /usr/bin/bwrap and /usr/bin/python3")
def test_the_board_of_a_run_shows_who_acted_the_open_gate_and_next_actions(
    tmp_path: Path, oms_env: dict[str, str]
) -> None:
    lab = run_lab(tmp_path, oms_env, external=("critic",))
    done, _ = api.plan(lab.repo, "Add a feature flag")
    out, code = board.agent_board(lab.repo, done["run_id"], include_artifact=True)
    assert code == 0 and out["scope"] == "run" and out["status"] == "completed"
    cards = {c["id"]: c for c in out["cards"]}
    assert cards["planner"]["state"] == "acted"
    assert cards["planner"]["artifact_refs"] == ["plan-1"]
    assert cards["critic"]["state"] == "idle"
    assert [a["action"] for a in out["next_actions"]] == ["inspect_final_report", "reconcile"]
    rows = {r["id"]: r for r in out["artifact"]["snapshot"]["rows"]}
    assert rows["planner"]["state"] == "acted"
    gated, _ = api.consult(lab.repo, "Critique it", "critic")
    out, _ = board.agent_board(lab.repo, gated["run_id"])
    cards = {c["id"]: c for c in out["cards"]}
    assert cards["critic"]["state"] == "blocked"
    assert cards["critic"]["blocking"]["gate"] == "transfer"
    assert cards["critic"]["external"] is True
    assert out["next_actions"][0]["action"] == "approve_transfer"
    repo_board, _ = board.agent_board(lab.repo)
    assert repo_board["scope"] == "repository" and "artifact" not in repo_board
    with pytest.raises(UsageError):
        board.agent_board(lab.repo, "not-a-run")


def test_the_board_reads_fanout_items_and_a_summon_s_side_gate_per_role(
    tmp_path: Path, oms_env: dict[str, str]
) -> None:
    """The guests' records as they write them: ONE `fanout` artifact (no role) whose items
    name run roles, and a summon's `approval_requested` side-gate event."""
    lab = run_lab(tmp_path, oms_env)
    with api.opened_runs(lab.repo) as (work, runs):  # a run made, not advanced: no provider
        roles_map = mapping.run_mapping(work.loaded, work.repo.repo_id)
        made = runs.create("plan", "plan", "Add a feature flag", (), roles_map, step="start")
    doc = {"v": 1, "status": "partial", "sidecar_only": True, "items": [
        {"role": "qa", "kind": "qa", "status": "completed"},
        {"role": "critic", "kind": "critique", "status": "failed"}]}  # fmt: skip
    with api.opened_runs(lab.repo) as (_, runs):
        run = runs.get(made.id)
        fan = NewArtifact(kind="fanout", data=json.dumps(doc).encode(), summary="fan-out of 2",
                          media_type="application/json")  # fmt: skip
        asked = ("approval_requested", {"gate": "transfer", "side": "summon", "role": "researcher"})
        runs.step(run, artifacts=[fan], events=[("fanout_recorded", {"status": "partial"}), asked])
    out, _ = board.agent_board(lab.repo, made.id)
    cards = {c["id"]: c for c in out["cards"]}
    assert cards["qa"]["sidecar"] == [{"ref": "fanout-1", "status": "completed", "kind": "qa"}]
    assert cards["critic"]["sidecar"][0]["status"] == "failed"
    assert cards["planner"]["sidecar"] == [] and cards["planner"]["state"] == "idle"
    assert cards["researcher"]["state"] == "waiting"
    assert cards["researcher"]["blocking"]["gate"] == "transfer"
    assert out["sidecar"]["fanout_ref"] == "fanout-1" and "advisory" in out["sidecar"]["note"]
    with api.opened_runs(lab.repo) as (_, runs):
        summoned = ("agent_summoned", {"role": "researcher", "status": "completed"})
        runs.step(runs.get(made.id), events=[summoned])
    cards = {c["id"]: c for c in board.agent_board(lab.repo, made.id)[0]["cards"]}
    assert cards["researcher"]["state"] == "acted"
    assert cards["researcher"]["acted"] == ["agent_summoned"]


@pytest.mark.parametrize("under_home", [True, False])
def test_the_tunnel_command_works_as_copied_with_no_home_path_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, under_home: bool
) -> None:
    top = tmp_path / "my repo's $dir"
    home = tmp_path if under_home else tmp_path / "elsewhere"
    monkeypatch.setenv("HOME", str(home))
    init = board.tunnel_commands(top)[0]
    assert str(home) not in init and ("$HOME" in init) is under_home
    # What the shell hands tunnel-client: the command that serves exactly this repository.
    shown = init.replace("tunnel-client", "printf '%s\\n'", 1)
    got = subprocess.run(["/bin/sh", "-c", shown], capture_output=True, text=True, check=True,
                         env={"HOME": str(home), "PATH": "/usr/bin:/bin"}).stdout  # fmt: skip
    words = got.splitlines()
    assert words[:-1] == ["init", "--sample", "sample_mcp_stdio_local", "--profile",
                          "oms-local", "--tunnel-id", "<tunnel-id>", "--mcp-command"]  # fmt: skip
    assert shlex.split(words[-1]) == [*oms_command(), "mcp", "--repo", str(top)]
