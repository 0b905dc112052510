"""A Node project's own `node --test` suite in the gate, its locked package from a node-npm
toolchain built from the base's package-lock.json: found by `require` (CommonJS) and by
`import` (ESM) alike; a candidate that breaks a test is FAILED."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.repos import write_files
from support.toolchains import node_project

pytestmark = pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm")

POLICY = """version = 1
[[toolchains]]
name = "js"
kind = "node-npm"
lock = "package-lock.json"

[[checks]]
name = "node-tests"
cmd = ["node", "--test"]
toolchain = "js"
"""
CJS_TEST = """\
const test = require('node:test');
const assert = require('node:assert');
const isNumber = require('is-number');
test('cjs: start', () => { console.log('OMS-CJS-START'); });
test('cjs: the locked package is required', () => {
  assert.strictEqual(isNumber(5), true);
  assert.strictEqual(isNumber('x'), {expect});
  console.log('OMS-CJS-END');
});
"""
ESM_TEST = """\
import test from 'node:test';
import assert from 'node:assert';
import isNumber from 'is-number';
test('esm: start', () => { console.log('OMS-ESM-START'); });
test('esm: the locked package is imported', () => {
  assert.strictEqual(isNumber('12'), true);
  console.log('OMS-ESM-END');
});
"""

Json = Callable[..., tuple[int, dict[str, Any]]]


def _candidate(repo: Path, run_git: Callable[..., str], branch: str, cjs_expect: str) -> None:
    run_git(repo, "checkout", "-q", "-b", branch, "main")
    write_files(repo, {"test/cjs.test.js": CJS_TEST.replace("{expect}", cjs_expect),
                       "lib.js": f"// {branch}\nmodule.exports = 1;\n"})  # fmt: skip
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-qm", f"candidate {branch}")
    run_git(repo, "checkout", "-q", "main")


def _gate(oms_json: Json, repo: Path, candidate: str, env: dict[str, str]) -> Any:
    return oms_json(["process-result", "--repo", str(repo), "--candidate", candidate,
                     "--base", "main"], env_extra=env, timeout=300)  # fmt: skip


def test_node_suite_requires_and_imports_the_locked_package_ready_then_failed_when_broken(
    oms_json: Json, git_repo: Path, run_git: Callable[..., str], tmp_path: Path
) -> None:
    package_json, package_lock = node_project()
    write_files(git_repo, {
        "oms.toml": POLICY, "package.json": package_json, "package-lock.json": package_lock,
        "test/cjs.test.js": CJS_TEST.replace("{expect}", "false"),
        "test/esm.test.mjs": ESM_TEST,
    })  # fmt: skip
    run_git(git_repo, "add", "-A")
    run_git(git_repo, "commit", "-qm", "a node project")
    env = {"OMS_TOOLCHAIN_DIR": str(tmp_path / "toolchains")}
    code, out = oms_json(["init", "--repo", str(git_repo)], env_extra=env)
    assert code == 0, out
    code, out = oms_json(["toolchain", "prepare", "--repo", str(git_repo)],
                         env_extra=env, timeout=600)  # fmt: skip
    assert code == 0, out
    assert out["toolchains"][0]["kind"] == "node-npm", out
    _candidate(git_repo, run_git, "good", "false")  # a change that keeps the tests green
    _candidate(git_repo, run_git, "broken", "true")  # isNumber('x') is false: this fails

    code, out = _gate(oms_json, git_repo, "good", env)
    assert code == 0, out
    assert out["decision"] == "READY_FOR_HUMAN", out
    assert out["toolchains"][0]["name"] == "js" and not out["toolchains"][0]["lock_changed"]
    tail = out["checks"][0]["stdout_tail"]
    # `node --test` that finds no test passes too: all four ran, both module systems.
    assert "# pass 4" in tail and "# fail 0" in tail, tail
    for marker in ("OMS-CJS-START", "OMS-CJS-END", "OMS-ESM-START", "OMS-ESM-END"):
        assert marker in tail, tail
    assert not (git_repo / "node_modules").exists()  # nothing in the worktree to find
    shown = oms_json(["evidence", "show", str(out["evidence_seq"]), "--repo", str(git_repo)])
    assert shown[0] == 0, shown

    code, out = _gate(oms_json, git_repo, "broken", env)
    assert code == 1, out
    assert out["decision"] == "FAILED", out
    assert out["checks"][0]["exit_code"] != 0, out
    assert "# fail 1" in out["checks"][0]["stdout_tail"], out  # the broken test, not a crash
