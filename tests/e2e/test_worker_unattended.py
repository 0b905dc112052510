"""The real Claude Code CLI as an unattended interactive worker: a worker pane on oms'
private tmux socket runs `oms conductor worker`, which runs the real CLI (no `-p`) under
the real `oms agent run` (bwrap), against the loopback fake of the Anthropic Messages API
(a real provider cannot be contacted here; only loopback addresses ever are).

The fake scripts one turn: a Bash call that writes start and end markers in the workspace
and commits them, then the end of the turn. Nobody types anything: oms' PreToolUse hook
inside allows the call, the Stop hook reaches the broker, which sees the commit; with no
tmux client on the pane the worker process ends the CLI, and the run is collected and
settled: the ticket is `verifying` and the receipt's commit holds the markers. With a
human attached (a real `tmux attach` client on a pty) the worker stays after its Stop,
and ends when the client detaches. The hook calls are in the evidence log with the run's
identity. Skipped, saying why, without tmux, bwrap or the CLI (`make agents`).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import string
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from support.conductor import dispatched, tmux_work
from support.fake_models import fake_anthropic
from support.repos import git, make_repo

from gatekeeper.gates.records import init
from gatekeeper.work.conductor import workers
from gatekeeper.work.conductor.tmux import Tmux, session_for, socket_for
from gatekeeper.work.fence import Work, new_nonce
from gatekeeper.work.model import Dispatch

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".cache" / "agents" / "node_modules" / ".bin"
CLAUDE = BIN / "claude"
pytestmark = [
    pytest.mark.skipif(
        shutil.which("tmux") is None or not os.access("/usr/bin/bwrap", os.X_OK),
        reason="needs tmux (Debian: apt-get install tmux) and /usr/bin/bwrap",
    ),
    pytest.mark.skipif(
        not os.access(CLAUDE, os.X_OK),
        reason="claude is not installed under .cache/agents: run `make agents` (needs npm)",
    ),
]
# Interactive Claude Code on an API key the broker injects, marked unattended: eligible
# as a conductor's worker (roles.check with worker_pane). "none" billing: true of the fake.
POLICY = """version = 1

[roles.impl]
provider = "claude-code"
model = "claude-sonnet-4-5"
auth = "api-key"
billing = "none"
transport = "interactive"
authority = "worktree-write"
unattended = true
"""
COMMAND = ("printf 'oms-worker-start\\n' > start.marker && printf 'oms-worker-end\\n' > "
           "end.marker && git add start.marker end.marker && git commit -q -m markers")  # fmt: skip


def until(what: Callable[[], bool], why: str, limit_s: float = 120) -> None:
    """Poll for `what` (a bound on waiting, never an assertion on time)."""
    end = time.monotonic() + limit_s
    while not what():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {why}")
        time.sleep(0.2)


@pytest.fixture
def lab(tmp_path: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> Iterator[Work]:  # fmt: skip
    """The repository (its policy POLICY and, parametrized, more: a budget), oms' private
    tmux socket and the broker's key."""
    more = str(getattr(request, "param", ""))
    repo = make_repo(tmp_path / "repo", {"oms.toml": POLICY + more}, env=oms_env)
    init(repo)
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")
    key = "sk-ant-test-real-" + "".join(random.choices(string.ascii_letters, k=32))
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    with tmux_work(repo, tmp_path / "work", oms_env, monkeypatch) as work:
        yield work


def hook_calls(work: Work, run_id: str) -> list[dict[str, object]]:
    return [e.data for e in work.store.entries("agent.hook") if e.data.get("run_id") == run_id]


def stopped_with_commit(work: Work, run_id: str) -> bool:
    return any(h["event"] == "Stop" and h["commit"] for h in hook_calls(work, run_id))


def _settled(work: Work, d: Dispatch, w: str, pane_text: Callable[[], str]) -> str:
    try:
        until(lambda: workers.get(work, w).state == "exited", "the worker exited")
    except AssertionError:
        raise AssertionError(f"the worker did not end; its pane shows:\n{pane_text()}") from None
    assert work.ticket(d.ticket).state == "verifying"
    got = work.dispatch(d.id)
    assert got.state == "received" and got.run is not None and got.run.candidate
    commit = got.run.candidate
    # Containment: the markers were written inside the workspace and the commit holds them.
    assert git(work.repo.top, "show", f"{commit}:start.marker") == "oms-worker-start\n"
    assert git(work.repo.top, "show", f"{commit}:end.marker") == "oms-worker-end\n"
    return commit


