"""The committed policy as oms reads it at a ref: the MCP server's policy cache parses
each policy blob once and runs no git for a HEAD it has met before, and `oms sandbox run`
refuses a hostile committed policy.

The pure parsing limits are in tests/unit/policy/test_policy.py.
"""

from __future__ import annotations

import resource
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from support.oms import parse_single_json

import policy
from gatekeeper.mcp import policy_cache
from gatekeeper.mcp import server as mcp_server
from gatekeeper.repo import git as git_module
from gatekeeper.repo import policy as policy_at
from gatekeeper.repo.git import open_repo
from policy import PolicyError


def _key(parts: int) -> str:
    return ".".join(["a"] * parts)


HOSTILE = [
    pytest.param(f"version = 1\n{_key(24_000)} = 1\n", "line longer than", id="48k-key"),
    pytest.param(
        "version = 1\na = " + "[\n" * 20_000 + "]\n" * 20_000,
        "nested deeper than 32",
        id="deep",
    ),
]


# -- the MCP server parses a policy blob once ----------------------------------------


def _commit(run_git: Callable[..., str], repo: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).write_text(text)
        run_git(repo, "add", name)
    run_git(repo, "commit", "-q", "-m", "change")
    return run_git(repo, "rev-parse", "HEAD").strip()


def test_mcp_policy_cache_parses_each_policy_blob_once(
    git_repo: Path, run_git: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[str] = []
    real = policy_at.parse_policy

    def counting(data: bytes, origin: str) -> policy.LoadedPolicy:
        parsed.append(origin)
        return real(data, origin)

    monkeypatch.setattr(policy_at, "parse_policy", counting)
    cache = policy_cache.PolicyCache(git_repo)
    first = _commit(run_git, git_repo, {"oms.toml": "version = 1\n"})
    assert cache.at(first).origin == f"{first[:12]}:oms.toml"
    cache.at(first)
    other = _commit(run_git, git_repo, {"README.md": "same policy blob\n"})
    assert cache.at(other).origin == f"{other[:12]}:oms.toml"  # honest origin, no parse
    assert len(parsed) == 1

    changed = _commit(run_git, git_repo, {"oms.toml": "version = 1\n[sandbox]\nwall_s = 9\n"})
    assert cache.at(changed).policy.sandbox.wall_s == 9
    bad = _commit(run_git, git_repo, {"oms.toml": f"version = 1\n{_key(17)} = 1\n"})
    for _ in range(3):
        with pytest.raises(PolicyError, match="more than 16 parts"):
            cache.at(bad)
    assert len(parsed) == 3


def test_mcp_tools_reading_heads_policy_parse_it_once(
    git_repo: Path, run_git: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _commit(run_git, git_repo, {"oms.toml": "version = 1\n"})
    calls: list[str] = []
    real = policy_cache.read_policy_at

    def counting(repo: Path, sha: str) -> policy.LoadedPolicy:
        calls.append(sha)
        return real(repo, sha)

    monkeypatch.setattr(policy_cache, "read_policy_at", counting)
    server = mcp_server.build_server(git_repo)

    async def read_three_times() -> None:
        for _ in range(3):
            await server.call_tool("oms_repo_read_file", {"path": "README.md"})

    anyio.run(read_three_times)
    assert len(calls) == 1


def test_mcp_policy_at_a_head_seen_before_runs_no_git_and_a_moved_head_is_read_again(
    git_repo: Path, run_git: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _commit(run_git, git_repo, {"oms.toml": "version = 1\n"})
    repo = open_repo(git_repo)
    cache = policy_cache.PolicyCache(repo.top)
    assert cache.at_head(repo).origin == f"{first[:12]}:oms.toml"
    runs: list[list[str]] = []
    real = git_module.run_argv

    def counting(argv: list[str], *args: Any) -> bytes:
        runs.append(argv)
        return real(argv, *args)

    monkeypatch.setattr(git_module, "run_argv", counting)
    for _ in range(3):
        assert cache.at_head(repo).origin == f"{first[:12]}:oms.toml"
    assert runs == [], "the policy at an unmoved HEAD ran git"

    moved = _commit(run_git, git_repo, {"oms.toml": "version = 1\n[sandbox]\nwall_s = 9\n"})
    now = cache.at_head(repo)
    assert now.origin == f"{moved[:12]}:oms.toml" and now.policy.sandbox.wall_s == 9
    assert runs, "a moved HEAD was not resolved by git"
    runs.clear()
    run_git(git_repo, "checkout", "-q", "--detach", first)  # back to a commit seen before
    assert cache.at_head(repo).policy.sandbox.wall_s != 9
    assert runs == []


@pytest.mark.parametrize(("text", "reason"), HOSTILE)
def test_sandbox_run_refuses_a_hostile_committed_policy_with_exit_2(
    git_repo: Path,
    run_git: Callable[..., str],
    run_oms: Callable[..., subprocess.CompletedProcess[str]],
    text: str,
    reason: str,
) -> None:
    _commit(run_git, git_repo, {"oms.toml": text})

    def limit() -> None:  # as above: an escaped case fails the test, not the machine
        resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))

    proc = run_oms(["sandbox", "run", "--repo", git_repo, "--json", "--", "true"], preexec_fn=limit)
    out = parse_single_json(proc)
    assert proc.returncode == 2, out
    assert out["error"]["kind"] == "policy"
    assert reason in out["error"]["message"]
