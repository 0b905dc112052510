"""READY means the agent did not weaken what verified it: end to end, through the real CLI.

One module-scoped world: a private `$OMS_HOME`, HOME and toolchain dir, a real repository
whose `main` holds `oms.toml` (a pytest suite with a trusted toolchain built from a real
hash-pinned lockfile, a unittest suite through oms' reporter, a `node --test` suite), and
one `oms toolchain prepare` (PyPI through pip, outside the sandbox: the only contact).
Every candidate starts from `main` with `calc.add` broken (or not, for the legitimate
rows) and weakens the tests one way. Each weakening row is first shown live: the
candidate's own plan, run in the sandbox exactly as the base's checks would run it (the
gate's stages without the tests stage), passes; then the real gate says FAILED (or
BLOCKED for changes that run later), naming the class and the place.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.env import clean_env
from support.oms import parse_single_json, run_oms
from support.pty import oms_at_pty
from support.repos import commit_on, git, make_repo
from support.toolchains import python_lock

import gatekeeper.gates.result.stages as stages
from gatekeeper.gates.result import pipeline
from gatekeeper.gates.result.verdict import Decision

READY, FAILED, BLOCKED = "READY_FOR_HUMAN", "FAILED", "BLOCKED"
PY = "/usr/bin/python3"

POLICY = """version = 1

[[toolchains]]
name = "py"
kind = "python-venv"
lock = "requirements.lock"
python = "/usr/bin/python3"

[[checks]]
name = "tests"
cmd = ["python", "-m", "pytest", "-p", "no:cacheprovider", "tests"]
toolchain = "py"
timeout_s = 300
report = "pytest"

[[checks]]
name = "unit"
cmd = ["/usr/bin/python3", "-m", "unittest", "discover", "-s", "ut", "-t", "."]
timeout_s = 120
report = "unittest"

[[checks]]
name = "node"
cmd = ["/usr/bin/node", "--test", "test/"]
timeout_s = 120
report = "node-test"

[verify]
trusted_tests = ["tests/**", "ut/**", "test/**"]
"""
# pytest tests add and mul, unittest tests sub and neg, node tests calc.js: each row breaks
# only what the suite it weakens tests, so that the other suites stay green.
CALC = (
    "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n\n\n"
    "def sub(a, b):\n    return a - b\n\n\ndef neg(a):\n    return -a\n"
)
BROKEN = CALC.replace("return a + b", "return a - b")  # add broken
BROKEN_SUB = CALC.replace("return a - b", "return a + b")
CALC_JS = "exports.add = (a, b) => a + b;\n"
BROKEN_JS = "exports.add = (a, b) => a - b;\n"
PYPROJECT = """[project]
name = "calc"
version = "0.1.0"

[tool.pytest.ini_options]
addopts = "-q"

[tool.coverage.report]
fail_under = 90
"""
PYTESTS = """import calc


def test_add():
    assert calc.add(2, 3) == 5


def test_mul():
    assert calc.mul(2, 3) == 6
"""
UTESTS = """import unittest

import calc


class TestCalc(unittest.TestCase):
    def test_sub(self):
        self.assertEqual(calc.sub(5, 3), 2)

    def test_neg(self):
        self.assertEqual(calc.neg(2), -2)
"""
JSTESTS = """const test = require('node:test');
const assert = require('node:assert');
const { add } = require('../calc.js');

test('adds', () => {
  assert.strictEqual(add(2, 3), 5);
});