def test_an_unattended_claude_code_worker_runs_to_its_receipt_and_ends(
    lab: Work, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fake_anthropic(COMMAND) as fake:
        monkeypatch.setenv("OMS_EGRESS_UPSTREAM_ANTHROPIC", fake.url)
        d = dispatched(lab, "impl", worker_pane=True)
        w = workers.start_worker(lab, d.id, new_nonce())
        tm = Tmux(socket_for(lab.repo.repo_id))
        commit = _settled(lab, d, w.id, lambda: tm.capture(w.pane or "", 80))
        assert fake.model_requests()
    # The launch: interactive (no print mode), edits accepted, the rest allowed by oms.
    calls = hook_calls(lab, d.run_id)
    assert {(c["worker"], c["role"]) for c in calls} == {(w.id, "impl")}
    pre = [c for c in calls if c["event"] == "PreToolUse"]
    assert pre and pre[0]["tool"] == "Bash" and pre[0]["decision"] == "allow"
    assert any(c["event"] == "Stop" and c["commit"] == commit for c in calls)


def test_a_human_attached_keeps_the_worker_until_they_detach(
    lab: Work, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fake_anthropic(COMMAND) as fake:
        monkeypatch.setenv("OMS_EGRESS_UPSTREAM_ANTHROPIC", fake.url)
        d = dispatched(lab, "impl", worker_pane=True)
        w = workers.start_worker(lab, d.id, new_nonce())
        tm = Tmux(socket_for(lab.repo.repo_id))
        master, slave = os.openpty()
        human = subprocess.Popen(tm.attach_argv(session_for(lab.repo.repo_id)), stdin=slave,
                                 stdout=slave, stderr=slave, start_new_session=True,
                                 env={**os.environ, "TERM": "xterm-256color"})  # fmt: skip
        os.close(slave)
        drain = threading.Thread(target=_drain, args=(master,), daemon=True)
        drain.start()
        try:
            until(lambda: tm.clients_on(w.pane or "") == 1, "the human's client is attached")
            until(lambda: stopped_with_commit(lab, d.run_id), "the worker's Stop with a commit")
            time.sleep(3)  # several rounds of the end rule (0.5 s each) with a client attached
            assert workers.get(lab, w.id).state == "running"
            assert lab.ticket(d.ticket).state == "running"
        finally:
            human.terminate()  # the human detaches
            human.wait(30)
            os.close(master)
        assert fake.model_requests()
        _settled(lab, d, w.id, lambda: tm.capture(w.pane or "", 80))


def _drain(fd: int) -> None:
    """Read the attached client's terminal so that tmux never blocks writing to it."""
    while True:
        try:
            if not os.read(fd, 65536):
                return
        except OSError:
            return


# -- the lane parks: a refused key, a spent budget (issue 31) ---------------------------------

REFUSED = ("the anthropic API key was refused (401): replace it in "
           "$OMS_HOME/providers/anthropic or ANTHROPIC_API_KEY, then resume")  # fmt: skip


def parked_events(work: Work) -> list[dict[str, object]]:
    return [json.loads(r["body"]) for r in
            work.db.read("SELECT body FROM events WHERE kind = 'hook.parked'")]  # fmt: skip


def _parked(work: Work, d: Dispatch, w: str, pane_text: Callable[[], str]) -> None:
    """The lane parked and the worker ended (by oms: nobody is at its pane), its dispatch
    ended with the reason and the attempt used; a second dispatch is not what oms does."""
    try:
        until(lambda: work.ticket(d.ticket).health == "parked", "the lane parked")
        until(lambda: workers.get(work, w).state == "exited", "the worker exited")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; its pane shows:\n{pane_text()}") from None
    assert work.ticket(d.ticket).state == "retryable"
    assert work.dispatch(d.id).state == "ended"
    assert work.db.read("SELECT COUNT(*) AS n FROM dispatches")[0]["n"] == 1


def test_a_refused_key_parks_the_real_worker_lane_asking_the_provider_once(
    lab: Work, monkeypatch: pytest.MonkeyPatch, httpserver: HTTPServer
) -> None:
    """The provider is a loopback stand-in answering 401 (pytest-httpserver)."""
    httpserver.expect_request("/v1/messages", method="POST").respond_with_json(
        {"type": "error", "error": {"type": "authentication_error",
                                    "message": "invalid x-api-key"}}, status=401)  # fmt: skip
    monkeypatch.setenv("OMS_EGRESS_UPSTREAM_ANTHROPIC", httpserver.url_for("/").rstrip("/"))
    d = dispatched(lab, "impl", worker_pane=True)
    w = workers.start_worker(lab, d.id, new_nonce())
    tm = Tmux(socket_for(lab.repo.repo_id))
    _parked(lab, d, w.id, lambda: tm.capture(w.pane or "", 80))
    t = lab.ticket(d.ticket)
    assert (t.health, t.reason) == ("parked", REFUSED)
    assert lab.dispatch(d.id).reason == REFUSED
    [seen] = parked_events(lab)
    assert (seen["event"], seen["status"], seen["reason"]) == ("login", 401, REFUSED)
    # The provider was asked once, with the key oms injected: nothing retried, nor with
    # other credentials (the CLI's later requests stopped at the broker).
    asked = [r for r, _ in httpserver.log if r.path == "/v1/messages"]
    assert len(asked) == 1
    assert asked[0].headers.get("x-api-key") == os.environ["ANTHROPIC_API_KEY"]
    assert not asked[0].headers.get("authorization")


@pytest.mark.parametrize("lab", ["\n[conductor.budget]\nticket_requests = 1\n"], indirect=True)
def test_a_budget_of_one_request_parks_the_real_worker_lane_after_it(
    lab: Work, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fake_anthropic(COMMAND) as fake:
        monkeypatch.setenv("OMS_EGRESS_UPSTREAM_ANTHROPIC", fake.url)
        d = dispatched(lab, "impl", worker_pane=True)
        w = workers.start_worker(lab, d.id, new_nonce())
        tm = Tmux(socket_for(lab.repo.repo_id))
        _parked(lab, d, w.id, lambda: tm.capture(w.pane or "", 80))
        assert len(fake.model_requests()) == 1  # the CLI's next request never left
    want = "budget spent: the ticket used 1 of 1 requests"
    t = lab.ticket(d.ticket)
    assert (t.reason or "").startswith(want)
    assert (lab.dispatch(d.id).reason or "").startswith(want)
    [seen] = parked_events(lab)
    assert seen["event"] == "budget" and str(seen["reason"]).startswith(want)
    run = lab.dispatch(d.id).run
    assert run is not None and run.spend is not None and run.spend.requests == 1
