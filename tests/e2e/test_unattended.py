"""The unattended loop, end to end: a goal's two GitHub tickets become two draft PRs with no
input after the conductor starts, made by the real Claude Code and Codex workers (issue 31).

Real parts: the real Claude Code CLI as the conductor, started by `oms conductor start
--no-attach` on oms' private tmux socket, under the real `oms agent run` (bwrap) with its
bridge relayed over the broker; its SessionStart/Stop hooks running `oms conductor
wait-event`; `oms events sync github` run as the schedule runs it; worker panes running
`oms conductor worker` under `oms agent run`: the real Claude Code CLI, interactive and
unattended (acceptEdits with oms' PreToolUse hook, ended by oms after its receipt), and the
real Codex CLI on `codex exec`, each editing, committing and filing its receipt; the real
result gate (bwrap, Gitleaks, detect-secrets) and grade; a real bare remote on disk; real
git and work.db; the GitHub token in the owner-only `$OMS_HOME/github/token`.

Stand-ins, for what cannot run here: the model providers (tests/support/unattended.py
scripts the answers of the Messages and Responses APIs from each request's content: the
conductor's propose_goal, then, once woken with the dispatchable tickets, prepare (attaching
each to its goal)/advise/propose for each, one start_team, and process_result for each once
a wake line says it is verifying; each worker's one shell call writing start and end
markers and committing), GitHub (the loopback GitHub-shaped server of `oms trace fixture`),
and the scripted advisor and grader (`command:` roles).

A tmux on PATH records every call oms makes to tmux: none types into a pane (send-keys).
Skipped, saying why, without tmux, bwrap or the npm-installed CLI (`make agents`).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import string
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.fake_models import FakeModel
from support.oms import run_oms
from support.repos import git, make_repo
from support.unattended import (
    ConductorScript,
    calls,
    is_conductor,
    messages_fake,
    responses_fake,
    stuck,
    woken,
)

from gatekeeper.gates.records import init
from gatekeeper.work import roles
from gatekeeper.work.conductor.start import confirmed_path
from gatekeeper.work.conductor.tmux import Tmux, socket_for
from gatekeeper.work.conductor.trace_github import FakeGitHub, bare_head
from gatekeeper.work.fence import Work
from gatekeeper.work.github import token_file
from policy.load import parse_policy

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".cache" / "agents" / "node_modules" / ".bin"
PY = "/usr/bin/python3"
TMUX = shutil.which("tmux")
pytestmark = [
    pytest.mark.skipif(
        TMUX is None or not os.access("/usr/bin/bwrap", os.X_OK) or not os.access(PY, os.X_OK),
        reason="needs tmux (Debian: apt-get install tmux), /usr/bin/bwrap and /usr/bin/python3",
    ),
    pytest.mark.skipif(
        not os.access(BIN / "claude", os.X_OK) or not os.access(BIN / "codex", os.X_OK),
        reason="claude or codex is not installed under .cache/agents: run `make agents` "
        "(needs npm)",
    ),
]
GH_REPO = "octo/unattended"
TOKEN = "gh-stand-in-token"  # nosec B105 (the stand-in accepts any token)
WAIT_S = 300.0  # a bound on waiting, never an assertion on time


def _command(name: str, authority: str, script: str) -> str:
    """A scripted `command:` role running `script` with python."""
    return "\n".join([
        f"[roles.{name}]", f'provider = "command:{name}"', 'model = "scripted"',
        'auth = "none"', 'billing = "none"', 'transport = "exec"',
        f'authority = "{authority}"', "unattended = true", "timeout_s = 120", "",
        f"[providers.{name}]", f"cmd = [{json.dumps(PY)}, \"-c\", {json.dumps(script)}]", "",
    ])  # fmt: skip


# The real CLIs as workers, on an API key the broker injects; "none" is true of the fakes.
# (An external role's dispatch needs an approved transfer: this rule approves the
# manifests the test previews for them before the conductor starts.)
WORKERS = """[[transfer.autopilot]]
name = "auto-workers"
destinations = ["claude-code:claude-sonnet-4-5", "codex-cli:gpt-5.5"]
max_bytes = 10000000
context = ["repo"]
require_clean_pushed = false

