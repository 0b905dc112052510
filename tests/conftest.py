"""Shared fixtures: a private state root, real git repositories, and the real `oms` CLI.

Every test gets its own `$OMS_HOME` under `tmp_path` (never the real home), and
`HOME` points into `tmp_path` as well so that git and oms cannot read or write
the user's own configuration.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

RunOms = Callable[..., subprocess.CompletedProcess[str]]
ParseJson = Callable[[subprocess.CompletedProcess[str]], dict[str, Any]]

# What a process started by a test may inherit: nothing that points at the real
# home, the real git config or another OMS_HOME.
_DROP_ENV_PREFIXES = ("GIT_", "OMS_", "XDG_")


def _clean_env(home: Path, oms_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROP_ENV_PREFIXES)}
    env.update(
        HOME=str(home),
        OMS_HOME=str(oms_home),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        PYTHONDONTWRITEBYTECODE="1",
        LC_ALL="C",
    )
    return env


@pytest.fixture
def fake_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    return home


@pytest.fixture
def oms_home(tmp_path: Path, fake_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh state root for this test only; `$OMS_HOME` points at it (not yet created)."""
    root = tmp_path / "oms-state"
    monkeypatch.setenv("OMS_HOME", str(root))
    return root


@pytest.fixture
def oms_env(fake_home: Path, oms_home: Path) -> dict[str, str]:
    """The environment for subprocesses: the test's OMS_HOME and HOME, no GIT_* leaks."""
    return _clean_env(fake_home, oms_home)


def git(repo: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    """Run git in `repo` with no global or system config; return stdout, raise on failure."""
    proc = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        env=dict(env) if env is not None else None,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout


@pytest.fixture
def run_git(oms_env: dict[str, str]) -> Callable[..., str]:
    """`run_git(repo, *args)`: git with this test's clean environment."""

    def run(repo: Path, *args: str) -> str:
        return git(repo, *args, env=oms_env)

    return run


@pytest.fixture
def git_repo(tmp_path: Path, oms_env: dict[str, str]) -> Path:
    """A real git repository with one commit, configured locally (no global config)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main", env=oms_env)
    git(repo, "config", "user.name", "Test User", env=oms_env)
    git(repo, "config", "user.email", "test@example.invalid", env=oms_env)
    git(repo, "config", "commit.gpgsign", "false", env=oms_env)
    (repo / "README.md").write_text("hello\n")
    git(repo, "add", "README.md", env=oms_env)
    git(repo, "commit", "-q", "-m", "initial", env=oms_env)
    return repo


@pytest.fixture
def run_oms(tmp_path: Path, oms_env: dict[str, str]) -> RunOms:
    """Run the real CLI: `python -m gatekeeper ARGS` with this test's OMS_HOME."""

    def run(
        args: list[str] | tuple[str, ...],
        *,
        cwd: Path | None = None,
        env_extra: Mapping[str, str] | None = None,
        input: str | None = None,
        timeout: float = 60,
        **popen_kwargs: Any,
    ) -> subprocess.CompletedProcess[str]:
        env = dict(oms_env)
        if env_extra:
            env.update(env_extra)
        return subprocess.run(
            [sys.executable, "-m", "gatekeeper", *[str(a) for a in args]],
            cwd=str(cwd if cwd is not None else tmp_path),
            env=env,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            **popen_kwargs,
        )

    return run


# The key holding oms's own exit code in every `--json` object. (`exit_code` is left
# to command data, e.g. the sandboxed command's exit code in `oms sandbox run`.)
EXIT_KEY = "oms_exit_code"


def parse_single_json(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The one JSON object a `--json` command prints: exactly one line on stdout.

    Also pins the shared contract: `oms_exit_code` equals the process exit code, `ok`
    is true exactly when it is 0, and nothing resembling a traceback is printed.
    """
    out = proc.stdout
    assert out.endswith("\n"), f"stdout is not one terminated line: {out!r}"
    assert out.count("\n") == 1, f"stdout is not exactly one line: {out!r}"
    obj = json.loads(out)
    assert isinstance(obj, dict), f"stdout is not a JSON object: {out!r}"
    assert obj.get(EXIT_KEY) == proc.returncode, (obj, proc.returncode, proc.stderr)
    assert obj.get("ok") is (proc.returncode == 0), obj
    assert "Traceback" not in proc.stderr
    return obj


@pytest.fixture
def parse_json() -> ParseJson:
    return parse_single_json


@pytest.fixture
def oms_json(run_oms: RunOms) -> Callable[..., tuple[int, dict[str, Any]]]:
    """Run `oms ARGS --json`; return (exit code, the single JSON object)."""

    def run(args: list[str] | tuple[str, ...], **kwargs: Any) -> tuple[int, dict[str, Any]]:
        proc = run_oms([*args, "--json"], **kwargs)
        return proc.returncode, parse_single_json(proc)

    return run
