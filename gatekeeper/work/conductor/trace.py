"""`oms trace fixture`: the whole local ticket path on a sample repository, offline.

GitHub-shaped issue -> `oms events sync github` -> a pending ticket -> the conductor bridge's
calls, scripted here in place of a conductor model -> an accepted dispatch -> a worker pane
on a private tmux server running a scripted `command:` executor under `oms agent run` ->
its dispatch-bound receipt -> the result gate and one grade (`process_result`) -> a
non-force push to a bare remote on disk and a draft PR on a loopback GitHub-shaped server
-> READY_FOR_HUMAN, read back.

Non-certifying: every provider is a scripted `command:` role, GitHub is a stand-in
(`trace_github`), and nothing leaves the machine. It all happens under one temporary
directory with its own `$OMS_HOME`, so the user's state is never touched; the temporary
directory and the tmux server are removed at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from gatekeeper.errors import Blocked, Unavailable
from gatekeeper.gates.records import init
from gatekeeper.work.api import opened
from gatekeeper.work.conductor import bridge, sessions
from gatekeeper.work.conductor.tmux import Tmux, session_for, socket_for
from gatekeeper.work.conductor.trace_github import FakeGitHub, bare_head
from gatekeeper.work.events.sync import sync_github
from gatekeeper.work.fence import new_nonce

REPO = "oms-trace/sample"
# Not a credential: the stand-in server accepts any token; the sync needs one to send.
TOKEN = "oms-trace-offline"  # noqa: S105 # nosec B105
PY = "/usr/bin/python3"
WAIT_S = 180.0

EXECUTOR = r"""
import json, os
doc = json.load(open(os.environ["OMS_TASK_FILE"]))
print("executor: start", doc["ticket"])
open("greet.py", "w").write("def greet(name):\n    return 'hello, ' + name\n")
open("test_greet.py", "w").write(
    "import unittest\n\nfrom greet import greet\n\n\nclass T(unittest.TestCase):\n"
    "    def test_greet(self):\n        self.assertEqual(greet('oms'), 'hello, oms')\n")
print("executor: end")
"""
ADVISOR = 'print(\'{"verdict": "approve", "reasons": ["the task matches the ticket"]}\')'
GRADER = 'print(\'{"grade": "pass", "reasons": ["greet and its test"], "confidence": 0.9}\')'


def _role(name: str, authority: str, script: str) -> str:
    return "\n".join([
        f"[roles.{name}]", f'provider = "command:{name}"', 'model = "scripted"',
        'auth = "none"', 'billing = "none"', 'transport = "exec"',
        f'authority = "{authority}"', "unattended = true", "timeout_s = 120", "",
        f"[providers.{name}]", f"cmd = [{json.dumps(PY)}, \"-c\", {json.dumps(script)}]", "",
    ])  # fmt: skip


POLICY = "\n".join([
    "version = 1", "", "[[checks]]", 'name = "unit"',
    f'cmd = [{json.dumps(PY)}, "-m", "unittest", "-q"]', "timeout_s = 120", "",
    "[work]", 'grader = "grader"', "",
    "[conductor]", 'advisor = "advisor"', 'remote = "origin"', f'github_repo = "{REPO}"', "",
    _role("executor", "worktree-write", EXECUTOR), _role("advisor", "read-only", ADVISOR),
    _role("grader", "read-only", GRADER),
])  # fmt: skip
README = "# sample\n\nThe repository `oms trace fixture` makes.\n"


def _git_env(home: Path) -> dict[str, str]:
    """git with no configuration but this: the sample repository is oms' own."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "oms trace", "GIT_AUTHOR_EMAIL": "trace@oms.invalid",
            "GIT_COMMITTER_NAME": "oms trace", "GIT_COMMITTER_EMAIL": "trace@oms.invalid",
            "GIT_TERMINAL_PROMPT": "0"}  # fmt: skip


def _git(env: Mapping[str, str], *args: str, cwd: Path | None = None) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, env=dict(env), capture_output=True,
                          text=True, check=False, timeout=60)  # fmt: skip
    if done.returncode != 0:
        raise Unavailable(f"git {args[0]} failed in the trace's sample repository: "
                          f"{done.stderr.strip()[:200]}")  # fmt: skip
    return done.stdout.strip()


def make_sample(root: Path, env: Mapping[str, str]) -> tuple[Path, Path]:
    """The sample repository (policy, a test) and its bare `origin`, main pushed."""
    repo, origin = root / "sample", root / "origin.git"
    repo.mkdir()
    _git(env, "init", "-q", "-b", "main", str(repo))
    (repo / "oms.toml").write_text(POLICY)
    (repo / "README.md").write_text(README)
    (repo / "test_sample.py").write_text(
        "import unittest\n\n\nclass T(unittest.TestCase):\n"
        "    def test_ok(self):\n        self.assertTrue(True)\n"
    )
    _git(env, "add", "-A", cwd=repo)
    _git(env, "commit", "-q", "-m", "sample", cwd=repo)
    _git(env, "init", "-q", "--bare", str(origin))
    _git(env, "remote", "add", "origin", str(origin), cwd=repo)
    _git(env, "push", "-q", "origin", "main", cwd=repo)
    return repo, origin


