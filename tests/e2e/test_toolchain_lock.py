"""`oms toolchain lock` through the real CLI: a hash-pinned requirements.lock resolved by
uv (from the package registry: one small package set) from pyproject.toml as committed on
the default branch, never the worktree's; dynamic dependencies and a symlinked output are
refused."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.repos import make_repo

OmsJson = Callable[..., tuple[int, dict[str, Any]]]
PYPROJECT = ('[project]\nname = "demo"\nversion = "0.1"\ndependencies = ["iniconfig"]\n'
             '[project.optional-dependencies]\ntest = ["pytest"]\n')  # fmt: skip


def test_the_lock_comes_from_the_default_branch_pyproject_not_the_worktree(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    repo = make_repo(tmp_path / "repo", {"pyproject.toml": PYPROJECT}, env=oms_env)
    (repo / "pyproject.toml").write_text(PYPROJECT.replace('["iniconfig"]', '["six"]'))
    code, out = oms_json(["toolchain", "lock", "--repo", repo], timeout=600)
    assert code == 0, out
    assert out["extras"] == ["test"] and out["branch"] == "refs/heads/main", out
    lock = (repo / "requirements.lock").read_text()
    assert "iniconfig==" in lock and "pytest==" in lock and "six==" not in lock
    pins = [ln for ln in lock.splitlines() if "==" in ln and not ln.startswith("#")]
    assert pins and len(pins) == out["packages"]
    assert lock.count("--hash=sha256:") >= len(pins)
    assert any(s.startswith("git add requirements.lock") for s in out["next_steps"]), out


def test_dynamic_dependencies_are_refused_with_the_remedy(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    dynamic = '[project]\nname = "demo"\nversion = "0.1"\ndynamic = ["dependencies"]\n'
    repo = make_repo(tmp_path / "repo", {"pyproject.toml": dynamic}, env=oms_env)
    code, out = oms_json(["toolchain", "lock", "--repo", repo])
    assert code == 2 and out["error"]["kind"] == "policy", out
    assert "dynamic" in out["error"]["message"] and "list them in [project]" in out["error"][
        "message"]  # fmt: skip
    assert not (repo / "requirements.lock").exists()


def test_a_symlinked_output_is_never_written_through(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    repo = make_repo(tmp_path / "repo", {"pyproject.toml": PYPROJECT}, env=oms_env)
    target = tmp_path / "elsewhere"
    target.write_text("untouched\n")
    os.symlink(target, repo / "requirements.lock")
    code, out = oms_json(["toolchain", "lock", "--repo", repo])
    assert code == 2 and "symlink" in out["error"]["message"], out
    assert target.read_text() == "untouched\n"


def test_an_extra_the_project_lacks_is_a_usage_error(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    repo = make_repo(tmp_path / "repo", {"pyproject.toml": PYPROJECT}, env=oms_env)
    code, out = oms_json(["toolchain", "lock", "--repo", repo, "--extra", "docs"])
    assert code == 2 and "no extra 'docs'" in out["error"]["message"], out
