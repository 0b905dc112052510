"""`oms policy init|check|show` and `oms init --default-branch`, through the real CLI on
real repositories. One test builds the python starter's toolchain (pip, from PyPI, outside
the sandbox) and runs its plan green in the result gate."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.env import clean_env
from support.oms import parse_single_json, run_oms
from support.repos import commit_on, git, make_repo
from support.toolchains import node_project, python_lock, uv_project

from policy import parse_policy

OmsJson = Callable[..., tuple[int, dict[str, Any]]]
RunOms = Callable[..., subprocess.CompletedProcess[str]]
MISSPELT = """version = 1
[sandbx]
wall_s = 10

[[checks]]
nmae = "unit"
cmd = ["true"]

[scanners]
timeout_ss = 4
"""


def repo_with(tmp_path: Path, env: dict[str, str], files: dict[str, str]) -> Path:
    return make_repo(tmp_path / "repo", files, env=env)


# -- init --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "template", "kind", "lock"),
    [
        ({"requirements.lock": python_lock()}, "python", "python-venv", "requirements.lock"),
        ({"requirements-dev.txt": python_lock()}, "python", "python-venv",
         "requirements-dev.txt"),
        (dict(zip(("pyproject.toml", "uv.lock"), uv_project(), strict=True)), "python", "uv",
         "uv.lock"),
        (dict(zip(("package.json", "package-lock.json"), node_project(), strict=True)), "node",
         "node-npm", "package-lock.json"),
        ({"go.mod": "module example.invalid/m\n\ngo 1.22\n"}, "go", None, None),
    ],
    ids=["requirements-lock", "requirements-txt", "uv", "npm", "go"],
)  # fmt: skip
def test_init_detects_the_project_and_writes_a_valid_starter(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson, files: dict[str, str],
    template: str, kind: str | None, lock: str | None,
) -> None:  # fmt: skip
    repo = repo_with(tmp_path, oms_env, files)
    code, out = oms_json(["policy", "init", "--repo", repo])
    assert code == 0, out
    assert (out["template"], out["toolchain_kind"], out["lock"]) == (template, kind, lock)
    policy = parse_policy((repo / "oms.toml").read_bytes(), "oms.toml").policy
    assert out["digest"] == parse_policy((repo / "oms.toml").read_bytes(), "x").digest
    assert [t.kind for t in policy.toolchains] == ([kind] if kind else [])
    assert any("default branch" in s for s in out["next_steps"]), out
    if kind:
        assert any("oms toolchain prepare" in s for s in out["next_steps"]), out


def test_a_requirements_file_without_hashes_is_no_python_lock(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    repo = repo_with(tmp_path, oms_env, {"requirements.txt": "six==1.17.0\n"})
    code, out = oms_json(["policy", "init", "--repo", repo])
    assert code == 2 and "--template" in out["error"]["message"], out
    assert not (repo / "oms.toml").exists()
    code, out = oms_json(["policy", "init", "--repo", repo, "--template", "python"])
    assert code == 0 and out["lock"] is None, out
    assert 'lock = "requirements.lock"' in (repo / "oms.toml").read_text()


def test_init_prints_the_next_steps(
    tmp_path: Path, oms_env: dict[str, str], run_oms: RunOms
) -> None:
    repo = repo_with(tmp_path, oms_env, {"requirements.lock": python_lock()})
    proc = run_oms(["policy", "init", "--repo", repo])
    assert proc.returncode == 0, proc.stderr
    assert "commit it on the default branch" in proc.stdout
    assert "oms toolchain prepare" in proc.stdout


def test_init_refuses_to_overwrite_without_force(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    repo = repo_with(tmp_path, oms_env, {"go.mod": "module m\n", "oms.toml": "mine\n"})
    code, out = oms_json(["policy", "init", "--repo", repo])
    assert code == 2 and "--force" in out["error"]["message"], out
    assert (repo / "oms.toml").read_text() == "mine\n"
    code, out = oms_json(["policy", "init", "--repo", repo, "--force"])
    assert code == 0 and out["replaced"] is True, out
    assert '["go", "test", "./..."]' in (repo / "oms.toml").read_text()
    assert sorted(p.name for p in repo.iterdir() if p.name.endswith(".tmp")) == []


@pytest.mark.parametrize("force", [False, True])
def test_init_never_writes_through_a_symlink(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson, force: bool
) -> None:
    repo = repo_with(tmp_path, oms_env, {"go.mod": "module m\n"})
    target = tmp_path / "elsewhere.toml"
    target.write_text("untouched\n")
    os.symlink(target, repo / "oms.toml")
    code, out = oms_json(["policy", "init", "--repo", repo, *(["--force"] if force else [])])
    assert code == 2 and "symlink" in out["error"]["message"], out
    assert target.read_text() == "untouched\n" and (repo / "oms.toml").is_symlink()


def test_init_outside_a_repository_is_refused(tmp_path: Path, oms_json: OmsJson) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    code, out = oms_json(["policy", "init", "--repo", plain, "--template", "go"])
    assert code == 2 and out["error"]["kind"] == "usage", out
    assert not (plain / "oms.toml").exists()


# -- check -------------------------------------------------------------------------------


def test_check_lists_every_error_with_a_did_you_mean(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson, run_oms: RunOms
) -> None:
    repo = repo_with(tmp_path, oms_env, {})
    (repo / "oms.toml").write_text(MISSPELT)
    code, out = oms_json(["policy", "check", "--repo", repo])
    assert code == 2 and out["valid"] is False and "digest" in out and out["digest"] is None
    errors = {e["loc"]: e for e in out["errors"]}
    assert set(errors) == {"sandbx", "checks[0].nmae", "checks[0].name", "scanners.timeout_ss"}
    assert errors["sandbx"]["suggestion"] == "sandbox"
    assert errors["checks[0].nmae"] == {"loc": "checks[0].nmae", "message": "unknown key",
        "suggestion": "name", "line": "oms.toml:checks[0].nmae: unknown key (did you mean "
        "`name`?)"}  # fmt: skip
    proc = run_oms(["policy", "check", "--repo", repo])
    assert proc.returncode == 2
    assert "oms.toml:scanners.timeout_ss: unknown key (did you mean `timeout_s`?)" in proc.stdout
    assert "4 error(s)" in proc.stdout


def test_check_a_named_file_and_a_valid_one(
    tmp_path: Path, oms_json: OmsJson, run_oms: RunOms
) -> None:
    bad = tmp_path / "draft.toml"
    bad.write_text("version = 1\n[[checks]\n")
    code, out = oms_json(["policy", "check", bad])
    assert code == 2, out
    assert out["errors"][0]["line"].startswith(f"{bad}:2:9: TOML syntax error"), out
    good = tmp_path / "good.toml"
    good.write_text('version = 1\n[[checks]]\nname = "t"\ncmd = ["true"]\n')
    code, out = oms_json(["policy", "check", good])
    assert code == 0 and out["valid"] and out["errors"] == [], out
    assert out["digest"] == parse_policy(good.read_bytes(), "x").digest
    proc = run_oms(["policy", "check", good])
    assert proc.returncode == 0 and "valid" in proc.stdout


def test_check_without_a_file_is_a_usage_error(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    repo = repo_with(tmp_path, oms_env, {})
    code, out = oms_json(["policy", "check", "--repo", repo])
    assert code == 2 and "oms policy init" in out["error"]["message"], out


def test_check_flags_a_symlinked_policy_the_gates_would_refuse(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    repo = repo_with(tmp_path, oms_env, {"real.toml": "version = 1\n"})
    os.symlink("real.toml", repo / "oms.toml")
    code, out = oms_json(["policy", "check", "--repo", repo])
    assert code == 2 and "symlink" in out["errors"][0]["message"], out
    # Named on the command line (as a pre-commit hook names it): still flagged.
    code, out = oms_json(["policy", "check", repo / "oms.toml"])
    assert code == 2 and [e["message"] for e in out["errors"]] == [
        "is a symlink; the gates refuse a policy that is not a regular file"], out  # fmt: skip


def test_check_never_waits_on_a_fifo_in_the_worktree(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    repo = repo_with(tmp_path, oms_env, {})
    os.mkfifo(repo / "oms.toml")
    code, out = oms_json(["policy", "check", "--repo", repo], timeout=30)
    assert code == 2 and "not a regular file" in out["error"]["message"], out


# -- show --------------------------------------------------------------------------------


def test_show_reads_the_default_branch_never_the_worktree(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson, run_oms: RunOms
) -> None:
    committed = 'version = 1\n[[checks]]\nname = "t"\ncmd = ["true"]\n'
    repo = repo_with(tmp_path, oms_env, {"oms.toml": committed})
    (repo / "oms.toml").write_text("version = 1\n")  # the worktree's edit: not trusted
    code, out = oms_json(["policy", "show", "--repo", repo])
    assert code == 0, out
    head = git(repo, "rev-parse", "main", env=oms_env).strip()
    assert out["ref"] == "refs/heads/main" and out["commit"] == head
    assert out["origin"] == f"{head[:12]}:oms.toml"
    assert out["digest"] == parse_policy(committed.encode(), "x").digest
    assert out["policy"]["checks"] == [{"name": "t", "cmd": ["true"], "timeout_s": 600,
                                        "toolchain": None}]  # fmt: skip
    assert out["policy"]["sandbox"]["wall_s"] == 3600  # defaults filled in
    proc = run_oms(["policy", "show", "--repo", repo])
    assert proc.returncode == 0 and f"# digest: {out['digest']}" in proc.stdout
    body = "\n".join(x for x in proc.stdout.splitlines() if not x.startswith("#"))
    assert parse_policy(body.encode(), "shown").digest == out["digest"]  # TOML that round-trips


def test_show_at_a_ref_and_without_a_policy_file(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    repo = repo_with(tmp_path, oms_env, {})
    sha = commit_on(repo, "other", {"oms.toml": "version = 1\n[scanners]\ntimeout_s = 9\n"},
                    env=oms_env, index=tmp_path / "idx")  # fmt: skip
    code, out = oms_json(["policy", "show", "--repo", repo])
    assert code == 0 and out["origin"] == "built-in defaults", out
    code, out = oms_json(["policy", "show", "--repo", repo, "--ref", "other"])
    assert code == 0 and out["commit"] == sha and out["policy"]["scanners"]["timeout_s"] == 9
    code, out = oms_json(["policy", "show", "--repo", repo, "--ref", "--nope"])
    assert code == 2 and out["error"]["kind"] == "usage", out


def test_show_of_an_invalid_committed_policy_is_a_policy_error(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    repo = repo_with(tmp_path, oms_env, {"oms.toml": MISSPELT})
    code, out = oms_json(["policy", "show", "--repo", repo])
    assert code == 2 and out["error"]["kind"] == "policy", out


# -- oms init --default-branch -----------------------------------------------------------


def test_no_default_branch_points_to_init_default_branch_which_fixes_it(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    repo = tmp_path / "trunk-repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "trunk", env=oms_env)
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q",
        "--allow-empty", "-m", "first", env=oms_env)  # fmt: skip
    code, out = oms_json(["policy", "show", "--repo", repo])
    assert code == 2 and "oms init --default-branch NAME" in out["error"]["message"], out
    code, out = oms_json(["init", "--repo", repo])
    assert code == 0 and out["default_branch"] is None, out
    code, out = oms_json(["process-result", "--repo", repo, "--candidate", "trunk"])
    assert code == 2 and "oms init --default-branch NAME" in out["error"]["message"], out
    code, out = oms_json(["init", "--repo", repo, "--default-branch", "trunk"])
    assert code == 0 and out["default_branch"] == "refs/heads/trunk", out
    code, out = oms_json(["policy", "show", "--repo", repo])
    assert code == 0 and out["ref"] == "refs/heads/trunk", out


# -- the python starter, green in the gate -----------------------------------------------

APP = "import six\n\n\ndef shout(s):\n    return six.ensure_str(s).upper()\n"
TESTS = "import app\n\n\ndef test_shout():\n    assert app.shout('hi') == 'HI'\n"


def test_the_python_starter_runs_green_in_prepare_and_process_result(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = clean_env(home, tmp_path / "oms-state")
    env.update(OMS_TOOLCHAIN_DIR=str(tmp_path / "toolchains"), XDG_CACHE_HOME=str(home / ".c"),
               PIP_CACHE_DIR=str(tmp_path / "pip-cache"))  # fmt: skip
    repo = make_repo(tmp_path / "repo", {"requirements.lock": python_lock(), "app.py": APP,
                                         "tests/test_app.py": TESTS}, env=env)  # fmt: skip

    def oms(*args: str) -> tuple[int, dict[str, Any]]:
        proc: subprocess.CompletedProcess[str] = run_oms(
            [*args, "--json"], env=env, cwd=repo, timeout=900
        )
        return proc.returncode, parse_single_json(proc)

    code, out = oms("policy", "init")
    assert code == 0 and out["toolchain_kind"] == "python-venv", out
    git(repo, "add", "oms.toml", env=env)
    git(repo, "commit", "-q", "-m", "oms policy", env=env)
    assert oms("init")[0] == 0
    code, out = oms("toolchain", "prepare")
    assert code == 0 and [t["state"] for t in out["toolchains"]] == ["built"], out
    more = "import app\n\n\ndef test_more():\n    assert app.shout('a') == 'A'\n"
    cand = commit_on(repo, "cand", {"tests/test_more.py": more}, env=env, index=tmp_path / "i")
    code, out = oms("process-result", "--candidate", cand)
    assert code == 0 and out["decision"] == "READY_FOR_HUMAN", out
    (check,) = out["checks"]
    assert check["name"] == "tests" and check["exit_code"] == 0
    assert "2 passed" in check["stdout_tail"], check
