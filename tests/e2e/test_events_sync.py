"""`oms events sync github` through the real CLI: the command contract (one JSON object, its
keys, exit 4 with the reset time on a rate limit) and a token that appears nowhere.

GitHub itself cannot be reached here, so a GitHub-shaped pytest-httpserver on loopback
(`support.github_server`) stands in for it; `OMS_GITHUB_API_URL` points oms at it.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_httpserver import HTTPServer
from support.github_server import GitHubServer, issue

from gatekeeper.gates.records import init

RunOms = Callable[..., subprocess.CompletedProcess[str]]
TOKEN = "ghp_cli_token_never_shown_9876543210"
KEYS = {"repo", "requests", "not_modified", "events_new", "events_seen", "tickets",
        "notification", "rate"}  # fmt: skip


def test_sync_prints_one_object_and_a_rate_limit_exits_4_with_the_reset(
    git_repo: Path,
    oms_home: Path,
    httpserver: HTTPServer,
    run_oms: RunOms,
    parse_json: Callable[[subprocess.CompletedProcess[str]], dict[str, Any]],
) -> None:
    init(git_repo)
    gh = GitHubServer(httpserver)
    gh.pages["/repos/octo/widgets/issues"] = [[issue(1, "2026-01-01T00:00:00Z", ("oms:ready",))]]
    env = {"GITHUB_TOKEN": TOKEN, "OMS_GITHUB_API_URL": gh.url}
    args = ["events", "sync", "github", "--repo", "octo/widgets", "--dir", str(git_repo)]
    proc = run_oms([*args, "--json"], env_extra=env)
    data = parse_json(proc)
    assert proc.returncode == 0, proc.stderr
    assert KEYS <= set(data) and data["ok"] is True and data["repo"] == "octo/widgets"
    assert data["events_new"] == 2 and len(data["tickets"]) == 1
    assert data["notification"].startswith("n-")
    assert gh.requests[0][3] == f"Bearer {TOKEN}"  # the token was used, from the environment

    spent = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1900000123"}
    gh.fail["/repos/octo/widgets/issues"] = (1, 403, spent)
    gh.pages["/repos/octo/widgets/issues"][0].append(issue(2, "2026-01-02T00:00:00Z"))
    limited = run_oms([*args, "--json"], env_extra=env)
    refused = parse_json(limited)
    assert limited.returncode == 4 and refused["ok"] is False
    assert refused["rate"] == {"remaining": 0, "reset": 1_900_000_123}
    assert "1900000123" in refused["error"]["message"]
    human = run_oms(args, env_extra=env)
    assert human.returncode == 4 and "1900000123" in human.stderr

    for text in (proc.stdout, proc.stderr, limited.stdout, limited.stderr, human.stderr):
        assert TOKEN not in text
    for f in oms_home.rglob("*"):
        if f.is_file():
            assert TOKEN.encode() not in f.read_bytes(), f


def test_a_second_sync_while_one_runs_refuses_at_once_with_exit_4(
    git_repo: Path,
    oms_home: Path,
    httpserver: HTTPServer,
    run_oms: RunOms,
    parse_json: Callable[[subprocess.CompletedProcess[str]], dict[str, Any]],
) -> None:
    """cron starts a sync while the last one still waits on GitHub: the second takes the
    repository's sync lock without waiting, fails, and says so in one line; the first
    goes on and finishes; the lock is free after it."""
    init(git_repo)
    gh = GitHubServer(httpserver)
    gh.pages["/repos/octo/widgets/issues"] = [[issue(1, "2026-01-01T00:00:00Z")]]
    gh.stall["/repos/octo/widgets/issues"] = 1
    env = {"GITHUB_TOKEN": TOKEN, "OMS_GITHUB_API_URL": gh.url}
    args = ["events", "sync", "github", "--repo", "octo/widgets", "--dir", str(git_repo), "--json"]
    first: list[subprocess.CompletedProcess[str]] = []
    runner = threading.Thread(target=lambda: first.append(run_oms(args, env_extra=env)))
    runner.start()
    try:
        assert gh.stalled.wait(60), "the first sync never reached GitHub"
        second = run_oms(args, env_extra=env)
        refused = parse_json(second)
        assert second.returncode == 4 and refused["ok"] is False
        assert refused["error"]["kind"] == "unavailable"
        assert "another `oms events sync github` is running" in refused["error"]["message"]
        assert "\n" not in refused["error"]["message"]
        assert [pg for path, pg, *_ in gh.requests] == [1]  # the second asked GitHub nothing
    finally:
        gh.release.set()
        runner.join(120)
    assert first[0].returncode == 0 and parse_json(first[0])["events_new"] == 1
    del gh.stall["/repos/octo/widgets/issues"]
    after = run_oms(args, env_extra=env)
    assert after.returncode == 0, after.stderr
