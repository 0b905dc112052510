"""`oms doctor` on what a first-time user meets: an initialised repository whose default
branch has no verification plan, or names a lock that is not committed, is not ready
(exit 4) with the remedy; a missing provider key for `--egress api` and an installed Stop
hook whose time-out is under the gate's budget are warnings (ready stays true); plain
output is `name: status — detail` lines. Real CLI, real git, real bwrap."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.repos import commit_policy
from support.toolchains import VENV_POLICY

OmsJson = Callable[..., tuple[int, dict[str, Any]]]
RunOms = Callable[..., subprocess.CompletedProcess[str]]
NO_KEYS = {"ANTHROPIC_API_KEY": "", "OPENAI_API_KEY": ""}


def _init(oms_json: OmsJson, repo: Path) -> None:
    code, out = oms_json(["init", "--repo", repo])
    assert code == 0, out


def test_no_verification_plan_on_the_default_branch_is_not_ready(
    git_repo: Path, oms_json: OmsJson, oms_env: dict[str, str]
) -> None:
    _init(oms_json, git_repo)
    code, report = oms_json(["doctor", "--repo", git_repo])
    assert code == 4 and report["ready"] is False, report
    (problem,) = [p for p in report["problems"] if "no verification plan" in p]
    assert "every candidate would be BLOCKED" in problem
    assert any("oms init" in r and "default branch" in r for r in report["remedies"]), report
    commit_policy(git_repo, env=oms_env)
    code, report = oms_json(["doctor", "--repo", git_repo])
    assert code == 0 and report["ready"] is True, report


def test_a_lock_the_base_toolchains_name_but_never_committed_is_not_ready(
    git_repo: Path, oms_json: OmsJson, oms_env: dict[str, str]
) -> None:
    _init(oms_json, git_repo)
    commit_policy(git_repo, env=oms_env, text=VENV_POLICY)
    (git_repo / "requirements.lock").write_text("# in the worktree only\n")
    code, report = oms_json(["doctor", "--repo", git_repo])
    assert code == 4 and report["ready"] is False, report
    (problem,) = [p for p in report["problems"] if "requirements.lock" in p]
    assert problem.startswith("toolchain py: requirements.lock is missing (on main)"), problem
    assert "oms toolchain lock" in problem


def test_no_provider_key_is_a_warning_not_a_problem(
    git_repo: Path, oms_json: OmsJson, oms_env: dict[str, str]
) -> None:
    _init(oms_json, git_repo)
    commit_policy(git_repo, env=oms_env)
    code, report = oms_json(["doctor", "--repo", git_repo], env_extra=NO_KEYS)
    assert code == 0 and report["ready"] is True, report
    (warning,) = [w for w in report["warnings"] if "--egress api" in w]
    assert "ANTHROPIC_API_KEY or OPENAI_API_KEY" in warning and "--egress tunnel" in warning
    assert report["provider_keys"]["held"] == []
    code, report = oms_json(["doctor", "--repo", git_repo],
                            env_extra={"ANTHROPIC_API_KEY": "sk-ant-test-not-a-key"})  # fmt: skip
    assert code == 0 and report["provider_keys"]["held"] == ["anthropic"], report
    assert not any("--egress api" in w for w in report.get("warnings", [])), report


def test_a_stop_hook_time_out_under_the_gate_budget_is_a_warning(
    git_repo: Path, oms_json: OmsJson, oms_env: dict[str, str]
) -> None:
    _init(oms_json, git_repo)
    commit_policy(git_repo, env=oms_env)
    code, out = oms_json(["install", "claude-code", "--scope", "project", "--repo", git_repo])
    assert code == 0, out
    settings = git_repo / ".claude" / "settings.json"
    code, report = oms_json(["doctor", "--repo", git_repo])
    assert code == 0 and not any("hook time-out" in w for w in report.get("warnings", []))
    budget = report["hooks"]["gate_budget_s"]
    doc = json.loads(settings.read_text())
    doc["hooks"]["Stop"][0]["hooks"][0]["timeout"] = 60
    settings.write_text(json.dumps(doc))
    code, report = oms_json(["doctor", "--repo", git_repo])
    assert code == 0 and report["ready"] is True, report
    (warning,) = [w for w in report["warnings"] if "hook time-out" in w]
    assert f"claude-code project Stop hook time-out 60 s is shorter than the gate's budget " \
        f"{budget} s" in warning and "oms install claude-code" in warning  # fmt: skip


def test_plain_output_is_one_line_a_section_never_a_dict(
    git_repo: Path, oms_json: OmsJson, run_oms: RunOms
) -> None:
    _init(oms_json, git_repo)
    proc = run_oms(["doctor", "--repo", git_repo], env_extra=NO_KEYS)
    assert proc.returncode == 4, proc.stderr
    lines = proc.stdout.splitlines()
    assert "{'" not in proc.stdout and "': " not in proc.stdout, lines  # no dict repr
    assert any(ln.startswith("evidence: ok — intact, ") for ln in lines), lines
    assert any(ln.startswith("apparmor: info — ") for ln in lines), lines
    assert any(ln.startswith("warning:  `oms agent run --egress api` has no provider key")
               for ln in lines), lines  # fmt: skip
    assert any(ln.startswith("problem:  the default branch's policy") for ln in lines), lines
    assert lines[-1] == "NOT READY"