@contextlib.contextmanager
def _environment(values: Mapping[str, str | None]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _wait_verifying(repo: Path, ticket: str, deadline: float) -> dict[str, Any]:
    while True:
        with opened(repo) as work:
            t = work.ticket(ticket)
        if t.state != "running" and t.state != "leased":
            return t.to_json()
        if time.monotonic() > deadline:
            raise Unavailable(f"the worker did not file its receipt within {WAIT_S:.0f} s")
        time.sleep(0.5)


def trace_fixture(say: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    """Run the whole path; its JSON. Raises (exit 3/4) at the first step that fails."""
    with tempfile.TemporaryDirectory(prefix="oms-trace-") as tmp:
        root = Path(tmp)
        (root / "home").mkdir()
        env = _git_env(root / "home")
        with _environment({"OMS_HOME": str(root / "oms-home"),
                           "OMS_WORK_DIR": str(root / "agent-work"),
                           "XDG_RUNTIME_DIR": None, "XDG_STATE_HOME": None,
                           "GITHUB_TOKEN": TOKEN, "GH_TOKEN": None}):  # fmt: skip
            repo, origin = make_sample(root, env)
            init(repo)
            say(f"sample repository {repo} with a bare origin {origin}")
            with opened(repo) as work:
                tm = Tmux(socket_for(work.repo.repo_id))
            try:
                with FakeGitHub(REPO, bare_head(str(origin), env)) as gh:
                    os.environ["OMS_GITHUB_API_URL"] = gh.url
                    out = _path(repo, gh, say)
                    out["github_requests"] = len(gh.requests)
                    return out
            finally:
                os.environ.pop("OMS_GITHUB_API_URL", None)
                tm.kill_server()  # the worker panes' server, on the trace's private socket


def _path(repo: Path, gh: FakeGitHub, say: Callable[[str], None]) -> dict[str, Any]:
    gh.add_issue(1, "Add a greeting", "Add greet(name) returning 'hello, <name>', with a test.",
                 ["oms:ready"])  # fmt: skip
    synced = sync_github(repo, REPO, api_url=gh.url, token=TOKEN)
    if len(synced["tickets"]) != 1:
        raise Blocked(f"the sync materialised {len(synced['tickets'])} tickets, not 1")
    ticket = synced["tickets"][0]
    say(f"events sync github: {synced['events_new']} new events, ticket {ticket}, "
        f"notification {synced['notification']}")  # fmt: skip
    with opened(repo) as work:
        goal = work.ticket(ticket).goal
        socket, session = socket_for(work.repo.repo_id), session_for(work.repo.repo_id)
        c = sessions.create(work, str(socket), session, ["oms-trace: a scripted conductor"],
                            new_nonce())  # fmt: skip
        c = sessions.move(work, c.id, c.version, "active", new_nonce())

        def tool(name: str, **args: Any) -> dict[str, Any]:
            got = bridge.call(work, c.id, name, {**args, "nonce": new_nonce()})
            say(f"bridge {name}: {json.dumps(got, sort_keys=True)[:200]}")
            return got

        prepared = tool("prepare_dispatch", goal=goal, ticket=ticket, role="executor",
                        task="Add greet(name) and its unit test, as the ticket says.",
                        notification=synced["notification"])  # fmt: skip
        advised = tool("advise_dispatch", intent=prepared["intent"], digest=prepared["digest"])
        accepted = tool("propose_dispatch", intent=prepared["intent"], digest=prepared["digest"])
        team = tool("start_team", dispatches=[accepted["dispatch"]])
    shown = _wait_verifying(repo, ticket, time.monotonic() + WAIT_S)
    if shown["state"] != "verifying":
        raise Blocked(f"the worker's run left ticket {ticket} {shown['state']}, not verifying")
    say(f"worker receipt: ticket {ticket} is verifying")
    with opened(repo) as work:
        result = bridge.call(work, c.id, "process_result", {"ticket": ticket,
                                                            "nonce": new_nonce()})  # fmt: skip
        say(f"bridge process_result: {json.dumps(result, sort_keys=True)[:200]}")
        delivered = work.db.read("SELECT * FROM deliveries WHERE ticket = ?", ticket)
    if result.get("decision") != "READY_FOR_HUMAN" or result.get("delivery") != "confirmed":
        raise Blocked(f"the ticket ended {result.get('decision')} with delivery "
                      f"{result.get('delivery')}, not READY_FOR_HUMAN and confirmed")  # fmt: skip
    row = delivered[0]
    pr = next((p for p in gh.pulls if p["number"] == row["pr_number"]), None)
    if pr is None or not pr["draft"] or gh.head_of(row["branch"]) != row["commit_sha"]:
        raise Blocked("the read-back does not show the draft PR and branch at the verified commit")
    return {"certifying": False, "ticket": ticket, "goal": goal,
            "conductor": c.id, "intent": prepared["intent"], "advice": advised.get("verdict"),
            "dispatch": accepted["dispatch"], "team": team.get("team"),
            "decision": result["decision"], "commit": row["commit_sha"],
            "branch": row["branch"], "pr": row["pr_number"], "draft": pr["draft"],
            "delivery": row["state"]}  # fmt: skip