test('adds zero', () => {
  assert.strictEqual(add(2, 0), 2);
});
"""
BASE_FILES = {
    "oms.toml": POLICY, "requirements.lock": python_lock(), "pyproject.toml": PYPROJECT,
    "calc.py": CALC, "calc.js": CALC_JS, "tests/test_calc.py": PYTESTS,
    "ut/__init__.py": "", "ut/test_calc_ut.py": UTESTS, "test/calc.test.js": JSTESTS,
}  # fmt: skip


@dataclass
class World:
    root: Path
    repo: Path
    env: dict[str, str]
    _n: int = 0
    outputs: list[str] = field(default_factory=list)

    def commit(self, branch: str, files: dict[str | bytes, Any], parent: str = "main") -> str:
        self._n += 1
        return commit_on(self.repo, branch, files, env=self.env, parent=parent,
                         index=self.root / f"index-{self._n}")  # fmt: skip

    def json(self, *args: str) -> tuple[int, dict[str, Any]]:
        proc = run_oms([*args, "--json"], env=self.env, cwd=self.root, timeout=900)
        self.outputs.append(proc.stderr)  # oms' own words (stdout holds the checks' tails)
        return proc.returncode, parse_single_json(proc)

    def gate(self, candidate: str) -> tuple[int, dict[str, Any]]:
        return self.json("process-result", "--repo", str(self.repo), "--candidate", candidate)

    def entries(self, kind: str) -> list[dict[str, Any]]:
        (log,) = Path(self.env["OMS_HOME"]).glob("repos/*/evidence/log.jsonl")
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        return [e for e in lines if e["kind"] == kind]


def make_world(root: Path, files: dict[str, str]) -> World:
    home = root / "home"
    home.mkdir(parents=True)
    env = clean_env(home, root / "oms-state")
    env.update(OMS_TOOLCHAIN_DIR=str(root.parent / "toolchains"),
               PIP_CACHE_DIR=str(root.parent / "pip-cache"),
               XDG_CACHE_HOME=str(home / ".cache"))  # fmt: skip
    repo = make_repo(root / "repo", files, env=env)
    world = World(root, repo, env)
    code, out = world.json("init", "--repo", str(repo))
    assert code == 0, out
    return world


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    w = make_world(tmp_path_factory.mktemp("integrity") / "w", BASE_FILES)
    code, out = w.json("toolchain", "prepare", "--repo", str(w.repo))
    assert code == 0, out
    yield w


def _without_tests_stage(world: World, candidate: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The gate as it was before it compared tests: the same stages, the plan's exit codes
    alone decide. Run in-process in this world's environment."""

    class ExitCodes:
        def run(self, s: stages.GateState) -> Decision | None:
            return Decision.FAILED if s.reasons else Decision.READY

    class NoRunsLater:
        def run(self, s: stages.GateState) -> Decision | None:
            return None

    old = tuple(
        ExitCodes() if isinstance(st, stages.Tests)
        else NoRunsLater() if isinstance(st, stages.RunsLaterStage) else st
        for st in stages.STAGES
    )  # fmt: skip
    for key, value in world.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(stages, "STAGES", old)
    monkeypatch.setattr(pipeline, "STAGES", old)
    verdict = pipeline.process_result(world.repo, candidate)
    return verdict.decision.value


def _reasons(out: dict[str, Any]) -> str:
    return "\n".join(out["reasons"])


SKIP_PY = PYTESTS.replace("def test_add", "import pytest\n\n\n@pytest.mark.skip\ndef test_add")
XFAIL_PY = PYTESTS.replace("def test_add", "import pytest\n\n\n@pytest.mark.xfail\ndef test_add")
SKIP_INSIDE = PYTESTS.replace(
    "def test_add():\n", "def test_add():\n    import pytest\n    pytest.skip('flaky')\n"
)
SKIP_UT = UTESTS.replace("    def test_sub", "    @unittest.skip('flaky')\n    def test_sub")
NO_ADD_PY = PYTESTS.replace("def test_add():\n    assert calc.add(2, 3) == 5\n\n\n", "")
EDITED_PY = PYTESTS.replace("calc.add(2, 3) == 5", "calc.add(2, 3) == -1")
CONFTEST_DESELECT = """def pytest_collection_modifyitems(config, items):
    items[:] = [i for i in items if 'add' not in i.name]
"""
CONFTEST_REWRITE = """import pathlib
import re


def pytest_sessionfinish(session, exitstatus):
    xml = session.config.option.xmlpath
    session.exitstatus = 0
    if xml and pathlib.Path(xml).exists():
        text = pathlib.Path(xml).read_text()
        text = re.sub(r'<failure[^>]*>.*?</failure>', '', text, flags=re.S)
        pathlib.Path(xml).write_text(text)
"""
SKIP_JS = JSTESTS.replace("test('adds',", "test.skip('adds',").replace(
    "test('adds zero',", "test.skip('adds zero',"
)
ONLY_JS = JSTESTS.replace(
    "test('adds zero', () => {\n  assert.strictEqual(add(2, 0), 2);",
    "test.only('adds zero', () => {\n  assert.ok(true);",
)