[roles.claude_worker]
provider = "claude-code"
model = "claude-sonnet-4-5"
auth = "api-key"
billing = "none"
transport = "interactive"
authority = "worktree-write"
unattended = true
timeout_s = 180

[roles.codex_worker]
provider = "codex-cli"
model = "gpt-5.5"
auth = "api-key"
billing = "none"
transport = "exec"
authority = "worktree-write"
unattended = true
timeout_s = 180
"""
ADVISOR = 'print(\'{"verdict": "approve", "reasons": ["the task matches the ticket"]}\')'
GRADER = 'print(\'{"grade": "pass", "reasons": ["the markers"], "confidence": 0.9}\')'


def policy() -> str:
    """The repository's policy: the real Claude Code conductor, the two workers, a scripted
    advisor and grader, one check, and delivery to `origin` as GH_REPO."""
    return "\n".join([
        "version = 1", "", "[[checks]]", 'name = "unit"',
        f'cmd = [{json.dumps(PY)}, "-m", "unittest", "-q"]', "timeout_s = 120", "",
        "[work]", 'grader = "grader"', "",
        "[conductor]", 'advisor = "advisor"', 'remote = "origin"',
        f'github_repo = "{GH_REPO}"', "",
        "[roles.conductor]", 'provider = "claude-code"', 'model = "claude-sonnet-4-5"',
        'auth = "api-key"', 'billing = "none"', 'transport = "interactive"',
        'authority = "read-only"', "",
        WORKERS, "",
        _command("advisor", "read-only", ADVISOR), _command("grader", "read-only", GRADER),
    ])  # fmt: skip


TEST_FILE = ("import unittest\n\n\nclass T(unittest.TestCase):\n"
             "    def test_ok(self):\n        self.assertTrue(True)\n")  # fmt: skip
GOAL = {"objective": "ship the ready GitHub tickets", "stop_when": "both are draft PRs",
        "horizon": "until-empty"}  # fmt: skip
WORKER_ROLES = ("claude_worker", "codex_worker")
DESTINATIONS = ("claude-code:claude-sonnet-4-5", "codex-cli:gpt-5.5")


def until(what: Callable[[], bool], why: str, limit_s: float = WAIT_S) -> None:
    """Poll for `what` (a bound on waiting, never an assertion on time)."""
    end = time.monotonic() + limit_s
    while not what():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {why}")
        time.sleep(0.5)


@dataclass
class Lab:
    work: Work
    repo: Path
    origin: Path
    env: dict[str, str]
    tmux_log: Path


def _shims(where: Path, log: Path) -> Path:
    """`tmux` recording each call oms makes (then the real one)."""
    where.mkdir()
    (where / "tmux").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nexec "{TMUX}" "$@"\n')
    (where / "tmux").chmod(0o755)
    return where


@pytest.fixture
def lab(tmp_path: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Lab]:
    repo = make_repo(tmp_path / "repo", {"oms.toml": policy(), "test_sample.py": TEST_FILE},
                     env=oms_env)  # fmt: skip
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(origin), env=oms_env)
    git(repo, "remote", "add", "origin", str(origin), env=oms_env)
    git(repo, "push", "-q", "origin", "HEAD:main", env=oms_env)
    init(repo)
    runtime = tempfile.mkdtemp(prefix="oms-rt-")  # short: a socket path is at most 107 bytes
    os.chmod(runtime, 0o700)
    log = tmp_path / "tmux-calls.log"
    shims = _shims(tmp_path / "shims", log)
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    monkeypatch.setenv("OMS_WORK_DIR", str(tmp_path / "work"))
    for k, v in oms_env.items():
        if k.startswith(("OMS_", "GIT_")):
            monkeypatch.setenv(k, v)
    monkeypatch.setenv("PATH", os.pathsep.join([str(shims), str(BIN), os.environ["PATH"]]))
    key = "".join(random.choices(string.ascii_letters, k=32))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-" + key)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-" + key)
    # The GitHub token where a schedule and the conductor's bridge read it (its pane's
    # environment carries no *TOKEN* variable): owner-only under $OMS_HOME.
    held = token_file(os.environ)
    held.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    held.write_text(TOKEN + "\n")
    held.chmod(0o600)
    work = Work.open(repo)
    socket = socket_for(work.repo.repo_id)
    try:
        yield Lab(work, repo, origin, dict(os.environ), log)
    finally:
        Tmux(socket).kill_server()
        work.close()
        shutil.rmtree(runtime, ignore_errors=True)


def oms(lab: Lab, *args: str, **extra: str) -> dict[str, object]:
    done = run_oms([*args, "--json"], env={**lab.env, **extra}, cwd=lab.repo, timeout=180)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return dict(json.loads(done.stdout))


def states(work: Work) -> dict[str, str]:
    return {r["id"]: r["state"] for r in work.db.read("SELECT id, state FROM tickets")}


def transfers(lab: Lab) -> tuple[str, ...]:
    """One transfer manifest of the repository per worker role, previewed before the
    conductor starts and approved by the policy's autopilot rule."""
    return tuple(str(oms(lab, "transfer", "preview", "--repo", str(lab.repo), "--to", to,
                         "--purpose", "the worker's ticket", "--context", "repo",
                         "--kind", "cli")["digest"]) for to in DESTINATIONS)  # fmt: skip


