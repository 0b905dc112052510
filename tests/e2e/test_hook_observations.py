"""Provider-hook observations: a real `oms agent run` of a worker (command agent, real bwrap)
whose contained script calls `oms hook claude-code Stop` inside, recorded outside with the
worker's id (from the run, not the payload); and in-process, the receipt's idempotence and
a completion that leaves the ticket `running`.

A real git repository in tmp_path, `oms init`ed; the worker row is written as the panes'
code writes it (a fenced `work.worker` transition) over a real running dispatch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.work import Walk, initialised_work, new_ticket, nonce, snapshot

from gatekeeper.agent.run import AgentRunRequest, agent_run
from gatekeeper.integrations.hooks.observe import publish_quietly
from gatekeeper.work import payloads as p
from gatekeeper.work.conductor.model import new_id
from gatekeeper.work.events import hooks
from gatekeeper.work.fence import Work


@pytest.fixture
def work(git_repo: Path, oms_home: Path) -> Iterator[Work]:
    with initialised_work(git_repo) as w:
        yield w


def running_worker(work: Work) -> tuple[Walk, str]:
    walk = new_ticket(work).leased().running()
    assert walk.dispatch is not None
    wid = new_id("w")
    with work.fenced(nonce(), "worker.test") as tx:
        tx.run("INSERT INTO workers (id, dispatch, ticket, version, state, socket, session, "
               "created, updated) VALUES (?, ?, ?, 1, 'running', 'sock', 'oms-test', ?, ?)",
               wid, walk.dispatch, walk.id, tx.now, tx.now)  # fmt: skip
        tx.record = p.WorkerChanged(object="worker", id=wid, ticket=walk.id, from_state=None,
                                    to_state="running", version=1, nonce="n")  # fmt: skip
        tx.target, tx.subject = wid, f"oms-ticket:{walk.id}"
    return walk, wid


def obs(event: str = "Stop", **over: str) -> hooks.Observation:
    fields = {
        "client": "claude-code",
        "event": event,
        "session": "sess-1",
        "tool": "",
        "observed": "2026-12-02T12:00:00.000001Z",
        "input_sha256": "0" * 64,
        **over,
    }
    return hooks.Observation.model_validate(fields)


def test_a_worker_runs_stop_hook_is_recorded_outside_with_the_runs_worker(
    work: Work, git_repo: Path
) -> None:
    walk, wid = running_worker(work)
    payload = json.dumps({"session_id": "sess-e2e", "hook_event_name": "Stop",
                          "cwd": "/workspace", "worker": "w-000000000000"})  # fmt: skip
    script = (f"echo oms-start; printf '%s' '{payload}' | oms hook claude-code Stop; "
              "echo hook-rc=$?; echo oms-end")  # fmt: skip
    out = agent_run(AgentRunRequest(repo_dir=git_repo, cmd=("/bin/sh", "-c", script),
                                    capture=True, worker=wid))  # fmt: skip
    stdout, stderr = out.stdout or "", out.stderr or ""
    assert "oms-start" in stdout and "oms-end" in stdout, (stdout, stderr)
    assert "hook-rc=0" in stdout and "not recorded" not in stderr, (stdout, stderr)
    rows = work.db.read("SELECT * FROM events WHERE kind = 'hook.completion-observed'")
    assert len(rows) == 1
    body = json.loads(rows[0]["body"])
    assert (
        body["worker"] == wid and body["dispatch"] == walk.dispatch
    )  # the run's, not the payload's
    assert body["session"] == "sess-e2e" and rows[0]["key"].startswith(
        f"hook.completion-observed:{wid}:"
    )
    (session,) = work.db.read("SELECT * FROM sessions WHERE id = 'sess-e2e'")
    assert session["dispatch"] == walk.dispatch and session["activity"] == "done"
    assert work.ticket(walk.id).state == "running"
    assert len(work.db.read("SELECT * FROM batches WHERE state = 'pending'")) == 1


def test_a_retried_observation_answers_the_same_receipt_and_changes_nothing(work: Work) -> None:
    _, wid = running_worker(work)
    first = hooks.observe(work, wid, obs("PreToolUse", tool="Bash"))
    # Recorded, but activity wakes nobody: only a completion or a quota notifies.
    assert first.new and first.kind == "hook.activity" and first.batch is None
    before = snapshot(work)
    again = hooks.observe(work, wid, obs("PreToolUse", tool="Bash"))
    assert again.key == first.key and not again.new
    assert snapshot(work) == before
    other = hooks.observe(work, wid, obs("PostToolUse", tool="Bash"))
    assert other.key != first.key and other.new


def test_a_completion_observed_does_not_move_the_ticket(work: Work) -> None:
    walk, wid = running_worker(work)
    before = work.ticket(walk.id)
    got = hooks.observe(work, wid, obs("Stop"))
    assert got.new and got.kind == "hook.completion-observed"
    after = work.ticket(walk.id)
    assert (
        (after.state, after.version)
        == (before.state, before.version)
        == ("running", before.version)
    )
    assert work.dispatch(walk.dispatch or "").state == "started"


def test_an_observation_is_bounded_and_typed() -> None:
    with pytest.raises(hooks.UsageError):
        hooks.parse(json.dumps({**obs().model_dump(), "prompt": "secret text"}).encode())
    with pytest.raises(hooks.UsageError):
        hooks.parse(json.dumps({**obs().model_dump(), "session": "a b;rm"}).encode())
    with pytest.raises(hooks.UsageError):
        hooks.parse(b"{" + b" " * (hooks.MAX_OBSERVATION_BYTES + 1) + b"}")


def test_a_failed_publish_is_one_warning_line_and_never_raises(tmp_path: Path) -> None:
    stdin = json.dumps({"session_id": "sess-x", "hook_event_name": "Stop"}).encode()
    marker = {"run_id": "r", "socket": str(tmp_path / "no-broker.sock"), "worker": "w-1"}
    line = publish_quietly("claude-code", "Stop", stdin, marker)
    assert line.startswith("oms: warning: the hook's observation was not recorded")
    assert line.count("\n") == 1
    assert publish_quietly("claude-code", "Stop", stdin, {**marker, "worker": None}) == ""


def test_a_worker_cannot_flood_the_store_with_observations(
    work: Work, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the per-worker bound nothing more is kept: no event, no entry, no batch."""
    _, wid = running_worker(work)
    monkeypatch.setattr(hooks, "MAX_OBSERVATIONS_PER_WORKER", 2)
    hooks.observe(work, wid, obs("PreToolUse", tool="Bash"))
    hooks.observe(work, wid, obs("PostToolUse", tool="Bash"))
    before = snapshot(work)
    with pytest.raises(hooks.ObservationRefused, match="published 2 observations"):
        hooks.observe(work, wid, obs("Stop"))
    assert snapshot(work) == before
