"""Capture end to end: a named check of the trusted plan, in the real sandbox (bwrap), on a
run's workspace, attached as runtime-captured validation evidence."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.repos import commit_on, git
from support.runs import NEEDS, PY, TEST_MOD, UNIT, RunLab, _s, module_env, policy, run_lab
from support.work import new_ticket, nonce

from gatekeeper.errors import UsageError
from gatekeeper.work.runs import api, capture, guests
from gatekeeper.work.runs.api import opened_runs

pytestmark = pytest.mark.skipif(not NEEDS, reason="needs /usr/bin/bwrap and /usr/bin/python3")

# Fails, and says whether the host's state root is visible inside (it must not be).
PROBE = "import os, sys; print('state root visible:', os.path.exists(sys.argv[1])); sys.exit(1)"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunLab, str]]:
    root = tmp_path_factory.mktemp("capture")
    with pytest.MonkeyPatch.context() as mp:
        env = module_env(root, mp)
        extra = (f'[[checks]]\nname = "probe"\ncmd = [{_s(PY)}, "-c", {_s(PROBE)}, '
                 f'{_s(env["OMS_HOME"])}]\ntimeout_s = 60\n')  # fmt: skip
        got = run_lab(root, env, extra=extra)
        done, code = api.plan(got.repo, "Add a feature flag")
        assert code == 0 and done["status"] == "completed", done
        yield got, done["run_id"]


def _events(repo: Path, run_id: str) -> list[tuple[str, dict[str, object]]]:
    with opened_runs(repo) as (_, runs):
        return [(e.kind, e.data) for e in runs.events(run_id)]


def test_a_passing_check_is_attached_as_runtime_captured_evidence(
    lab: tuple[RunLab, str],
) -> None:
    got, run_id = lab
    with opened_runs(got.repo) as (_, runs):
        before = runs.get(run_id)
    out, code = capture.capture(got.repo, run_id, "unit")
    assert code == 0, out
    c = out["captured"]
    main = git(got.repo, "rev-parse", "main", env=got.env).strip()
    assert (c["check"], c["commit"], c["workspace"]) == ("unit", main, "default_branch")
    assert c["passed"] is True and c["exit_code"] == 0 and c["timed_out"] is False
    text, _ = api.read_artifact(got.repo, run_id, c["ref"])
    doc = json.loads(text["text"])
    assert doc["evidence"] == "runtime-captured" and doc["check"] == "unit"
    assert "OK" in doc["stderr_tail"]  # unittest's own report, from inside the sandbox
    kind, data = _events(got.repo, run_id)[-1]
    assert kind == "evidence_captured"
    assert (data["check"], data["commit"], data["passed"]) == ("unit", main, True)
    with opened_runs(got.repo) as (_, runs):
        after = runs.get(run_id)
    assert (after.state, after.step, after.gate) == (before.state, before.step, before.gate)


def test_a_failing_check_is_captured_as_failed_and_ran_in_the_sandbox(
    lab: tuple[RunLab, str],
) -> None:
    got, run_id = lab
    out, code = capture.capture(got.repo, run_id, "probe")
    assert code == 1, out
    c = out["captured"]
    assert c["passed"] is False and c["exit_code"] == 1
    assert "state root visible: False" in c["stdout_tail"]
    kind, data = _events(got.repo, run_id)[-1]
    assert kind == "evidence_captured" and data["passed"] is False
    [art] = [a for a in out["artifacts"] if a["ref"] == c["ref"]]
    assert "runtime-captured: check probe failed (exit 1)" in art["summary"]


def test_an_unknown_check_is_refused_naming_the_known_ones(lab: tuple[RunLab, str]) -> None:
    got, run_id = lab
    n = len(_events(got.repo, run_id))
    with pytest.raises(UsageError, match=r"no check 'lint' \(checks: unit, probe\)"):
        capture.capture(got.repo, run_id, "lint")
    assert len(_events(got.repo, run_id)) == n


def test_a_qa_agents_summon_is_never_captured_evidence(lab: tuple[RunLab, str]) -> None:
    got, run_id = lab
    before = [k for k, _ in _events(got.repo, run_id)].count("evidence_captured")
    out, code = guests.summon(got.repo, run_id, "qa", "Did the unit check pass?")
    assert code == 0 and out["summon_status"] == "completed", out
    kinds = [k for k, _ in _events(got.repo, run_id)]
    assert kinds.count("evidence_captured") == before
    assert kinds[-1] == "agent_summoned"


BROKEN_TEST = TEST_MOD.replace("self.assertTrue(True)", "self.assertTrue(False)")


def test_an_implement_run_captures_on_its_candidate_with_the_trusted_plan(
    lab: tuple[RunLab, str],
) -> None:
    got, _ = lab
    # The candidate breaks the test and rewrites the plan so that "unit" would pass: the
    # trusted plan (main's) is what runs, so the capture fails.
    unit = "cmd = [" + ", ".join(_s(w) for w in UNIT) + "]"
    theirs = policy().replace(unit, 'cmd = ["/bin/true"]') + '[[checks]]\nname = "unit2"\n'
    theirs += 'cmd = ["/bin/true"]\n'
    assert unit in policy() and unit not in theirs
    candidate = commit_on(got.repo, "cand", {"test_mod.py": BROKEN_TEST, "oms.toml": theirs},
                          env=got.env, index=got.root / "index-cand")  # fmt: skip
    with opened_runs(got.repo) as (work, runs):
        walk = new_ticket(work).leased().running().ran(candidate)
        assert walk.lease is not None and walk.dispatch is not None
        work.file_receipt(walk.dispatch, walk.lease.token, nonce(), candidate)
        run = runs.create("orchestrate", "implement", "x", (), {}, step="start")
        run = runs.step(run, ticket=walk.id).run
    out, code = capture.capture(got.repo, run.id, "unit")
    assert code == 1, out
    c = out["captured"]
    assert (c["commit"], c["workspace"], c["passed"]) == (candidate, "candidate", False)
    assert "FAILED" in c["stderr_tail"]
    with pytest.raises(UsageError, match="no check 'unit2'"):  # the candidate's own check
        capture.capture(got.repo, run.id, "unit2")