def conductor_bodies(fake: FakeModel) -> list[dict[str, Any]]:
    return [b for b in (r.json() for r in fake.model_requests()) if is_conductor(b)]


def not_stuck(fake: FakeModel) -> bool:
    """True; fails at once when a bridge tool refused the conductor's script (the script
    then ends its turn: nothing would ever move)."""
    bodies = conductor_bodies(fake)
    refused = stuck(calls(bodies[-1])) if bodies else None
    if refused is not None:
        told = [o for o in fake.tool_outputs() if refused in o]
        raise AssertionError(f"the bridge refused {refused}: {told[-1:]}")
    return True


def ready_told(fake: FakeModel) -> set[str]:
    """The tickets whose READY_FOR_HUMAN the conductor's own process_result call returned
    to its model."""
    made = [c for b in conductor_bodies(fake) for c in calls(b)]
    return {str(c.args["ticket"]) for c in made if c.name == "process_result" and c.result
            and c.result.get("decision") == "READY_FOR_HUMAN"}  # fmt: skip


def test_two_github_tickets_become_two_draft_prs_with_no_input_after_the_start(lab: Lab) -> None:
    script = ConductorScript(GOAL, WORKER_ROLES, transfers=transfers(lab))
    with messages_fake(script) as claude, responses_fake() as codex, FakeGitHub(
        GH_REPO, bare_head(str(lab.origin), lab.env)
    ) as gh:  # fmt: skip
        gh.add_issue(1, "Add the markers", "Write start and end markers.", ["oms:ready"])
        gh.add_issue(2, "Add them again", "Write start and end markers too.", ["oms:ready"])
        env = {"OMS_EGRESS_UPSTREAM_ANTHROPIC": claude.url,
               "OMS_EGRESS_UPSTREAM_OPENAI": codex.url, "OMS_GITHUB_API_URL": gh.url}  # fmt: skip
        lab.env.update(env)
        confirmed_path(lab.work).write_text("{}")  # confirmed once at a terminal before
        started = oms(lab, "conductor", "start", "--no-attach", "--repo", str(lab.repo))
        # As the schedule runs it: GitHub's ready issues become tickets and a notification.
        synced = oms(lab, "events", "sync", "github", "--dir", str(lab.repo))
        tickets = list(synced["tickets"])  # type: ignore[call-overload]
        assert len(tickets) == 2
        try:
            until(lambda: not_stuck(claude)
                  and all(states(lab.work).get(t) == "completed" for t in tickets)
                  and len(lab.work.db.read("SELECT ticket FROM deliveries WHERE state = "
                                           "'confirmed'")) == 2,
                  "both tickets completed and delivered")  # fmt: skip
            # (and the last process_result's answer reached the conductor's model)
            until(lambda: ready_told(claude) == set(tickets), "the conductor was told both")
        except AssertionError as exc:
            pane = Tmux(str(started["socket"])).capture(str(started["pane"]), 60)
            raise AssertionError(
                f"{exc}; tickets {states(lab.work)}; the conductor's pane:\n{pane}\n"
                f"its last calls: {claude.tool_outputs()[-4:]}"
            ) from None
    for t in tickets:
        (d,) = lab.work.db.read("SELECT * FROM deliveries WHERE ticket = ?", t)
        (v,) = lab.work.db.read("SELECT * FROM verifications WHERE ticket = ? AND state = "
                                "'finished'", t)  # fmt: skip
        assert v["decision"] == "READY_FOR_HUMAN"
        verified = lab.work.dispatch(v["dispatch"]).run
        assert verified is not None and verified.candidate == d["commit_sha"]
        # The draft PR on the stand-in and the branch on the bare remote: the verified commit.
        (pr,) = [p for p in gh.pulls if p["number"] == d["pr_number"]]
        assert pr["draft"] and pr["state"] == "open" and pr["head"]["ref"] == d["branch"]
        assert git(lab.origin, "rev-parse", f"refs/heads/{d['branch']}",
                   env=lab.env).strip() == d["commit_sha"]  # fmt: skip
        # Containment: the worker's contained code ran from start to end, and committed.
        assert git(lab.repo, "show", f"{d['commit_sha']}:start.marker",
                   env=lab.env) == "oms-worker-start\n"  # fmt: skip
        assert git(lab.repo, "show", f"{d['commit_sha']}:end.marker",
                   env=lab.env).startswith("oms-worker-end ")  # fmt: skip
    assert len(gh.pulls) == 2
    # The conductor did it: woken by wait-event with the tickets' ids (never their text), it
    # got each ticket's READY_FOR_HUMAN from its own process_result call.
    mine = conductor_bodies(claude)
    assert any(woken(b) for b in mine), "wait-event never woke the conductor"
    assert ready_told(claude) == set(tickets)
    assert not [b for b in mine if "Add the markers" in json.dumps(b)]
    # The goal the conductor proposed holds both tickets (attached from the standing goal).
    (goal,) = [r["id"] for r in lab.work.db.read("SELECT id FROM goals WHERE objective = ?",
                                                 GOAL["objective"])]  # fmt: skip
    status = oms(lab, "goal", "status", goal)
    assert {k: v for k, v in dict(status["counts"]).items() if v} == {"completed": 2}  # type: ignore[call-overload]
    assert {lab.work.ticket(t).goal for t in tickets} == {goal}
    used = {r["role"] for r in lab.work.db.read("SELECT role FROM dispatches")}
    assert used == set(WORKER_ROLES)
    # Nothing typed at any pane: oms called tmux (the panes were made) and never send-keys.
    made = [c.split() for c in lab.tmux_log.read_text().splitlines()]
    panes = [c for c in made if {"new-window", "new-session"} & set(c)]
    assert len(panes) == 3, panes  # the conductor's and one per worker, all seen here
    assert not [c for c in made if {"send-keys", "send", "paste-buffer"} & set(c)]


def test_the_worker_roles_are_claude_code_and_codex_on_an_api_key() -> None:
    """The workers' roles are valid policy: Claude Code and Codex on an API key (whether
    they may run unattended is the workers' eligibility rule, issue 31)."""
    loaded = parse_policy(policy().encode(), "oms.toml")
    for name, provider in zip(WORKER_ROLES, ("claude-code", "codex-cli"), strict=True):
        role = roles.resolve(loaded, name)
        assert (role.provider, role.auth, role.billing) == (provider, "api-key", "none")
        assert role.authority == "worktree-write"
