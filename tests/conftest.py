"""Shared fixtures: a private state root, real git repositories, and the real `oms` CLI.

Every test gets its own `$OMS_HOME` under `tmp_path` (never the real home), and
`HOME` points into `tmp_path` as well so that git and oms cannot read or write
the user's own configuration. The helpers behind them live in `tests/support/`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

# Before `support` is first imported, so that its asserts explain themselves as tests' do.
pytest.register_assert_rewrite("support")

from support.env import clean_env  # noqa: E402
from support.oms import parse_single_json  # noqa: E402
from support.oms import run_oms as run_oms_in  # noqa: E402
from support.repos import git, make_repo  # noqa: E402

RunOms = Callable[..., subprocess.CompletedProcess[str]]
ParseJson = Callable[[subprocess.CompletedProcess[str]], dict[str, Any]]


@pytest.fixture(scope="session")
def _session_state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("xdg-state")


@pytest.fixture(autouse=True)
def _never_the_real_state_root(_session_state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that scans without asking for `oms_home` (the scanners' own unit tests) still
    must not write the real home's state: the scan-result cache lives in the state root.
    `fake_home` and `oms_home` override this for the tests that use them."""
    monkeypatch.setenv("XDG_STATE_HOME", str(_session_state))


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
    return clean_env(fake_home, oms_home)


@pytest.fixture
def run_git(oms_env: dict[str, str]) -> Callable[..., str]:
    """`run_git(repo, *args)`: git with this test's clean environment."""

    def run(repo: Path, *args: str) -> str:
        return git(repo, *args, env=oms_env)

    return run


@pytest.fixture
def git_repo(tmp_path: Path, oms_env: dict[str, str]) -> Path:
    """A real git repository with one commit, configured locally (no global config)."""
    return make_repo(tmp_path / "repo", env=oms_env)


@pytest.fixture
def run_oms(tmp_path: Path, oms_env: dict[str, str]) -> RunOms:
    """Run the real CLI: `python -m gatekeeper ARGS` with this test's OMS_HOME."""

    def run(
        args: list[str] | tuple[str, ...],
        *,
        cwd: Path | None = None,
        env_extra: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> subprocess.CompletedProcess[str]:
        env = {**oms_env, **(env_extra or {})}
        return run_oms_in(args, env=env, cwd=cwd if cwd is not None else tmp_path, **kwargs)

    return run


@pytest.fixture
def parse_json() -> ParseJson:
    return parse_single_json


@pytest.fixture
def oms_json(run_oms: RunOms) -> Callable[..., tuple[int, dict[str, Any]]]:
    """Run `oms ARGS --json`; return (exit code, the single JSON object)."""

    def run(
        args: list[str] | tuple[str, ...], *, json_flag: bool = True, **kwargs: Any
    ) -> tuple[int, dict[str, Any]]:
        # json_flag=False: the caller placed `--json` itself (before a `--`).
        proc = run_oms([*args, "--json"] if json_flag else list(args), **kwargs)
        return proc.returncode, parse_single_json(proc)

    return run


# Modules that take the longest, run first: with `--dist loadscope` each module goes to one
# worker in collection order, so a long module collected last would run alone at the end.
SLOWEST_FIRST = (
    "test_pre_commit.py", "test_packaging.py", "test_result_gate.py", "test_transfer.py",
    "test_agent_clis.py", "test_work_verify.py", "test_git_isolation.py", "test_work_dispatch.py",
    "test_toolchain_gate.py", "test_evidence_store.py", "test_mcp.py", "test_runs_flow.py",
    "test_runs_cli.py", "test_runs_guests.py",
)  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: else as found
