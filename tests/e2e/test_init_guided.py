"""`oms init`'s guided path through the real CLI: at a terminal it offers the detected
starter oms.toml and writes it only on yes; `--write-policy` writes it without a terminal;
without either it writes nothing (the GitHub Action runs `oms init` on every pull request).
One test makes the python starter's lock through uv from the package registry."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.pty import oms_at_pty
from support.repos import make_repo

from policy import parse_policy

OmsJson = Callable[..., tuple[int, dict[str, Any]]]
RunOms = Callable[..., subprocess.CompletedProcess[str]]
GO = {"go.mod": "module example.invalid/m\n\ngo 1.22\n"}
QUESTION = b"write oms.toml? [y/N]"
KEYS = {"created", "state_root", "repo_id", "key_id", "entries", "default_branch"}


def test_at_a_terminal_yes_writes_the_starter_and_says_what_to_commit(
    tmp_path: Path, oms_env: dict[str, str]
) -> None:
    repo = make_repo(tmp_path / "repo", GO, env=oms_env)
    got = oms_at_pty(["init"], b"y\n", env=oms_env, cwd=repo, prompt=QUESTION, stdio=True)
    assert got.code == 0, (got.screen, got.err)
    policy = parse_policy((repo / "oms.toml").read_bytes(), "oms.toml").policy
    assert policy.checks[0].report == "go-test"
    screen = got.screen.replace("\r\n", "\n")
    assert 'report = "go-test"' in screen.split("write oms.toml?")[0]  # shown before asked
    assert f"policy:  wrote {repo / 'oms.toml'} (go)" in screen
    assert "git add oms.toml && git commit -m 'oms policy'   # on main" in screen
    assert "oms trusts a policy only from main" in screen
    assert "oms process-result --candidate BRANCH" in screen.split("next:")[1]
    assert "oms policy trust" in screen.split("git commit -m 'oms policy'")[1]  # after it


def test_at_a_terminal_no_writes_nothing(tmp_path: Path, oms_env: dict[str, str]) -> None:
    repo = make_repo(tmp_path / "repo", GO, env=oms_env)
    got = oms_at_pty(["init"], b"n\n", env=oms_env, cwd=repo, prompt=QUESTION, stdio=True)
    assert got.code == 0, (got.screen, got.err)
    assert not (repo / "oms.toml").exists()
    screen = got.screen.replace("\r\n", "\n")
    assert "policy:  not written (you said no)" in screen
    assert "oms init --write-policy" in screen


def test_without_a_terminal_init_writes_no_policy_and_says_so(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson, run_oms: RunOms
) -> None:
    repo = make_repo(tmp_path / "repo", GO, env=oms_env)
    code, out = oms_json(["init", "--repo", repo])
    assert code == 0 and KEYS <= set(out), out
    assert out["policy"]["state"] == "not_asked" and out["policy"]["template"] == "go", out
    assert not (repo / "oms.toml").exists()
    assert any("--write-policy" in s for s in out["next_steps"]), out
    proc = run_oms(["init", "--repo", repo], input="y\n")  # a piped yes is no answer
    assert proc.returncode == 0 and not (repo / "oms.toml").exists(), proc.stdout
    assert "main has no oms.toml: every candidate is BLOCKED" in proc.stdout


def test_write_policy_writes_the_starter_without_a_terminal(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    repo = make_repo(tmp_path / "repo", GO, env=oms_env)
    code, out = oms_json(["init", "--repo", repo, "--write-policy"])
    assert code == 0 and KEYS <= set(out), out
    written = (repo / "oms.toml").read_bytes()
    assert out["policy"]["state"] == "written"
    assert out["policy"]["digest"] == parse_policy(written, "oms.toml").digest
    assert out["next_steps"][0].startswith("git add oms.toml && git commit"), out


def test_nothing_detected_never_fails_init(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    repo = make_repo(tmp_path / "repo", env=oms_env)
    code, out = oms_json(["init", "--repo", repo, "--write-policy"])
    assert code == 0 and out["policy"]["state"] == "undetected", out
    assert not (repo / "oms.toml").exists()
    assert any("oms policy init --template" in s for s in out["next_steps"]), out


def test_a_policy_on_the_default_branch_is_neither_offered_nor_replaced(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    mine = 'version = 1\n[[checks]]\nname = "t"\ncmd = ["true"]\n'
    repo = make_repo(tmp_path / "repo", {**GO, "oms.toml": mine}, env=oms_env)
    code, out = oms_json(["init", "--repo", repo, "--write-policy"])
    assert code == 0 and out["policy"]["state"] == "on_default_branch", out
    assert (repo / "oms.toml").read_text() == mine


def test_write_policy_on_a_pyproject_project_writes_its_lock_too(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    pyproject = ('[project]\nname = "demo"\nversion = "0.1"\ndependencies = ["iniconfig"]\n'
                 '[project.optional-dependencies]\ntest = ["pytest"]\n')  # fmt: skip
    repo = make_repo(tmp_path / "repo", {"pyproject.toml": pyproject}, env=oms_env)
    code, out = oms_json(["init", "--repo", repo, "--write-policy"], timeout=600)
    assert code == 0, out
    p = out["policy"]
    assert (p["toolchain_kind"], p["lock"], p["lock_written"]) == (
        "python-venv", "requirements.lock", True), out  # fmt: skip
    lock = (repo / "requirements.lock").read_text()
    assert "iniconfig==" in lock and "pytest==" in lock and "--hash=sha256:" in lock
    assert out["next_steps"][0].startswith("git add oms.toml requirements.lock && git commit")
