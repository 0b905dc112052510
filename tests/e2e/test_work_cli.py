"""`oms goal create|status` and `oms ticket add|show|list|lease` through the real CLI: the
`--json` keys issue 16 fixes, the refusals' exit codes with nothing changed, and human output
that shows a hostile title as data (no terminal control, no bidi).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.work import dump

from gatekeeper.work.model import MAX_BODY_BYTES

OmsJson = Callable[..., tuple[int, dict[str, Any]]]
RunOms = Callable[..., subprocess.CompletedProcess[str]]
EXIT_OK, EXIT_USAGE, EXIT_BLOCKED = 0, 2, 3
HOSTILE = "fix \x1b]0;owned\x07 the \x1b[2J build \u202etxt.exe\u2066 now\u200b"


@pytest.fixture
def repo(git_repo: Path, oms_json: OmsJson) -> Path:
    code, out = oms_json(["init", "--repo", git_repo])
    assert code == EXIT_OK, out
    return git_repo


def _goal(oms_json: OmsJson, repo: Path) -> dict[str, Any]:
    code, out = oms_json(["goal", "create", "--repo", repo, "--objective", "ship the thing",
                          "--stop-when", "it shipped", "--horizon", "24h"])  # fmt: skip
    assert code == EXIT_OK, out
    return dict(out["goal"])


def _ticket(oms_json: OmsJson, repo: Path, goal: str, title: str = "a ticket",
            *extra: str | Path) -> dict[str, Any]:  # fmt: skip
    code, out = oms_json(["ticket", "add", "--repo", repo, "--goal", goal, "--title", title,
                          *extra])  # fmt: skip
    assert code == EXIT_OK, out
    return dict(out["ticket"])


def _db(oms_home: Path) -> Path:
    (found,) = oms_home.glob("repos/*/work.db")
    return found


def _log(oms_home: Path) -> bytes:
    (found,) = oms_home.glob("repos/*/evidence/log.jsonl")
    return found.read_bytes()


def test_goal_create_and_status_keys(repo: Path, oms_json: OmsJson) -> None:
    goal = _goal(oms_json, repo)
    assert goal["id"].startswith("g-") and goal["version"] == 1
    assert (goal["objective"], goal["stop_when"], goal["horizon"], goal["state"]) == (
        "ship the thing", "it shipped", "24h", "open")  # fmt: skip
    ticket = _ticket(oms_json, repo, goal["id"])
    code, one = oms_json(["goal", "status", goal["id"], "--repo", repo])
    assert code == EXIT_OK
    assert one["goal"]["id"] == goal["id"] and [t["id"] for t in one["tickets"]] == [ticket["id"]]
    assert one["counts"]["pending"] == 1 and sum(one["counts"].values()) == 1
    code, every = oms_json(["goal", "status", "--repo", repo])
    assert code == EXIT_OK
    assert [(g["id"], g["counts"]["pending"]) for g in every["goals"]] == [(goal["id"], 1)]


def test_goal_status_counts_the_goals_tickets_by_state_for_a_human(
    repo: Path, oms_json: OmsJson, run_oms: RunOms
) -> None:
    goal = _goal(oms_json, repo)
    for title in ("one", "two"):
        _ticket(oms_json, repo, goal["id"], title)
    for args in (["goal", "status", goal["id"]], ["goal", "status"]):
        proc = run_oms([*args, "--repo", str(repo)])
        assert proc.returncode == EXIT_OK, proc.stderr
        (head,) = [line for line in proc.stdout.splitlines() if line.startswith(goal["id"])]
        assert head.endswith("[2 pending]"), head


def test_ticket_add_show_list_keys(repo: Path, oms_json: OmsJson, tmp_path: Path) -> None:
    goal = _goal(oms_json, repo)
    body = tmp_path / "body.md"
    body.write_bytes(b"do this; $(rm -rf /) stays data\n")
    ticket = _ticket(oms_json, repo, goal["id"], "first", "--body-file", body)
    assert ticket["id"].startswith("t-")
    assert (ticket["version"], ticket["state"], ticket["goal"]) == (1, "pending", goal["id"])
    assert ticket["body"]["bytes"] == body.stat().st_size and ticket["human_hold"] is False
    code, shown = oms_json(["ticket", "show", ticket["id"], "--repo", repo])
    assert code == EXIT_OK and shown["ticket"] == ticket
    other = _ticket(oms_json, repo, goal["id"], "second")
    code, listed = oms_json(["ticket", "list", "--repo", repo])
    assert code == EXIT_OK and [t["id"] for t in listed["tickets"]] == [ticket["id"], other["id"]]
    code, _ = oms_json(["ticket", "lease", other["id"], "--repo", repo,
                             "--expected-version", "1", "--nonce", "nonce-list-0001"])  # fmt: skip
    assert code == EXIT_OK
    code, pending = oms_json(["ticket", "list", "--repo", repo, "--state", "pending"])
    assert code == EXIT_OK and [t["id"] for t in pending["tickets"]] == [ticket["id"]]


def test_ticket_lease_keys(repo: Path, oms_json: OmsJson, oms_home: Path) -> None:
    ticket = _ticket(oms_json, repo, _goal(oms_json, repo)["id"])
    code, out = oms_json(["ticket", "lease", ticket["id"], "--repo", repo,
                          "--expected-version", "1", "--nonce", "nonce-lease-0001",
                          "--ttl-s", "120"])  # fmt: skip
    assert code == EXIT_OK, out
    assert set(out["lease"]) == {"token", "expires"}
    assert out["lease"]["token"].startswith("lease-") and out["lease"]["expires"].endswith("Z")
    assert (out["ticket"]["id"], out["ticket"]["state"], out["ticket"]["version"]) == (
        ticket["id"], "leased", 2)  # fmt: skip
    # shown once: show names the lease by its digest, the token is stored nowhere
    code, shown = oms_json(["ticket", "show", ticket["id"], "--repo", repo])
    assert code == EXIT_OK and shown["ticket"]["lease"]["lease"].startswith("sha256:")
    token = out["lease"]["token"]
    assert token not in str(shown) and token.encode() not in _log(oms_home)
    assert token not in repr(dump(_db(oms_home)))


@pytest.mark.parametrize(
    ("args", "says"),
    [(["--expected-version", "7", "--nonce", "nonce-stale-0001"], "is at version 1, not 7"),
     (["--expected-version", "1", "--nonce", "nonce-first-0001"], "was used already")],
)  # fmt: skip
def test_a_refused_lease_is_exit_3_in_one_line_and_changes_nothing(
    repo: Path, oms_json: OmsJson, run_oms: RunOms, oms_home: Path, args: list[str], says: str
) -> None:
    goal = _goal(oms_json, repo)
    first = _ticket(oms_json, repo, goal["id"])
    second = _ticket(oms_json, repo, goal["id"])
    code, _ = oms_json(["ticket", "lease", first["id"], "--repo", repo,
                        "--expected-version", "1", "--nonce", "nonce-first-0001"])  # fmt: skip
    assert code == EXIT_OK
    before = (dump(_db(oms_home)), _log(oms_home))
    code, out = oms_json(["ticket", "lease", second["id"], "--repo", repo, *args])
    assert code == EXIT_BLOCKED, out
    assert out["error"]["kind"] == "blocked" and says in out["error"]["message"]
    assert (dump(_db(oms_home)), _log(oms_home)) == before
    proc = run_oms(["ticket", "lease", second["id"], "--repo", str(repo), *args])
    assert proc.returncode == EXIT_BLOCKED and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr


def test_a_bad_nonce_on_the_cli_is_exit_2(repo: Path, oms_json: OmsJson, oms_home: Path) -> None:
    ticket = _ticket(oms_json, repo, _goal(oms_json, repo)["id"])
    before = (dump(_db(oms_home)), _log(oms_home))
    code, out = oms_json(["ticket", "lease", ticket["id"], "--repo", repo,
                          "--expected-version", "1", "--nonce", "bad nonce"])  # fmt: skip
    assert code == EXIT_USAGE and "not a nonce" in out["error"]["message"]
    assert (dump(_db(oms_home)), _log(oms_home)) == before


def test_human_output_shows_a_hostile_title_as_data(
    repo: Path, oms_json: OmsJson, run_oms: RunOms
) -> None:
    goal = _goal(oms_json, repo)
    ticket = _ticket(oms_json, repo, goal["id"], HOSTILE)
    assert ticket["title"] == HOSTILE  # stored as given, shown neutralised
    for args in (["ticket", "show", ticket["id"]], ["ticket", "list"], ["goal", "status"],
                 ["goal", "status", goal["id"]]):  # fmt: skip
        proc = run_oms([*args, "--repo", str(repo)])
        assert proc.returncode == EXIT_OK, proc.stderr
        for bad in ("\x1b", "\x07", "\u202e", "\u2066", "\u200b"):
            assert bad not in proc.stdout, (args, bad)
        if "goal" not in args or len(args) == 3:
            assert "\\u001b]0;owned\\u0007" in proc.stdout and "\\u202etxt.exe" in proc.stdout


def test_a_body_file_too_large_is_exit_2(
    repo: Path, oms_json: OmsJson, oms_home: Path, tmp_path: Path
) -> None:
    goal = _goal(oms_json, repo)
    big = tmp_path / "big.md"
    big.write_bytes(b"x" * (MAX_BODY_BYTES + 1))
    before = (dump(_db(oms_home)), _log(oms_home))
    code, out = oms_json(["ticket", "add", "--repo", repo, "--goal", goal["id"], "--title", "t",
                          "--body-file", big])  # fmt: skip
    assert code == EXIT_USAGE and "larger than" in out["error"]["message"]
    assert (dump(_db(oms_home)), _log(oms_home)) == before


@pytest.mark.parametrize("which", ["missing", "directory"])
def test_an_unreadable_body_file_is_exit_2(
    repo: Path, oms_json: OmsJson, oms_home: Path, tmp_path: Path, which: str
) -> None:
    goal = _goal(oms_json, repo)
    path = tmp_path / "no-such-body.md"
    if which == "directory":
        path.mkdir()
    before = (dump(_db(oms_home)), _log(oms_home))
    code, out = oms_json(["ticket", "add", "--repo", repo, "--goal", goal["id"], "--title", "t",
                          "--body-file", path])  # fmt: skip
    assert code == EXIT_USAGE, out
    assert (dump(_db(oms_home)), _log(oms_home)) == before
