"""Events benchmark: GitHub-shaped events synced, deduplicated and projected with evidence.

A loopback HTTP server (`tests/support/github_server.py`: GitHub itself is not reachable
here) serves 100 pages x 100 issues of one repository; one `sync_github` reads them all
(`Link: rel="next"`), records 10,000 typed events in ONE fenced transaction with ONE
`work.events` evidence entry (the batch's canonical JSON as its blob) and one conductor
notification. Measured end to end: HTTP, projection, SQLite, the durable append.
Then two re-syncs of the same pages: one answered 304 (the stored ETag), one answered 200
with the same items (the server ignoring ETags; paging stops at the stored cursor): each
must write nothing — the write count
is the change in evidence entries, events, batches, watermark versions and nonces.

Goal: >= 2000 events/s projected with evidence; 0 writes on a re-sync.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from pytest_httpserver import HTTPServer
from support.github_server import GitHubServer, issue

from gatekeeper.gates.records import init
from gatekeeper.work.events.sync import sync_github
from gatekeeper.work.fence import Work

GOAL = 2000
REPO = "bench/events"


def _repo(tmp: Path) -> Path:
    repo = tmp / "repo"
    repo.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp),
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}  # fmt: skip
    for args in (["init", "-q", "-b", "main"], ["config", "user.name", "bench"],
                 ["config", "user.email", "bench@example.invalid"],
                 ["commit", "-q", "--allow-empty", "-m", "initial"]):  # fmt: skip
        subprocess.run(["git", "-C", str(repo), *args], env=env, check=True, capture_output=True)
    return repo


def writes(repo: Path) -> int:
    """Everything a sync can write, summed: entries, events, batches, watermark versions,
    nonces."""
    work = Work.open(repo)
    try:
        (row,) = work.db.read(
            "SELECT (SELECT COUNT(*) FROM events) + (SELECT COUNT(*) FROM batches) + "
            "(SELECT COALESCE(SUM(version), 0) FROM watermarks) + "
            "(SELECT COUNT(*) FROM nonces) AS n"
        )
        return int(row["n"]) + work.store.head()
    finally:
        work.close()


def bench(tmp: Path, pages: int) -> dict[str, float]:
    repo = _repo(tmp)
    init(repo)
    server = HTTPServer(host="127.0.0.1", port=0)
    server.start()
    try:
        gh = GitHubServer(server)
        gh.pages[f"/repos/{REPO}/issues"] = [
            [issue(p * 100 + i + 1, f"2026-01-01T{p // 60:02d}:{p % 60:02d}:{i % 60:02d}Z",
                   ("bug",)) for i in range(100)]
            for p in reversed(range(pages))
        ]  # fmt: skip
        t0 = time.perf_counter()
        got = sync_github(repo, REPO, api_url=gh.url, token="bench-token")
        elapsed = time.perf_counter() - t0
        assert got["events_new"] == pages * 100, got
        before = writes(repo)
        again = sync_github(repo, REPO, api_url=gh.url, token="bench-token")
        w304 = writes(repo) - before
        gh.etags = False
        t1 = time.perf_counter()
        full = sync_github(repo, REPO, api_url=gh.url, token="bench-token")
        resync_s = time.perf_counter() - t1
        w200 = writes(repo) - before
        assert again["not_modified"] == 5 and full["events_new"] == 0, (again, full)
    finally:
        server.stop()
    return {"events": pages * 100, "requests": got["requests"], "rate": pages * 100 / elapsed,
            "elapsed": elapsed, "w304": w304, "w200": w200, "resync_s": resync_s,
            "resync_requests": full["requests"]}  # fmt: skip


def main() -> int:
    quick = "--quick" in sys.argv
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    with tempfile.TemporaryDirectory(prefix="oms-bench-", dir=os.environ.get("BENCH_TMP")) as d:
        tmp = Path(d)
        os.environ["OMS_HOME"] = str(tmp / "state")
        r = bench(tmp, 20 if quick else 100)
    print(f"github events synced + projected:        {r['rate']:7.0f} events/s"
          f"   goal >= {GOAL} events/s   ({r['events']:.0f} events, {r['requests']:.0f} "
          f"requests, {r['elapsed']:.2f} s, one work.events entry)")  # fmt: skip
    print(f"re-sync, 304s (stored ETags):            {r['w304']:7.0f} writes   must be 0")
    print(f"re-sync, 200s with the same pages:       {r['w200']:7.0f} writes   must be 0"
          f"   ({r['resync_requests']:.0f} requests, {r['resync_s']:.2f} s)")  # fmt: skip
    return 0 if r["w304"] == 0 and r["w200"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
