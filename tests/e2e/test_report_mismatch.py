"""A check whose `report` its `cmd` cannot give (pytest's report from a unittest run) is
said before anything runs: `oms policy check` names it, and the result gate BLOCKs in its
plan stage with the reason, where it used to stop mid-gate with an internal error.

Real git repository, the real CLI and the real gate."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.repos import git, make_repo

OmsJson = Callable[..., tuple[int, dict[str, Any]]]
MISMATCHED = """version = 1

[[checks]]
name = "tests"
cmd = ["python3", "-m", "unittest", "-q"]
report = "pytest"
"""


def test_policy_check_names_a_report_its_command_cannot_give(
    tmp_path: Path, oms_json: OmsJson, oms_env: dict[str, str]
) -> None:
    repo = make_repo(tmp_path / "repo", {"oms.toml": MISMATCHED}, env=oms_env)
    code, out = oms_json(["policy", "check", "--repo", str(repo)])
    assert code == 2 and out["valid"] is False, out
    (error,) = out["errors"]
    assert error["loc"] == "checks[0].report" and "does not run pytest" in error["message"]


def test_the_gate_blocks_a_report_its_command_cannot_give_before_running_it(
    tmp_path: Path, oms_json: OmsJson, oms_env: dict[str, str]
) -> None:
    repo = make_repo(tmp_path / "repo", {"oms.toml": MISMATCHED}, env=oms_env)
    assert oms_json(["init", "--repo", str(repo)])[0] == 0  # trusts main, and its policy
    git(repo, "checkout", "-q", "-b", "agent", env=oms_env)
    (repo / "mod.py").write_text("X = 1\n")
    git(repo, "add", "mod.py", env=oms_env)
    git(repo, "commit", "-q", "-m", "mod", env=oms_env)
    code, out = oms_json(["process-result", "--repo", str(repo), "--candidate", "agent"])
    assert (code, out["decision"]) == (3, "BLOCKED"), out
    (reason,) = out["reasons"]
    assert "check 'tests' declares report = 'pytest'" in reason and "does not run pytest" in reason
    assert out["checks"] == [], out  # nothing ran
