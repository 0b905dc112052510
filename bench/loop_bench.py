"""Loop benchmark: tickets completed per hour of wall time, two workers, and oms' own time
per ticket outside the model calls (issue 31).

The ticket path of `oms trace fixture` (gatekeeper/work/conductor/trace.py), for N tickets:
GitHub-shaped ready issues on the trace's loopback stand-in (GitHub itself is not
reachable here) -> `oms events sync github` -> a scripted conductor driving the bridge
directly (no conductor CLI, no model) -> two worker panes at a time on a private tmux
server, each a scripted `command:` executor under `oms agent run` -> `process_result`
(the result gate: bwrap, Gitleaks, detect-secrets, one scripted grade) -> a push to a
bare remote on disk and a draft PR, read back. Every provider is scripted, so no time is
a model's: what is measured is oms' own.

Per ticket, oms' time in its parts, and how each is measured:
- lease: the `prepare_dispatch` call (lease, intent document), timed;
- dispatch: `advise_dispatch` + `propose_dispatch`, timed (the advice includes the
  scripted advisor's `oms agent run`);
- worker start: the `start_team` call for two dispatches, timed, per worker;
- collect: recorded in work.db, the worker's row created -> its receipt created (its
  `oms agent run`, the scripted executor, the receipt);
- gate: recorded in work.db, the verification created -> finished;
- delivery: the `process_result` call, timed, less the recorded gate span.

Issue 33's goal: oms' time per ticket outside model calls (all parts) <= 1.5x the gate plus
the agent run of the same ticket (the collect part is the worker's `oms agent run`).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from rows import record

from gatekeeper.errors import Blocked
from gatekeeper.gates.records import init
from gatekeeper.work.api import opened
from gatekeeper.work.conductor import bridge, sessions
from gatekeeper.work.conductor.tmux import Tmux, session_for, socket_for
from gatekeeper.work.conductor.trace import (
    REPO,
    TOKEN,
    _environment,
    _git_env,
    make_sample,
)
from gatekeeper.work.conductor.trace_github import FakeGitHub, bare_head
from gatekeeper.work.events.sync import sync_github
from gatekeeper.work.fence import Work, new_nonce

WORKERS = 2
PARTS = ("lease", "dispatch", "worker start", "collect", "gate", "delivery")
WAIT_S = 180.0


def _at(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def _span(work: Work, sql: str, *args: str) -> float:
    (row,) = work.db.read(sql, *args)
    return _at(row["b"]) - _at(row["a"])


def _timed(spent: dict[str, list[float]], part: str, fn: Callable[[], Any]) -> Any:
    t0 = time.perf_counter()
    got = fn()
    spent[part].append(time.perf_counter() - t0)
    return got


def _wave(work: Work, tool: Callable[..., dict[str, Any]], goal: str, tickets: list[str],
          spent: dict[str, list[float]]) -> None:  # fmt: skip
    """Two tickets (at most) through the whole path, their workers side by side."""
    dispatches = []
    for t in tickets:
        prep = _timed(spent, "lease", lambda t=t: tool(
            "prepare_dispatch", goal=goal, ticket=t, role="executor",
            task="Add greet(name) and its unit test."))  # fmt: skip
        t0 = time.perf_counter()
        tool("advise_dispatch", intent=prep["intent"], digest=prep["digest"])
        got = tool("propose_dispatch", intent=prep["intent"], digest=prep["digest"])
        spent["dispatch"].append(time.perf_counter() - t0)
        dispatches.append(got["dispatch"])
    t0 = time.perf_counter()
    tool("start_team", dispatches=dispatches)
    spent["worker start"] += [(time.perf_counter() - t0) / len(dispatches)] * len(dispatches)
    end = time.monotonic() + WAIT_S
    while any(work.ticket(t).state in ("leased", "running") for t in tickets):
        if time.monotonic() > end:
            raise Blocked("a worker filed no receipt in time")
        time.sleep(0.05)
    for t in tickets:
        spent["collect"].append(_span(work, "SELECT w.created AS a, r.created AS b FROM workers "
                                      "w JOIN receipts r ON r.ticket = w.ticket WHERE "
                                      "w.ticket = ?", t))  # fmt: skip
        t0 = time.perf_counter()
        done = tool("process_result", ticket=t)
        took = time.perf_counter() - t0
        if done.get("delivery") != "confirmed":
            raise Blocked(f"ticket {t} ended {done.get('decision')}, {done.get('delivery')}")
        gate = _span(work, "SELECT created AS a, updated AS b FROM verifications WHERE "
                     "ticket = ? AND state = 'finished'", t)  # fmt: skip
        spent["gate"].append(gate)
        spent["delivery"].append(took - gate)


def bench(root: Path, n: int) -> dict[str, Any]:
    env = _git_env(root / "home")
    repo, origin = make_sample(root, env)
    init(repo)
    spent: dict[str, list[float]] = {p: [] for p in PARTS}
    with FakeGitHub(REPO, bare_head(str(origin), env)) as gh:
        os.environ["OMS_GITHUB_API_URL"] = gh.url
        for i in range(1, n + 1):
            gh.add_issue(i, f"Add a greeting {i}", "Add greet(name).", ["oms:ready"])
        t0 = time.perf_counter()
        synced = sync_github(repo, REPO, api_url=gh.url, token=TOKEN)
        tickets = list(synced["tickets"])
        with opened(repo) as work:
            goal = work.ticket(tickets[0]).goal
            socket, session = socket_for(work.repo.repo_id), session_for(work.repo.repo_id)
            c = sessions.create(work, str(socket), session, ["loop bench: a scripted conductor"],
                                new_nonce())  # fmt: skip
            c = sessions.move(work, c.id, c.version, "active", new_nonce())

            def tool(name: str, **args: Any) -> dict[str, Any]:
                return bridge.call(work, c.id, name, {**args, "nonce": new_nonce()})

            try:
                for i in range(0, len(tickets), WORKERS):
                    _wave(work, tool, goal, tickets[i : i + WORKERS], spent)
            finally:
                Tmux(socket).kill_server()
            wall = time.perf_counter() - t0
            done = sum(work.ticket(t).state == "completed" for t in tickets)
    return {"tickets": len(tickets), "completed": done, "wall": wall, "prs": len(gh.pulls),
            "spent": spent}  # fmt: skip


def main() -> int:
    if shutil.which("tmux") is None or not os.access("/usr/bin/bwrap", os.X_OK):
        print("loop bench: skipped (needs tmux and /usr/bin/bwrap)")
        return 0
    n = 2 if "--quick" in sys.argv else 6
    with tempfile.TemporaryDirectory(prefix="oms-bench-", dir=os.environ.get("BENCH_TMP")) as d:
        root = Path(d)
        (root / "home").mkdir()
        with _environment({"OMS_HOME": str(root / "state"), "OMS_WORK_DIR": str(root / "work"),
                           "XDG_RUNTIME_DIR": None, "XDG_STATE_HOME": None,
                           "GITHUB_TOKEN": TOKEN, "GH_TOKEN": None}):  # fmt: skip
            r = bench(root, n)
    per_hour = r["completed"] / r["wall"] * 3600
    print(f"tickets completed per hour, {WORKERS} workers:   {per_hour:7.0f} tickets/h"
          f"   anchor: none yet (issue 33 sets it)   ({r['completed']}/{r['tickets']} "
          f"completed, {r['prs']} draft PRs, {r['wall']:.1f} s wall)")  # fmt: skip
    total = 0.0
    for part in PARTS:
        mean = statistics.fmean(r["spent"][part])
        total += mean
        print(f"  oms per ticket, {part + ':':14s}        {mean:7.2f} s"
              f"   anchor: none yet (max {max(r['spent'][part]):.2f} s)")  # fmt: skip
    anchor = statistics.fmean(r["spent"]["gate"]) + statistics.fmean(r["spent"]["collect"])
    ratio = total / anchor
    print(f"  oms per ticket, all parts:            {total:7.2f} s   {ratio:.2f}x gate + agent"
          f" run ({anchor:.2f} s), goal <= 1.5x (providers scripted: no model time)")  # fmt: skip
    record("oms' time per ticket outside model calls", f"{total:.2f} s",
           f"gate + agent run of the same ticket {anchor:.2f} s", ratio, "<= 1.5x",
           ratio <= 1.5)  # fmt: skip
    return 0 if r["completed"] == r["tickets"] == r["prs"] else 1


if __name__ == "__main__":
    sys.exit(main())