# (name, files changed, the class that must be named, where)
WEAKENED = [
    ("pytest skip decorator", {"tests/test_calc.py": SKIP_PY}, "disabled-tests", "test_add"),
    ("pytest xfail", {"tests/test_calc.py": XFAIL_PY}, "disabled-tests", "test_add"),
    ("pytest.skip() inside the test", {"tests/test_calc.py": SKIP_INSIDE}, "disabled-tests",
     "test_add"),
    ("unittest skip decorator", {"ut/test_calc_ut.py": SKIP_UT, "calc.py": BROKEN_SUB},
     "disabled-tests", "TestCalc.test_sub"),
    ("deleted test", {"tests/test_calc.py": NO_ADD_PY}, "removed-tests", "test_add"),
    ("deleted test file", {"ut/test_calc_ut.py": None, "calc.py": BROKEN_SUB}, "removed-tests",
     "ut/test_calc_ut.py"),
    ("-k in addopts", {"pyproject.toml": PYPROJECT.replace('"-q"', '"-q -k \'not add\'"')},
     "test-config", "addopts"),
    ("--deselect in addopts",
     {"pyproject.toml": PYPROJECT.replace('"-q"', '"-q --deselect tests/test_calc.py::test_add"')},
     "test-config", "addopts"),
    ("a conftest.py that deselects", {"tests/conftest.py": CONFTEST_DESELECT}, "test-config",
     "conftest.py"),
    ("assertion edited to match broken code", {"tests/test_calc.py": EDITED_PY},
     "changed-tests", "test_add"),
    ("coverage fail_under lowered",
     {"pyproject.toml": PYPROJECT.replace("fail_under = 90", "fail_under = 10")},
     "test-config", "fail_under"),
    ("it.skip in a node --test suite", {"test/calc.test.js": SKIP_JS, "calc.js": BROKEN_JS,
                                        "calc.py": CALC}, "disabled-tests", "adds"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "files", "cls", "where"), WEAKENED, ids=[w[0] for w in WEAKENED])
def test_a_weakened_test_suite_passes_its_own_plan_but_the_gate_fails_it(
    world: World, monkeypatch: pytest.MonkeyPatch, name: str, files: dict[str, Any], cls: str,
    where: str,
) -> None:  # fmt: skip
    changed: dict[str | bytes, Any] = {"calc.py": BROKEN, **files}
    if "fail_under" in name:
        changed = dict(files)  # the configuration alone: the code stays right
    branch = "weak-" + name.replace(" ", "-").replace(".", "").replace("(", "").replace(")", "")
    cand = world.commit(branch, changed)
    with monkeypatch.context() as m:
        assert _without_tests_stage(world, cand, m) == READY, f"{name}: not live"
    code, out = world.gate(cand)
    assert (code, out["decision"]) == (1, FAILED), out
    mine = [i for i in out["tests"]["issues"] if i["cls"] == cls and i["accepted"] is None]
    assert mine, (name, out["tests"])
    assert any(where in (i["test"] or "") + " " + (i["file"] or "") + " " + i["what"]
               for i in mine), (name, mine)  # fmt: skip
    assert f"tests weakened ({cls})" in _reasons(out)


