"""Bare `oms`: the repository's state as the gates see it, and the next steps.

At a terminal without a conductor role, bare `oms` shows the policy, the last verdicts,
the pending transfers and the evidence's health, exit 0; `oms --json` is the same as one
JSON object anywhere; outside a repository it is one line and the next step, exit 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from support.env import clean_env
from support.oms import parse_single_json, run_oms
from support.repos import commit_on, make_repo

POLICY = 'version = 1\n[[checks]]\nname = "unit"\ncmd = ["true"]\n'


def _world(tmp_path: Path, files: dict[str, str | bytes]) -> tuple[Path, dict[str, str]]:
    (tmp_path / "home").mkdir()
    env = clean_env(tmp_path / "home", tmp_path / "oms-state")
    return make_repo(tmp_path / "repo", files, env=env), env


def _state(repo: Path, env: dict[str, str]) -> dict[str, Any]:
    proc = run_oms(["--json"], env=env, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    return parse_single_json(proc)


def _at_terminal(repo: Path, env: dict[str, str]) -> tuple[int, str]:
    """Bare `oms` with stdin and stdout a pseudo-terminal, as a user types it."""
    master, slave = os.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "gatekeeper"], stdin=slave, stdout=slave,
                            stderr=subprocess.PIPE, env=env, cwd=repo)  # fmt: skip
    os.close(slave)
    screen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        screen += chunk
    os.close(master)
    proc.wait(timeout=60)
    assert proc.stderr is not None
    assert proc.stderr.read() == b""
    return proc.returncode, screen.decode("utf-8", "replace")


def test_bare_oms_at_a_terminal_without_a_conductor_shows_the_state_and_next_steps(
    tmp_path: Path,
) -> None:
    repo, env = _world(tmp_path, {})
    code, screen = _at_terminal(repo, env)
    assert code == 0, screen
    assert "policy: none on the default branch" in screen
    assert "evidence: not initialised" in screen
    assert f"oms init --repo {repo}" in screen and "oms policy init" in screen
    assert "no role" not in screen  # not the conductor's refusal


def test_the_state_names_the_policy_the_last_verdicts_and_the_pending_transfers(
    tmp_path: Path,
) -> None:
    repo, env = _world(tmp_path, {"oms.toml": POLICY, "docs/a.md": "a page\n"})
    assert run_oms(["init", "--repo", repo], env=env).returncode == 0
    # A candidate that changes the policy file is BLOCKED before anything runs.
    commit_on(repo, "agent/x", {"oms.toml": POLICY + "# more\n"}, env=env,
              index=tmp_path / "index")  # fmt: skip
    judged = run_oms(["process-result", "--repo", repo, "--candidate", "agent/x", "--json"],
                     env=env, timeout=300)  # fmt: skip
    verdict = parse_single_json(judged)
    assert verdict["decision"] == "BLOCKED", verdict
    preview = run_oms(["transfer", "preview", "--repo", repo, "--to", "anthropic:claude",
                       "--purpose", "review", "--context", "paths", "--path", "docs", "--json"],
                      env=env)  # fmt: skip
    digest = parse_single_json(preview)["digest"]

    state = _state(repo, env)
    assert state["policy"]["present"] is True and state["policy"]["checks"] == 1
    assert state["evidence"] == "intact" and state["initialised"] is True
    [last] = state["verdicts"]
    assert last["decision"] == "BLOCKED" and last["seq"] == verdict["evidence_seq"]
    assert verdict["commit"].startswith(last["commit"])
    assert [t["digest"] for t in state["pending_transfers"]] == [digest]
    commands = [n["command"] for n in state["next_steps"]]
    assert not any(c.startswith(("oms init", "oms policy init")) for c in commands), commands
    assert any(c.startswith("oms transfer list") for c in commands), commands

    human = run_oms(["--repo", repo], env=env)
    assert human.returncode == 0, human.stderr
    assert f"#{last['seq']} BLOCKED {last['commit']}" in human.stdout
    assert digest in human.stdout and "evidence: intact" in human.stdout


def test_a_tampered_log_is_said_and_its_rows_are_not_shown(tmp_path: Path) -> None:
    repo, env = _world(tmp_path, {"oms.toml": POLICY})
    assert run_oms(["init", "--repo", repo], env=env).returncode == 0
    [log] = (tmp_path / "oms-state").glob("repos/*/evidence/log.jsonl")
    log.write_bytes(log.read_bytes().replace(b'"kind":', b'"kinD":', 1))
    state = _state(repo, env)
    assert state["evidence"].startswith("tampered"), state["evidence"]
    assert state["verdicts"] == [] and state["pending_transfers"] == []


def test_outside_a_repository_it_is_one_line_and_the_next_step(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    env = clean_env(tmp_path / "home", tmp_path / "oms-state")
    proc = run_oms(["--repo", tmp_path], env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "then `oms init`" in proc.stderr, proc.stderr
    (tmp_path / "a-file").write_text("x\n")
    bad = run_oms(["--repo", tmp_path / "a-file", "--json"], env=env)
    assert bad.returncode == 2 and parse_single_json(bad)["error"]["kind"] == "usage"
    assert "Traceback" not in bad.stderr


def test_bare_oms_in_a_pipe_still_prints_the_help(tmp_path: Path) -> None:
    repo, env = _world(tmp_path, {})
    proc = run_oms([], env=env, cwd=repo)
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: oms")
