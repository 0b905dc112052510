"""`sync_github`, in-process, against a GitHub-shaped local server.

GitHub itself cannot be reached here, so a pytest-httpserver on loopback
(`support.github_server`) serves GitHub-shaped pages: ETags and 304s, rate-limit headers,
`Link: rel="next"` pagination, 5xx at a chosen page. "Nothing written" is the whole of
work.db and the evidence log, compared before and after (`support.work.snapshot`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from support.github_server import GitHubServer, issue, label_event
from support.repos import commit_policy, git, make_repo
from support.work import snapshot, tamper_db

from gatekeeper.gates.records import init
from gatekeeper.work.events import sync
from gatekeeper.work.events.outbox import TypedEvent
from gatekeeper.work.events.sync import resolve_repo, sync_github
from gatekeeper.work.fence import Work
from gatekeeper.work.github import GitHubUnavailable, RateLimited, TooSlow

R = "octo/widgets"
ROOT = f"/repos/{R}"
TOKEN = "ghp_test_token_never_shown_0123456789"
SHA = "c" * 40
T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z"


@pytest.fixture
def repo(git_repo: Path, oms_home: Path) -> Path:
    init(git_repo)
    return git_repo


@pytest.fixture
def gh(httpserver: HTTPServer) -> Iterator[GitHubServer]:
    server = GitHubServer(httpserver)
    yield server
    server.release.set()  # a stalled page answers (to no one) and frees the server


def state(repo: Path) -> Any:
    work = Work.open(repo)
    try:
        return snapshot(work)
    finally:
        work.close()


def rows(repo: Path, sql: str, *args: object) -> list[Any]:
    work = Work.open(repo)
    try:
        return [tuple(r) for r in work.db.read(sql, *args)]
    finally:
        work.close()


def run(repo: Path, gh: GitHubServer) -> dict[str, Any]:
    return sync_github(repo, R, api_url=gh.url, token=TOKEN)


def serve_all(gh: GitHubServer) -> None:
    """Every endpoint oms reads, with one or two items each; issue 1 is ready."""
    gh.pages[f"{ROOT}/issues"] = [
        [issue(1, T1, ("oms:ready",), title="Fix \x1b[31mit\nnow $(rm -rf ~)", body="Do X.\n"),
         issue(2, T0, ("bug",))],
        [{**issue(3, T0), "pull_request": {}}],  # a PR in /issues: left to /pulls
    ]  # fmt: skip
    gh.pages[f"{ROOT}/issues/events"] = [[label_event(11, 1, "oms:ready", True, T1)]]
    gh.pages[f"{ROOT}/issues/comments"] = [[
        {"id": 21, "issue_url": f"https://x/{ROOT}/issues/1", "body": "secret comment text",
         "created_at": T0, "updated_at": T1}]]  # fmt: skip
    gh.pages[f"{ROOT}/pulls"] = [[
        {"id": 31, "number": 3, "state": "open", "draft": True, "title": "PR title text",
         "head": {"ref": "feature", "sha": SHA}, "base": {"ref": "main", "sha": "d" * 40},
         "updated_at": T1}]]  # fmt: skip
    gh.pages[f"{ROOT}/branches"] = [[{"name": "main", "commit": {"sha": SHA}, "protected": True}]]
    gh.pages[f"{ROOT}/pulls/3/reviews"] = [[
        {"id": 41, "state": "APPROVED", "commit_id": SHA, "body": "LGTM text",
         "submitted_at": T1}]]  # fmt: skip
    check = {"id": 51, "status": "completed", "conclusion": "success", "completed_at": T1}
    gh.pages[f"{ROOT}/commits/{SHA}/check-runs"] = [{"total_count": 1, "check_runs": [check]}]


def test_one_sync_writes_each_page_before_asking_for_the_next_and_makes_one_ready_ticket(
    repo: Path, gh: GitHubServer, oms_home: Path
) -> None:
    serve_all(gh)
    head = state(repo)[1]
    got = run(repo, gh)
    kinds = dict(rows(repo, "SELECT kind, COUNT(*) FROM events GROUP BY kind"))
    assert kinds == {
        "gh.issue": 3,
        "gh.label": 1,
        "gh.comment": 1,
        "gh.pr": 1,
        "gh.branch": 1,
        "gh.review": 1,
        "gh.check": 1,
        "work.ticket": 1,
    }  # 2 issues + ready marker; the ready issue's ticket
    assert got["events_new"] == 9 and got["events_seen"] == 8 and got["not_modified"] == 0
    assert got["requests"] == 8 and got["rate"] == {"remaining": 4999, "reset": 1_900_000_000}
    assert len(got["tickets"]) == 1 and got["notification"].startswith("n-")
    # /issues has two pages: page 1 is one batch, written before page 2 is asked for; the
    # one-page listings after it are one more. Then the standing goal and the ticket.
    work = Work.open(repo)
    try:
        kinds_logged = [work.store.entry(s).kind for s in range(head, work.store.head())]
        assert kinds_logged == ["work.events", "work.events", "work.goal.create",
                                "work.ticket.add"]  # fmt: skip
        batches = []
        for seq, notified in zip((head, head + 1), got["notifications"], strict=True):
            entry = work.store.entry(seq)
            payload = entry.data
            assert entry.blobs[0] == payload["detail"]["batch_blob"][7:]
            batches.append(json.loads(work.store.blobs.get(payload["detail"]["batch_blob"][7:])))
            assert payload["id"] == notified and batches[-1]["repo"] == R
        assert [len(b["events"]) for b in batches] == [3, 6]
        assert got["notification"] == got["notifications"][-1]
        # The watermarks move with the batch after their listing is read through.
        assert list(batches[0]["watermarks"]) == []
        assert len(batches[1]["watermarks"]) == 5
        listed = work.db.read("SELECT id, events, state FROM batches ORDER BY seq")
        assert [sorted(json.loads(r["events"])) for r in listed] == [
            *(sorted(e["key"] for e in b["events"]) for b in batches),
            [f"work:ticket:{got['tickets'][0]}"],
        ]
        assert {r["state"] for r in listed} == {"pending"}
        # The ticket told the conductor in its own transaction, after the projection's
        # batches: a waiter they woke before the ticket existed is woken again by it.
        assert [r["id"] for r in listed][:2] == got["notifications"]
        assert listed[-1]["id"] not in got["notifications"]
        (told,) = rows(repo, "SELECT body FROM events WHERE key = ?",
                       f"work:ticket:{got['tickets'][0]}")  # fmt: skip
        assert json.loads(told[0]) == {"ticket": got["tickets"][0], "state": "pending",
                                       "goal": work.ticket(got["tickets"][0]).goal}  # fmt: skip
        ticket = work.ticket(got["tickets"][0])
        assert ticket.state == "pending"
        assert ticket.title == "#1 Fix \\u001b[31mit\\u000anow $(rm -rf ~)"
        assert work.store.blobs.get(ticket.body.blob[7:]) == b"Do X.\n"
        marks = {r["source"]: r["cursor"] for r in work.db.read("SELECT * FROM watermarks")}
        assert marks[f"github:{R}:issues"] == T1 and len(marks) == 5
    finally:
        work.close()
    # Untrusted text is not in any event, nor in the log; the token is nowhere at all.
    bodies = " ".join(b for (b,) in rows(repo, "SELECT body FROM events"))
    for text in ("Fix", "Do X", "secret comment", "PR title", "LGTM"):
        assert text not in bodies
    assert all(auth == f"Bearer {TOKEN}" for *_, auth in gh.requests)
    for f in oms_home.rglob("*"):
        if f.is_file():
            assert TOKEN.encode() not in f.read_bytes(), f
    assert TOKEN not in json.dumps(got)


def test_a_resync_of_the_same_pages_is_all_304_and_writes_nothing(
    repo: Path, gh: GitHubServer
) -> None:
    serve_all(gh)
    run(repo, gh)
    before = state(repo)
    got = run(repo, gh)
    assert state(repo) == before
    assert got["not_modified"] == 5 and got["requests"] == 5
    assert got["events_new"] == 0 and got["tickets"] == [] and got["notification"] is None
    etags = [tag for path, _, tag, _ in gh.requests[-5:]]
    assert all(tag and tag.startswith('"') for tag in etags)


def test_a_resync_that_gets_200s_with_nothing_new_writes_nothing(
    repo: Path, gh: GitHubServer
) -> None:
    serve_all(gh)
    run(repo, gh)
    before = state(repo)
    gh.pages[f"{ROOT}/issues"][0].append(issue(2, T0, ("bug",)))  # a new ETag, same facts
    got = run(repo, gh)
    assert got["not_modified"] == 4 and got["events_new"] == 0 and state(repo) == before


def test_pagination_is_followed_to_the_stored_cursor(repo: Path, gh: GitHubServer) -> None:
    gh.pages[f"{ROOT}/issues"] = [[issue(n, T1) for n in range(1, 4)],
                                  [issue(n, T1) for n in range(4, 7)],
                                  [issue(n, T0) for n in range(7, 10)]]  # fmt: skip
    assert run(repo, gh)["events_new"] == 9
    assert [pg for path, pg, *_ in gh.requests if path == f"{ROOT}/issues"] == [1, 2, 3]
    # Issue 1 is updated: page 1 changes; page 2 holds the cursor (T1 >= T1) ... page 3's
    # T0 items are older than the cursor, so paging stops there.
    gh.pages[f"{ROOT}/issues"][0][0] = issue(1, T2)
    gh.requests.clear()
    got = run(repo, gh)
    assert got["events_new"] == 1
    assert [pg for path, pg, *_ in gh.requests if path == f"{ROOT}/issues"] == [1, 2, 3]
    gh.pages[f"{ROOT}/issues"] = [[issue(1, T2), issue(7, T0)], [issue(8, T0)]]
    gh.pages[f"{ROOT}/issues"][0][0] = issue(2, "2026-01-04T00:00:00Z")
    gh.requests.clear()
    run(repo, gh)
    assert [pg for path, pg, *_ in gh.requests if path == f"{ROOT}/issues"] == [1]


def sources(repo: Path) -> set[str]:
    """The listings whose watermark is stored (by source name)."""
    return {src.rsplit(":", 1)[1] for (src,) in rows(repo, "SELECT source FROM watermarks")}


def numbers(repo: Path) -> list[int]:
    got = rows(repo, "SELECT json_extract(body, '$.number') FROM events WHERE kind = 'gh.issue'")
    return sorted(n for (n,) in got)


def test_a_link_to_another_origin_is_not_followed_and_moves_no_watermark(
    repo: Path, gh: GitHubServer
) -> None:
    other = HTTPServer(host="127.0.0.1", port=0)
    other.start()
    try:
        gh.next_origin = other.url_for("/").rstrip("/")
        gh.pages[f"{ROOT}/issues"] = [[issue(1, T1)], [issue(2, T1)]]
        with pytest.raises(GitHubUnavailable, match="outside its API root"):
            run(repo, gh)
        assert other.log == []
        assert [pg for path, pg, *_ in gh.requests if path == f"{ROOT}/issues"] == [1]
        assert numbers(repo) == [1] and sources(repo) == set()  # page 1 kept, as it came
    finally:
        other.stop()


def test_a_5xx_mid_pagination_keeps_the_pages_before_and_the_next_sync_starts_over(
    repo: Path, gh: GitHubServer
) -> None:
    gh.pages[f"{ROOT}/issues"] = [[issue(1, T1)], [issue(2, T1)], [issue(3, T0)]]
    gh.fail[f"{ROOT}/issues"] = (2, 502, {})
    with pytest.raises(GitHubUnavailable, match="502"):
        run(repo, gh)
    assert numbers(repo) == [1] and sources(repo) == set()
    del gh.fail[f"{ROOT}/issues"]
    gh.requests.clear()
    assert run(repo, gh)["events_new"] == 2  # page 1 again (no watermark had moved), then on
    assert [pg for path, pg, *_ in gh.requests if path == f"{ROOT}/issues"] == [1, 2, 3]
    assert numbers(repo) == [1, 2, 3] and "issues" in sources(repo)


@pytest.mark.parametrize("status,headers", [
    (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1900000777"}),
    (429, {"retry-after": "60", "x-ratelimit-reset": "1900000777"}),
])  # fmt: skip
@pytest.mark.parametrize("page", [1, 2])
def test_a_rate_limit_at_any_page_says_when_it_resets_and_moves_no_watermark_of_its_listing(
    repo: Path, gh: GitHubServer, status: int, headers: dict[str, str], page: int
) -> None:
    serve_all(gh)
    gh.pages[f"{ROOT}/issues"] = [gh.pages[f"{ROOT}/issues"][0]]
    gh.pages[f"{ROOT}/pulls"].append([])
    gh.fail[f"{ROOT}/pulls"] = (page, status, headers)
    before = state(repo)
    with pytest.raises(RateLimited, match="1900000777") as raised:
        run(repo, gh)
    assert raised.value.reset == 1_900_000_777 and raised.value.exit_code == 4
    assert raised.value.data == {"rate": {"remaining": 0, "reset": 1_900_000_777}}
    if page == 1:  # every listing before it was one page, pending: nothing was written
        assert state(repo) == before
    else:  # page 1 of /pulls was written (with the listings read through before it)
        assert sources(repo) == {"issues", "issue-events", "comments"}
    del gh.fail[f"{ROOT}/pulls"]
    run(repo, gh)
    assert sources(repo) == {"issues", "issue-events", "comments", "pulls", "branches"}
    assert rows(repo, "SELECT COUNT(*) FROM events WHERE kind IN ('gh.pr', 'gh.review', "
                      "'gh.check', 'gh.branch')") == [(4,)]  # fmt: skip


def test_label_removed_then_re_added_is_two_events_and_still_one_ticket(
    repo: Path, gh: GitHubServer
) -> None:
    gh.pages[f"{ROOT}/issues"] = [[issue(5, T0, ("oms:ready",))]]
    gh.pages[f"{ROOT}/issues/events"] = [[label_event(60, 5, "oms:ready", True, T0)]]
    first = run(repo, gh)
    assert len(first["tickets"]) == 1
    # Removed (the issue is no longer ready), then re-added: both are new label events.
    gh.pages[f"{ROOT}/issues"] = [[issue(5, T1)]]
    gh.pages[f"{ROOT}/issues/events"] = [[label_event(61, 5, "oms:ready", False, T1),
                                          label_event(60, 5, "oms:ready", True, T0)]]  # fmt: skip
    assert run(repo, gh)["tickets"] == []
    gh.pages[f"{ROOT}/issues"] = [[issue(5, T2, ("oms:ready",))]]
    gh.pages[f"{ROOT}/issues/events"] = [[label_event(62, 5, "oms:ready", True, T2),
                                          label_event(61, 5, "oms:ready", False, T1)]]  # fmt: skip
    again = run(repo, gh)
    assert again["tickets"] == [] and again["events_new"] == 2  # the issue and the re-add
    labels = rows(repo, "SELECT json_extract(body, '$.action') FROM events WHERE kind = "
                        "'gh.label' ORDER BY json_extract(body, '$.id')")  # fmt: skip
    assert [a for (a,) in labels] == ["added", "removed", "added"]
    assert rows(repo, "SELECT COUNT(*) FROM tickets") == [(1,)]
    assert rows(repo, "SELECT COUNT(*) FROM goals") == [(1,)]


class Crash(Exception):
    """Stands for the process dying after the projection, before the ticket is made."""


def test_a_crash_before_the_ticket_is_made_makes_it_exactly_once_later(
    repo: Path, gh: GitHubServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    gh.pages[f"{ROOT}/issues"] = [[issue(7, T0, ("oms:ready",)), issue(8, T0, ("oms:ready",))]]
    real = sync.materialise

    def crash(work: Work, repo_name: str) -> list[str]:
        raise Crash

    monkeypatch.setattr(sync, "materialise", crash)
    with pytest.raises(Crash):
        run(repo, gh)
    assert rows(repo, "SELECT COUNT(*) FROM tickets") == [(0,)]
    monkeypatch.setattr(sync, "materialise", real)
    got = run(repo, gh)  # all 304: the markers are in the store, the tickets are not yet
    assert got["not_modified"] == 5 and len(got["tickets"]) == 2
    before = state(repo)
    assert run(repo, gh)["tickets"] == [] and state(repo) == before
    titles = sorted(t for (t,) in rows(repo, "SELECT title FROM tickets"))
    assert titles == ["#7 An issue", "#8 An issue"]


def test_the_repository_comes_from_policy_else_a_github_origin_else_refused(
    repo: Path, oms_env: dict[str, str]
) -> None:
    work = Work.open(repo)
    try:
        with pytest.raises(Exception, match="no GitHub repository"):
            resolve_repo(work, None)
        assert resolve_repo(work, "a/b") == "a/b"
        with pytest.raises(Exception, match="not a GitHub repository"):
            resolve_repo(work, "../x")
        git(repo, "remote", "add", "origin", "git@github.com:octo/gadgets.git", env=oms_env)
        assert resolve_repo(work, None) == "octo/gadgets"
        git(repo, "remote", "set-url", "origin", "https://example.com/octo/gadgets", env=oms_env)
        with pytest.raises(Exception, match="no GitHub repository"):
            resolve_repo(work, None)
    finally:
        work.close()


def test_a_projection_of_events_another_sync_stored_meanwhile_writes_nothing(
    repo: Path, gh: GitHubServer
) -> None:
    gh.pages[f"{ROOT}/issues"] = [[issue(1, T0), issue(2, T0)]]
    run(repo, gh)
    before = state(repo)
    work = Work.open(repo)
    try:
        (row,) = work.db.read("SELECT key, kind, body FROM events WHERE key LIKE '%issue:1@%'")
        stored = TypedEvent(row["key"], row["kind"], json.loads(row["body"]))
        # As a sync that fetched before the other committed: its "fresh" events are stored.
        assert sync._project(work, R, [stored], {}, [], 1) == (None, 0)
        changed = TypedEvent(stored.key, stored.kind, dict(stored.body, number=99))
        assert sync._project(work, R, [changed], {}, [], 1) == (None, 0)  # same key: stored
    finally:
        work.close()
    assert state(repo) == before


def test_policy_names_the_repository_and_the_ready_label(
    tmp_path: Path, oms_env: dict[str, str], oms_home: Path, gh: GitHubServer
) -> None:
    pol = 'version = 1\n[conductor]\ngithub_repo = "octo/widgets"\nready_label = "go"\n'
    repo = make_repo(tmp_path / "configured", {"oms.toml": pol}, env=oms_env)
    init(repo)
    gh.pages[f"{ROOT}/issues"] = [[issue(1, T0, ("oms:ready",)), issue(2, T0, ("go",))]]
    got = sync_github(repo, None, api_url=gh.url, token=TOKEN)
    assert got["repo"] == R and len(got["tickets"]) == 1
    assert rows(repo, "SELECT title FROM tickets") == [("#2 An issue",)]
    work = Work.open(repo)
    try:
        assert resolve_repo(work, "other/repo") == "other/repo"  # the argument comes first
    finally:
        work.close()


WATERMARK = "SELECT etag, cursor, version FROM watermarks WHERE source = ?"


def test_a_watermark_moved_by_a_later_sync_is_not_set_back(repo: Path, gh: GitHubServer) -> None:
    gh.pages[f"{ROOT}/issues"] = [[issue(1, T1)]]
    run(repo, gh)
    source = f"github:{R}:issues"
    want = rows(repo, WATERMARK, source)
    assert want[0][1:] == (T1, 1)
    late = TypedEvent(f"gh:{R}:issue:9@{T0}", "gh.issue", {"number": 9})
    work = Work.open(repo)
    try:  # a sync that read the watermarks before the first one committed (none there yet)
        assert sync._project(work, R, [late], {source: ('"old"', T0, None)}, [], 1)[1] == 1
        assert work.db.read("SELECT COUNT(*) AS n FROM events WHERE key = ?", late.key)[0]["n"]
        got = [tuple(r) for r in work.db.read(WATERMARK, source)]
        assert got == want
        newer = TypedEvent(f"gh:{R}:issue:10@{T2}", "gh.issue", {"number": 10})
        sync._project(work, R, [newer], {source: ('"new"', T2, 1)}, [], 1)
        got = [tuple(r) for r in work.db.read(WATERMARK, source)]
        assert got == [('"new"', T2, 2)]
    finally:
        work.close()


def test_odd_items_are_skipped_or_cleaned_never_stopping_the_sync(
    repo: Path, gh: GitHubServer
) -> None:
    """GitHub data oms cannot record as it is: a lone surrogate in an issue's text (replaced
    in the ticket's blob), a `number` that is a bool or out of range (no ticket, never
    issue #1's), a label name far too long (bounded by the projection). The sync goes on and
    records the rest; the next sync is not stuck on them."""
    odd = issue(1, T0, ("oms:ready",), title="odd \ud800 title", body="text \udfff")
    as_bool = {**issue(2, T0, ("oms:ready",)), "number": True}
    too_big = {**issue(3, T0, ("oms:ready",)), "number": 2**70}
    huge = issue(4, T0, ("x" * 9000,))
    gh.pages[f"{ROOT}/issues"] = [[odd, as_bool, too_big, huge]]
    got = run(repo, gh)
    assert len(got["tickets"]) == 1 and got["events_skipped"] == 0
    [(title,)] = rows(repo, "SELECT title FROM tickets")
    assert title.startswith("#1 odd ") and "title" in title
    again = run(repo, gh)  # not stuck: the same pages again change nothing
    assert again["events_new"] == 0 and again["tickets"] == []


def test_a_branch_moved_past_the_first_page_is_seen(repo: Path, gh: GitHubServer) -> None:
    """Branches are listed by name, not newest first: page 1 unchanged says nothing of
    page 2, so a listing of more than one page is read again and the move is an event."""

    def branch(name: str, sha: str) -> dict[str, Any]:
        return {"name": name, "commit": {"sha": sha}, "protected": False}

    gh.pages[f"{ROOT}/branches"] = [[branch("a", "1" * 40)], [branch("z", "2" * 40)]]
    run(repo, gh)
    gh.pages[f"{ROOT}/branches"] = [[branch("a", "1" * 40)], [branch("z", "3" * 40)]]
    got = run(repo, gh)
    assert got["events_new"] == 1
    shas = [json.loads(b)["sha"] for (b,) in rows(repo, "SELECT body FROM events WHERE kind = "
                                                       "'gh.branch' ORDER BY created")]  # fmt: skip
    assert "3" * 40 in shas


def test_a_long_listing_is_written_page_by_page_and_an_interruption_keeps_the_pages_before(
    repo: Path, gh: GitHubServer
) -> None:
    """Five pages of 100 issues, and page 4 fails: pages 1-3 are in the store, one batch
    each (never more than a page is held before it is written), and no watermark moved; the
    next sync reads the listing again from page 1 and writes only what is new."""
    per = sync.PER_PAGE
    gh.pages[f"{ROOT}/issues"] = [[issue(p * per + n + 1, T1) for n in range(per)]
                                  for p in range(5)]  # fmt: skip
    gh.fail[f"{ROOT}/issues"] = (4, 502, {})
    head = state(repo)[1]
    with pytest.raises(GitHubUnavailable, match="502"):
        run(repo, gh)
    assert numbers(repo) == list(range(1, 3 * per + 1)) and sources(repo) == set()
    work = Work.open(repo)
    try:
        entries = [work.store.entry(s) for s in range(head, work.store.head())]
        sizes = [e.data["detail"]["events_new"] for e in entries]
    finally:
        work.close()
    assert [e.kind for e in entries] == ["work.events"] * 3 and sizes == [per, per, per]
    del gh.fail[f"{ROOT}/issues"]
    got = run(repo, gh)
    assert got["events_new"] == 2 * per and len(got["notifications"]) == 2
    assert numbers(repo) == list(range(1, 5 * per + 1)) and "issues" in sources(repo)


def test_a_sync_that_overruns_its_deadline_is_cut_and_keeps_what_it_wrote(
    tmp_path: Path, oms_env: dict[str, str], oms_home: Path, gh: GitHubServer
) -> None:
    """`[conductor] github_sync_timeout_s` bounds every answer of one sync: page 3 never
    comes (it waits until the test ends), each answer is far within its own 60 s, and the
    sync is cut at its end with pages 1-2 kept and no watermark moved."""
    pol = "version = 1\n[conductor]\ngithub_sync_timeout_s = 5\n"
    repo = make_repo(tmp_path / "timed", {"oms.toml": pol}, env=oms_env)
    init(repo)
    gh.pages[f"{ROOT}/issues"] = [[issue(1, T1)], [issue(2, T1)], [issue(3, T0)]]
    gh.stall[f"{ROOT}/issues"] = 3
    with pytest.raises(TooSlow, match=f"sync ran past its deadline at GET {ROOT}/issues"):
        run(repo, gh)
    assert gh.stalled.is_set() and numbers(repo) == [1, 2] and sources(repo) == set()
    gh.release.set()
    del gh.stall[f"{ROOT}/issues"]
    assert run(repo, gh)["events_new"] == 1 and numbers(repo) == [1, 2, 3]


def mapped_policy(goals: dict[str, str]) -> str:
    lines = "".join(f'"{label}" = "{goal}"\n' for label, goal in goals.items())
    return f'version = 1\n[conductor]\ngithub_repo = "{R}"\n[conductor.goal_labels]\n{lines}'


def test_a_label_the_policy_maps_puts_the_ticket_in_that_goal_and_issue_text_never_does(
    tmp_path: Path, oms_env: dict[str, str], oms_home: Path, gh: GitHubServer
) -> None:
    """Only `[conductor] goal_labels` on the default branch's trusted policy names a goal:
    a goal id in an issue's title or body does nothing, a mapped label whose goal is
    missing or ambiguous leaves the ticket in the standing goal with the reason recorded."""
    repo = make_repo(tmp_path / "mapped", {"oms.toml": "version = 1\n"}, env=oms_env)
    init(repo)
    work = Work.open(repo)
    try:
        human = work.create_goal("the frontend", "when it ships", "until-empty", "nonce-h1").id
        other = work.create_goal("the backend", "when it ships", "until-empty", "nonce-h2").id
    finally:
        work.close()
    ghost = "g-000000000000"
    text = mapped_policy({"frontend": human, "backend": other, "ghost": ghost})
    commit_policy(repo, env=oms_env, text=text)
    gh.pages[f"{ROOT}/issues"] = [[
        issue(1, T0, ("oms:ready", "frontend")),
        issue(2, T0, ("oms:ready",), title=f"belongs to {human}", body=f"goal = {human}\n"),
        issue(3, T0, ("oms:ready", "ghost")),
        issue(4, T0, ("oms:ready", "frontend", "backend")),
        issue(5, T0, ("frontend",)),  # not ready: no ticket at all
    ]]  # fmt: skip
    got = sync_github(repo, None, api_url=gh.url, token=TOKEN)
    placed = {int(rows(repo, "SELECT title FROM tickets WHERE id = ?", p["ticket"])[0][0][1]): p
              for p in got["placed"]}  # fmt: skip
    assert sorted(placed) == [1, 2, 3, 4] and got["tickets"] == [p["ticket"] for p in got["placed"]]
    assert (placed[1]["goal"], placed[1]["label"], placed[1]["reason"]) == (human, "frontend", None)
    standing = placed[2]["goal"]
    assert standing not in (human, other)
    assert (placed[2]["label"], placed[2]["reason"]) == (None, None)  # its text named a goal
    assert placed[3]["goal"] == standing
    assert placed[3]["reason"] == f"goal {ghost} of label ghost does not exist"
    assert placed[4]["goal"] == standing
    assert placed[4]["reason"] == "its labels map to more than one goal"
    work = Work.open(repo)
    try:
        assert [t.id for t in work.tickets(goal=human)] == [placed[1]["ticket"]]
        assert work.tickets(goal=other) == []
        details = {}
        for seq in range(work.store.head()):
            e = work.store.entry(seq)
            if e.kind == "work.ticket.add":
                details[e.data["id"]] = e.data["detail"]
        assert details[placed[1]["ticket"]]["label"] == "frontend"
        assert details[placed[3]["ticket"]]["reason"] == placed[3]["reason"]
        assert details[placed[2]["ticket"]]["reason"] is None
    finally:
        work.close()


def test_a_mapped_goal_that_is_not_open_takes_no_ticket(repo: Path) -> None:
    work = Work.open(repo)
    try:
        goal = work.create_goal("done already", "done", "until-empty", "nonce-m1").id
        mapped = work.loaded.policy.model_copy(
            update={"conductor": work.loaded.policy.conductor.model_copy(
                update={"goal_labels": {"ui": goal}})})  # fmt: skip
        work.loaded = dataclasses.replace(work.loaded, policy=mapped)
        assert sync.mapped_goal(work, ["ui", "other"]) == (goal, "ui", None)
        assert sync.mapped_goal(work, ["other"]) == (None, None, None)
        tamper_db(work, "UPDATE goals SET state = 'done' WHERE id = ?", goal)
        assert sync.mapped_goal(work, ["ui"]) == (None, None, f"goal {goal} of label ui is done")
    finally:
        work.close()
