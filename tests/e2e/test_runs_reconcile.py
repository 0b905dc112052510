"""Reconcile end to end: a completed run's progress packet, its transfer gate, and the
planner's schema-bound answer, with scripted `command:` roles under the real `oms agent
run` (bwrap) and the real transfer gate.

The planner here answers JSON when it is asked to reconcile: it names what it was given
(the progress packet's refs, the schema file) so a test sees what reached it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.pty import approve_copied
from support.runs import NEEDS, PY, ROLE, RunLab, _s, module_env, policy, run_lab

from gatekeeper.digest import Sha256Digest
from gatekeeper.errors import UsageError
from gatekeeper.gates.transfer.state import locate
from gatekeeper.work.runs import api, reconcile
from gatekeeper.work.runs.api import opened_runs

pytestmark = pytest.mark.skipif(not NEEDS, reason="needs /usr/bin/bwrap and /usr/bin/python3")

PLANNER = r"""
import json, os, re, sys
doc = json.loads(sys.stdin.buffer.read())
if doc.get("kind") != "reconcile":
    print("# planner answer (%s)\n\ngoal: %s" % (doc.get("kind"), doc.get("goal")))
    sys.exit(0)
schema = json.load(open(os.environ["OMS_SCHEMA_FILE"]))
seen = sorted(set(re.findall(r"\b(?:plan|report)-[0-9]+", doc["brief"])))
print(json.dumps({"status": "partial", "remaining": ["wire the flag"],
                  "next": ["write a test"],
                  "markdown": "saw %s; schema requires %s" % (
                      json.dumps(seen), ",".join(schema["required"]))}))
