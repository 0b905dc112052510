"""`oms policy check` on a policy whose toolchains `oms toolchain prepare` could not build:
a lock missing from both the worktree and the default branch, a python-venv lock without
hashes. And `oms policy init` on a project with only a pyproject.toml."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.repos import make_repo
from support.toolchains import VENV_POLICY, python_lock

OmsJson = Callable[..., tuple[int, dict[str, Any]]]
PYPROJECT = '[project]\nname = "demo"\nversion = "0.1"\ndependencies = ["iniconfig"]\n'


def test_a_lock_neither_in_the_worktree_nor_on_the_default_branch_is_an_error(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    repo = make_repo(tmp_path / "repo", {"oms.toml": VENV_POLICY}, env=oms_env)
    code, out = oms_json(["policy", "check", "--repo", repo])
    assert code == 2 and out["valid"] is False and out["digest"] is None, out
    (error,) = out["errors"]
    assert error["loc"] == "toolchains[0].lock"
    assert error["line"] == ("oms.toml:toolchains[0].lock: toolchain py: requirements.lock is "
                             "missing (neither in the worktree nor on main); make it with "
                             "`oms toolchain lock`")  # fmt: skip
    (repo / "requirements.lock").write_text(python_lock())  # to be committed with the policy
    code, out = oms_json(["policy", "check", "--repo", repo])
    assert code == 0 and out["valid"] is True, out


def test_a_python_venv_lock_without_hashes_cannot_be_prepared(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    files = {"oms.toml": VENV_POLICY, "requirements.lock": "six==1.17.0\n"}
    repo = make_repo(tmp_path / "repo", files, env=oms_env)
    code, out = oms_json(["policy", "check", "--repo", repo])
    assert code == 2, out
    (error,) = out["errors"]
    assert "pins no --hash=sha256" in error["message"] and "oms toolchain lock" in error["message"]


def test_policy_init_on_a_pyproject_only_project_names_the_lock_to_make(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    repo = make_repo(tmp_path / "repo", {"pyproject.toml": PYPROJECT}, env=oms_env)
    code, out = oms_json(["policy", "init", "--repo", repo])
    assert code == 0, out
    assert (out["template"], out["toolchain_kind"], out["lock"]) == ("python", "python-venv", None)
    assert 'lock = "requirements.lock"' in (repo / "oms.toml").read_text()
    assert out["next_steps"][0].startswith("oms toolchain lock"), out