def test_only_in_a_node_suite_is_named_as_disabling_the_others(world: World) -> None:
    # Not shown live: `node --test` runs every test unless the plan passes --test-only, and a
    # base plan with --test-only runs none; `.only` still disables the rest wherever a plan or
    # another runner honours it, so the static reading fails it.
    cand = world.commit("weak-only", {"test/calc.test.js": ONLY_JS})
    code, out = world.gate(cand)
    assert (code, out["decision"]) == (1, FAILED), out
    (issue,) = [i for i in out["tests"]["issues"] if i["cls"] == "disabled-tests"]
    assert issue["file"] == "test/calc.test.js" and "only" in issue["what"], issue


def test_a_conftest_that_rewrites_the_report_is_caught_by_the_static_reading(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    cand = world.commit("weak-rewrite", {"calc.py": BROKEN, "tests/conftest.py": CONFTEST_REWRITE})
    code, out = world.gate(cand)
    assert (code, out["decision"]) == (1, FAILED), out
    config = [i for i in out["tests"]["issues"] if i["cls"] == "test-config"]
    # The static half caught it: the conftest's hook is named, whatever the report said.
    assert any(i["file"] == "tests/conftest.py" and "pytest_sessionfinish" in i["what"]
               for i in config), out["tests"]  # fmt: skip


@pytest.mark.parametrize(("name", "files"), [
    ("package.json postinstall",
     {"package.json": '{"name": "calc", "scripts": {"postinstall": "node x.js"}}\n'}),
    (".npmrc script-shell", {".npmrc": "script-shell=/tmp/evil.sh\n"}),
])  # fmt: skip
def test_a_change_that_runs_later_outside_the_sandbox_blocks(
    world: World, name: str, files: dict[str, Any]
) -> None:
    cand = world.commit("later-" + name.split()[0].strip("."), files)
    code, out = world.gate(cand)
    assert (code, out["decision"]) == (3, BLOCKED), out
    (later,) = out["runs_later"]
    assert later["automatic"] and later["path"] == next(iter(files)), later
    assert "runs later outside the sandbox" in _reasons(out)
    assert out["checks"] == []  # blocked before anything ran


MOVED_FROM = PYTESTS.replace("def test_mul():\n    assert calc.mul(2, 3) == 6\n", "").rstrip()
MOVED_TO = "import calc\n\n\ndef test_mul():\n    assert calc.mul(2, 3) == 6\n"

LEGITIMATE = [
    ("a new test", {"tests/test_more.py": "import calc\n\n\ndef test_more():\n"
                                          "    assert calc.add(1, 1) == 2\n"}),
    ("a refactor keeping every test id",
     {"calc.py": CALC.replace("return a + b", "return sum((a, b))")}),
    ("a test moved to another file with the same body",
     {"tests/test_calc.py": MOVED_FROM + "\n", "tests/test_moved.py": MOVED_TO}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "files"), LEGITIMATE, ids=[x[0] for x in LEGITIMATE])
def test_a_legitimate_change_stays_ready(world: World, name: str, files: dict[str, Any]) -> None:
    cand = world.commit("ok-" + name.replace(" ", "-"), files)
    code, out = world.gate(cand)
    assert (code, out["decision"]) == (0, READY), out
    tests = out["tests"]
    assert tests["issues"] == [] and tests["removed"] == [] and tests["disabled"] == []
    assert tests["baseline_seq"] is not None
    assert {c["check"] for c in tests["counts"]} == {"tests", "unit", "node"}
    if "moved" in name:
        assert tests["moved"] == [["tests.test_calc::test_mul", "tests.test_moved::test_mul"]]


def test_the_baseline_runs_once_and_is_recorded(world: World) -> None:
    a = world.commit("base-once-a", {"README.md": "a\n"})
    b = world.commit("base-once-b", {"README.md": "b\n"})
    _, first = world.gate(a)
    _, second = world.gate(b)
    assert first["tests"]["baseline_seq"] == second["tests"]["baseline_seq"]
    assert second["tests"]["baseline_cached"] is True
    seqs = {e["seq"] for e in world.entries("result.baseline")}
    assert first["tests"]["baseline_seq"] in seqs
    (entry,) = [e for e in world.entries("result.baseline")
                if e["seq"] == first["tests"]["baseline_seq"]]  # fmt: skip
    counts = {c["name"]: c["counts"] for c in entry["data"]["checks"]}
    assert counts["tests"]["passed"] == 2 and counts["unit"]["passed"] == 2, counts
    assert counts["node"]["passed"] == 2, counts


def test_a_damaged_baseline_pointer_runs_the_base_again(world: World) -> None:
    cand = world.commit("base-damaged", {"README.md": "damaged\n"})
    _, before = world.gate(cand)
    for pointer in Path(world.env["OMS_HOME"]).glob("repos/*/baselines/*.json"):
        pointer.write_text('{"seq": 0}')  # names the genesis entry: not a baseline
    code, after = world.gate(cand)
    assert (code, after["decision"]) == (0, READY), after
    assert after["tests"]["baseline_cached"] is False
    assert after["tests"]["baseline_seq"] != before["tests"]["baseline_seq"]


def test_a_human_acknowledgement_turns_one_failed_into_ready_once(world: World) -> None:
    cand = world.commit("ack", {"calc.py": BROKEN, "tests/test_calc.py": SKIP_PY})
    code, failed = world.gate(cand)
    assert (code, failed["decision"]) == (1, FAILED), failed
    seq = str(failed["evidence_seq"])
    # Not without a terminal: piped input counts for nothing.
    code, refused = world.json("evidence", "acknowledge", seq, "--repo", str(world.repo))
    assert code == 3 and "terminal" in refused["error"]["message"], refused
    got = oms_at_pty(["evidence", "acknowledge", seq, "--repo", str(world.repo), "--json"],
                     b"yes\n", env=world.env, cwd=world.root)  # fmt: skip
    assert got.code == 0, (got.out, got.err, got.screen)
    assert "test_add" in got.screen and "disabled-tests" in got.screen
    code, ready = world.gate(cand)
    assert (code, ready["decision"]) == (0, READY), ready
    assert ready["tests"]["acknowledged"] == json.loads(got.out)["seq"]
    assert all(i["accepted"] == "acknowledged" for i in ready["tests"]["issues"])
    code, again = world.gate(cand)  # single-use: the next gate fails again
    assert (code, again["decision"]) == (1, FAILED), again
    second = oms_at_pty(["evidence", "acknowledge", seq, "--repo", str(world.repo), "--json"],
                        None, env=world.env, cwd=world.root)  # fmt: skip
    assert second.code == 3 and "already" in second.out, second


def test_a_check_without_a_report_is_said_to_be_not_inventoried(
    tmp_path: Path, world: World
) -> None:
    policy = ('version = 1\n\n[[checks]]\nname = "unit"\n'
              'cmd = ["/usr/bin/python3", "-m", "unittest", "discover", "-s", "ut", "-t", "."]\n'
              "timeout_s = 60\n")  # fmt: skip
    files = {"oms.toml": policy, "calc.py": CALC, "ut/__init__.py": "",
             "ut/test_calc_ut.py": UTESTS}  # fmt: skip
    w = make_world(tmp_path / "w", files)
    cand = w.commit("skip", {"ut/test_calc_ut.py": SKIP_UT})
    code, out = w.gate(cand)
    # The static reading still sees the skip; the inventory was not taken.
    assert (code, out["decision"]) == (1, FAILED), out
    assert out["tests"]["not_inventoried"] == ["unit"] and out["tests"]["counts"] == []
    assert out["tests"]["baseline_seq"] is None


REPORTER = """import pathlib
import sys

out = pathlib.Path('out')
out.mkdir(exist_ok=True)
(out / 'report.xml').write_text('<testsuite><testcase classname="t" name="ok"/></testsuite>')
"""


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_report_that_is_not_a_regular_file_fails_without_being_opened(
    tmp_path: Path, world: World, kind: str
) -> None:
    policy = ('version = 1\n\n[[checks]]\nname = "rep"\n'
              'cmd = ["/usr/bin/python3", "make_report.py"]\ntimeout_s = 60\n'
              'report = "junit:out/report.xml"\n')  # fmt: skip
    w = make_world(tmp_path / "w", {"oms.toml": policy, "make_report.py": REPORTER})
    hostile = {
        "symlink": "import os\nos.makedirs('out', exist_ok=True)\n"
                   "os.symlink('/etc/passwd', 'out/report.xml')\nprint('START END')\n",
        "fifo": "import os\nos.makedirs('out', exist_ok=True)\nos.mkfifo('out/report.xml')\n"
                "print('START END')\n",
    }[kind]  # fmt: skip
    cand = w.commit(f"rep-{kind}", {"make_report.py": hostile})
    code, out = w.gate(cand)
    assert (code, out["decision"]) == (1, FAILED), out
    assert "START END" in out["checks"][0]["stdout_tail"]  # the candidate's code ran
    assert "not a regular file" in _reasons(out) or "symlink" in _reasons(out), out


def test_the_logs_audit_after_all_of_it(world: World) -> None:
    code, out = world.json("evidence", "audit", "--repo", str(world.repo))
    assert code == 0 and out["intact"], out
    joined = "\n".join(world.outputs)
    assert "Traceback" not in joined


def test_a_bug_fix_whose_test_the_base_already_had_stays_ready(tmp_path: Path) -> None:
    buggy = {**BASE_FILES, "calc.py": CALC.replace("return a * b", "return a + b")
             .replace("return -a", "return a")}  # fmt: skip
    root = tmp_path / "bugfix"
    env_root = root
    w = make_world(env_root / "w", buggy)
    code, out = w.json("toolchain", "prepare", "--repo", str(w.repo))
    assert code == 0, out
    cand = w.commit("fix", {"calc.py": CALC})
    code, out = w.gate(cand)
    assert (code, out["decision"]) == (0, READY), out
    base = {c["check"]: c["base"] for c in out["tests"]["counts"]}
    assert base["tests"]["failed"] == 1 and base["unit"]["failed"] == 1, base


def test_policies_without_the_new_keys_keep_their_digests() -> None:
    from policy import parse_policy

    loaded = parse_policy(
        b'version = 1\n[[checks]]\nname = "unit"\ncmd = ["python3", "-m", "unittest"]\n',
        "oms.toml",
    )
    # Computed before `report` and `[verify]` existed.
    assert loaded.digest == POLICY_DIGEST_BEFORE
    assert loaded.plan_digest == PLAN_DIGEST_BEFORE


POLICY_DIGEST_BEFORE = "sha256:4575edc07f2372c43141713c6ead4ccfaea7be46ef7c37cb3599743b25f384f0"
PLAN_DIGEST_BEFORE = "sha256:bdb7a368385e5a84cdb520be4f66bf6d61a1e6aed063bb8cb88abd6db8a996f4"

_ = (os, subprocess, git, PY)


def test_a_base_whose_plan_leaves_no_report_is_unavailable_never_an_empty_baseline(
    tmp_path: Path,
) -> None:
    policy = ('version = 1\n\n[[checks]]\nname = "rep"\n'
              'cmd = ["/usr/bin/python3", "make_report.py"]\ntimeout_s = 60\n'
              'report = "junit:out/report.xml"\n')  # fmt: skip
    w = make_world(tmp_path / "w", {"oms.toml": policy, "make_report.py": "print('no report')\n"})
    cand = w.commit("writes-one", {"make_report.py": REPORTER})
    code, out = w.gate(cand)
    assert code == 4 and out["decision"] == "UNAVAILABLE", out
    assert "the base's run of check rep gives no test inventory" in _reasons(out), out
    assert w.entries("result.baseline") == []