"""
OTHERS = ("orchestrator", "researcher", "qa", "verifier", "critic")


def _policy(*, external: bool = False, autopilot: tuple[str, ...] = ()) -> str:
    planner = ROLE.format(name="planner", provider="planner", authority="read-only", timeout=60)
    planner += f'[providers.planner]\ncmd = [{_s(PY)}, "-c", {_s(PLANNER)}]\n'
    if external:
        planner += "external = true\n"
    return policy(roles=OTHERS, modes={"orchestrator": "garbage"}, autopilot=autopilot,
                  extra=planner)  # fmt: skip


def _env_lab(root: Path, mp: pytest.MonkeyPatch, text: str) -> RunLab:
    env = module_env(root, mp)
    got = run_lab(root, env)
    got.set_policy(text)
    return got


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunLab, str]]:
    with pytest.MonkeyPatch.context() as mp:
        got = _env_lab(tmp_path_factory.mktemp("reconcile"), mp, _policy())
        done, code = api.plan(got.repo, "Add a feature flag")
        assert code == 0 and done["status"] == "completed", done
        yield got, done["run_id"]


def _events(repo: Path, run_id: str) -> list[str]:
    with opened_runs(repo) as (_, runs):
        return [e.kind for e in runs.events(run_id)]


def test_reconcile_asks_the_planner_and_records_its_schema_bound_answer(
    lab: tuple[RunLab, str],
) -> None:
    got, parent = lab
    with opened_runs(got.repo) as (_, runs):
        before = runs.get(parent)
    out, code = reconcile.reconcile(got.repo, parent)
    assert code == 0, out
    assert out["kind"] == "reconcile" and out["status"] == "completed", out
    assert out["parent_run"] == parent and out["progress_ref"] == "progress-1"
    r = out["reconciliation"]
    assert (r["status"], r["remaining"], r["next"]) == ("partial", ["wire the flag"],
                                                        ["write a test"])  # fmt: skip
    # It saw the progress packet (the parent's plan-1) and the schema as $OMS_SCHEMA_FILE.
    assert "plan-1" in r["markdown"]
    assert "schema requires status,remaining,next,markdown" in r["markdown"]
    progress, _ = api.read_artifact(got.repo, out["run_id"], "progress-1")
    assert f"# Progress of run {parent}" in progress["text"]
    assert "- plan-1 (plan," in progress["text"] and "objective: Add a feature flag" in (
        progress["text"])  # fmt: skip
    rec, _ = api.read_artifact(got.repo, out["run_id"], r["ref"])
    assert rec["media_type"] == "application/json"
    assert json.loads(rec["text"])["remaining"] == ["wire the flag"]
    assert "reconcile" not in [a["action"] for a in out["next_actions"]]
    with opened_runs(got.repo) as (_, runs):
        assert runs.get(parent) == before  # the parent is read, never changed
        assert runs.get(out["run_id"]).parent == parent


def test_a_malformed_reconciliation_fails_the_run_and_keeps_the_raw_answer(
    lab: tuple[RunLab, str],
) -> None:
    got, parent = lab
    out, code = reconcile.reconcile(got.repo, parent, role="orchestrator")
    assert code == 1, out
    assert out["status"] == "failed"
    assert out["stop_reason"] == "orchestrator: malformed reconciliation: the answer is not JSON"
    [log] = [a for a in out["artifacts"] if a["kind"] == "log"]
    raw, _ = api.read_artifact(got.repo, out["run_id"], log["ref"])
    assert raw["text"].strip() == "not json at all"
    assert "reconciliation" not in out
    assert sorted(a["kind"] for a in out["artifacts"]) == ["log", "progress"]


def test_the_parser_holds_the_answer_to_its_schema() -> None:
    ok: dict[str, Any] = {"status": "done", "remaining": [], "next": [], "markdown": ""}
    assert reconcile.parsed(json.dumps(ok)) == ok
    assert reconcile.parsed("```json\n" + json.dumps(ok) + "\n```") == ok
    bad = [{**ok, "status": "finished"}, {**ok, "extra": 1}, {**ok, "remaining": "x"},
           {**ok, "next": [1]}, {k: v for k, v in ok.items() if k != "markdown"}, [ok]]  # fmt: skip
    for doc in bad:
        with pytest.raises(reconcile.Malformed):
            reconcile.parsed(json.dumps(doc))


def test_reconcile_refuses_what_it_cannot_reconcile(lab: tuple[RunLab, str]) -> None:
    got, parent = lab
    with opened_runs(got.repo) as (_, runs):
        fresh = runs.create("plan", "plan", "not done yet", (), {}, step="start").id
        itself = runs.create("reconcile", "research", "a reconcile", (), {}, step="reconcile",
                             parent=fresh).id  # fmt: skip
    cases: list[tuple[dict[str, Any], str]] = [
        ({"run_id": fresh}, "is created; only a completed run is reconciled"),
        ({"run_id": parent, "role": "qa"}, "the planner or the orchestrator"),
        ({"run_id": parent, "approval": "yes"}, "approval is one of"),
        ({"run_id": parent, "approval": "approve"}, "has no open reconcile run to approve"),
        ({"run_id": "r-nothex"}, "not a run id"),
        ({"run_id": itself}, "is itself a reconcile run; reconcile its parent"),
    ]
    for args, message in cases:
        with pytest.raises(UsageError, match=message):
            reconcile.reconcile(got.repo, **args)
    with opened_runs(got.repo) as (_, runs):
        assert runs.get(itself).version == 1  # nothing was created or advanced
    with opened_runs(got.repo) as (work, _):
        assert reconcile.open_reconcile(work, parent) is None


def test_reconcile_pauses_at_its_manifest_then_a_human_or_autopilot_lets_it_leave(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    got = _env_lab(tmp_path, monkeypatch, _policy(external=True))
    done, code = api.consult(got.repo, "Check the flag", "qa")
    assert code == 0 and done["status"] == "completed", done
    out, code = reconcile.reconcile(got.repo, done["run_id"])
    assert code == 0, out
    assert out["status"] == "awaiting_approval" and out["gate"]["kind"] == "transfer"
    assert out["progress_ref"] == "progress-1" and out["responses"] == []
    assert out["next_actions"][0]["action"] == "approve_transfer"
    # The progress packet is what the manifest says leaves (and what its scan saw).
    at = locate(got.repo, Sha256Digest.parse(out["gate"]["transfer"]))
    assert f"# Progress of run {done['run_id']}" in at.manifest.purpose
    assert "report-1 (report," in at.manifest.purpose
    assert "provider_invoked" not in _events(got.repo, out["run_id"])

    # The same call finds the same open reconcile run and waits, changing nothing.
    again, _ = reconcile.reconcile(got.repo, done["run_id"])
    assert again["run_id"] == out["run_id"] and again["version"] == out["version"]

    rc, said = approve_copied(env=got.env, cwd=got.repo, argv=out["next_actions"][0]["argv"])
    assert rc == 0, said
    last, code = reconcile.reconcile(got.repo, done["run_id"])
    assert code == 0, last
    assert last["run_id"] == out["run_id"] and last["status"] == "completed", last
    assert last["reconciliation"]["status"] == "partial"
    assert "report-1" in last["reconciliation"]["markdown"]
    assert sorted(a["kind"] for a in last["artifacts"]) == ["progress", "reconciliation"]

    # With an autopilot rule for the planner, a new reconcile (the last one is done) runs
    # at once: the policy approved its manifest, recorded as such.
    got.set_policy(_policy(external=True, autopilot=("planner",)))
    auto, code = reconcile.reconcile(got.repo, done["run_id"])
    assert code == 0, auto
    assert auto["run_id"] != out["run_id"] and auto["status"] == "completed", auto
    assert auto["reconciliation"]["remaining"] == ["wire the flag"]
    assert "approval_auto_approved" in _events(got.repo, auto["run_id"])
