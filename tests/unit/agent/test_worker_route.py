"""A worker's hook and receipt routes (gatekeeper/agent/worker_route.py) and its end rule.

The real route on a real aiohttp server on a unix socket, and the real `oms hook` and
`oms worker result` in-process with the marker moved to `tmp_path` (the bwrap-contained
run is tests/e2e/test_worker_unattended.py). The host hook never answers allow.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from aiohttp import web

import gatekeeper.agent.inside as inside
from evidence import Payload
from gatekeeper.agent.budget import Parked
from gatekeeper.agent.payloads import HookEvent
from gatekeeper.agent.run import _on_park
from gatekeeper.agent.worker_route import EndRule, worker_routes
from gatekeeper.cli.main import main
from gatekeeper.integrations.hooks import run_hook
from gatekeeper.integrations.hooks.protocol import decision_of

RUN_ID = "20261201T150000Z-0a1b2c3d"
WORKER = "w-0123456789ab"
BASE = "a" * 40
MADE = "b" * 40
BASH = {"session_id": "s-1", "cwd": "/", "tool_name": "Bash",
        "tool_input": {"command": "echo hello > out.txt"}}  # fmt: skip


def _workspace(root: Path, head: str) -> Path:
    ws = root / "ws"
    (ws / ".git" / "refs" / "heads" / "oms").mkdir(parents=True)
    (ws / ".git" / "HEAD").write_text(f"ref: refs/heads/oms/{RUN_ID}\n")
    (ws / ".git" / "refs" / "heads" / "oms" / RUN_ID).write_text(head + "\n")
    return ws


class _Broker:
    """The routes on a real aiohttp server on a unix socket, in a thread of their own."""

    def __init__(self, socket_path: str, ws: Path, rule: EndRule | None) -> None:
        self.records: list[Payload] = []
        self.socket_path, self.ws, self.rule = socket_path, ws, rule
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.runner: web.AppRunner | None = None
        threading.Thread(target=self._serve, daemon=True).start()
        assert self.ready.wait(10)

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        routes = worker_routes(run_id=RUN_ID, worker=WORKER, role="impl", workspace=self.ws,
                               base=BASE, record=self.records.append, rule=self.rule)  # fmt: skip
        for route in routes:
            route(app)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        self.loop.run_until_complete(web.UnixSite(self.runner, self.socket_path).start())
        self.ready.set()
        self.loop.run_forever()

    def close(self) -> None:
        assert self.runner is not None
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="oms-wr-"))  # a unix socket path is at most 107 bytes
    try:
        yield d
    finally:
        subprocess.run(["rm", "-rf", str(d)], check=False)


def _inside(monkeypatch: pytest.MonkeyPatch, root: Path, socket_path: str, **extra: object) -> None:
    marker = root / "run.json"
    marker.write_text(json.dumps({"run_id": RUN_ID, "socket": socket_path, **extra}))
    monkeypatch.setattr(inside, "MARKER", str(marker))
    monkeypatch.setattr(inside, "SOCKET", socket_path)
    monkeypatch.setattr("gatekeeper.cli.main.SOCKET", socket_path)


def _run(argv: list[str], stdin: bytes, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    with pytest.raises(SystemExit) as exited:
        main(argv)
    code = exited.value.code
    assert isinstance(code, int)
    return code


# -- the host never allows ----------------------------------------------------------------


def test_the_same_pre_tool_use_on_the_host_is_never_an_allow() -> None:
    data = json.dumps({**BASH, "hook_event_name": "PreToolUse"}).encode()
    inside_worker = run_hook("claude-code", "PreToolUse", data, in_sandbox=True, may_allow=True)
    assert decision_of(inside_worker) == "allow"  # the same input, inside: allowed
    for may_allow in (True, False):  # on the host, whatever the caller says
        host = run_hook("claude-code", "PreToolUse", data, in_sandbox=False, may_allow=may_allow)
        assert decision_of(host) == "silent" and "allow" not in host.stdout
    attended = run_hook("claude-code", "PreToolUse", data, in_sandbox=True)
    assert decision_of(attended) == "silent"  # inside, not an unattended worker: silent


def test_oms_hook_on_the_host_prints_no_allow(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert not inside.inside_agent_sandbox()
    data = json.dumps({**BASH, "hook_event_name": "PreToolUse"}).encode()
    assert _run(["hook", "claude-code", "PreToolUse"], data, monkeypatch) == 0
    assert "allow" not in capsys.readouterr().out


def test_a_secret_read_inside_an_unattended_worker_is_still_denied() -> None:
    call = {"session_id": "s", "cwd": "/", "hook_event_name": "PreToolUse",
            "tool_name": "Read", "tool_input": {"file_path": "/x/.env"}}  # fmt: skip
    data = json.dumps(call).encode()
    got = run_hook("claude-code", "PreToolUse", data, in_sandbox=True, may_allow=True)
    assert decision_of(got) == "deny"


# -- inside, through the broker -----------------------------------------------------------


def test_oms_hook_inside_a_worker_run_is_answered_and_recorded_by_the_broker(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rule = EndRule(lambda: False)
    broker = _Broker(str(short_dir / "b.sock"), _workspace(short_dir, MADE), rule)
    try:
        _inside(monkeypatch, short_dir, broker.socket_path, worker=WORKER, unattended=True)
        pre = json.dumps({**BASH, "hook_event_name": "PreToolUse"}).encode()
        assert _run(["hook", "claude-code", "PreToolUse"], pre, monkeypatch) == 0
        answer = json.loads(capsys.readouterr().out)
        assert answer["hookSpecificOutput"]["permissionDecision"] == "allow"
        assert not rule.done.is_set()
        stop = json.dumps({"session_id": "s-1", "cwd": "/", "hook_event_name": "Stop"}).encode()
        assert _run(["hook", "claude-code", "Stop"], stop, monkeypatch) == 0
    finally:
        broker.close()
    hooks = [r for r in broker.records if isinstance(r, HookEvent)]
    assert [(h.event, h.decision) for h in hooks] == [("PreToolUse", "allow"), ("Stop", "silent")]
    assert {(h.run_id, h.worker, h.role) for h in hooks} == {(RUN_ID, WORKER, "impl")}
    assert hooks[0].tool == "Bash" and hooks[0].commit is None
    assert hooks[1].commit == MADE  # the workspace is beyond the base: the receipt's commit
    assert rule.done.is_set()


def test_a_stop_with_no_commit_beyond_the_base_marks_nothing(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rule = EndRule(lambda: True)
    broker = _Broker(str(short_dir / "b.sock"), _workspace(short_dir, BASE), rule)
    try:
        _inside(monkeypatch, short_dir, broker.socket_path, worker=WORKER, unattended=True)
        stop = json.dumps({"session_id": "s-1", "cwd": "/", "hook_event_name": "Stop"}).encode()
        assert _run(["hook", "claude-code", "Stop"], stop, monkeypatch) == 0
    finally:
        broker.close()
    (h,) = broker.records
    assert isinstance(h, HookEvent) and h.event == "Stop" and h.commit is None
    assert not rule.done.is_set()


def test_a_worker_run_whose_broker_cannot_be_reached_refuses_the_call(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _inside(monkeypatch, short_dir, str(short_dir / "none.sock"), worker=WORKER, unattended=True)
    pre = json.dumps({**BASH, "hook_event_name": "PreToolUse"}).encode()
    assert _run(["hook", "claude-code", "PreToolUse"], pre, monkeypatch) == 0
    answer = json.loads(capsys.readouterr().out)["hookSpecificOutput"]
    assert answer["permissionDecision"] == "deny"  # fail closed, never the local allow


def test_oms_worker_result_inside_files_through_the_broker_ignoring_its_arguments(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rule = EndRule(lambda: False)
    broker = _Broker(str(short_dir / "b.sock"), _workspace(short_dir, MADE), rule)
    try:
        _inside(monkeypatch, short_dir, broker.socket_path, worker=WORKER, unattended=True)
        argv = ["worker", "result", "--dispatch", "d-forged", "--lease", "forged", "--nonce",
                "n", "--commit", "c" * 40, "--json"]  # fmt: skip
        assert _run(argv, b"", monkeypatch) == 0
    finally:
        broker.close()
    out = json.loads(capsys.readouterr().out)
    assert out == {"ok": True, "oms_exit_code": 0, "run_id": RUN_ID, "worker": WORKER,
                   "commit": MADE, "filed": "when the run ends"}  # fmt: skip
    assert rule.done.is_set()


def test_oms_worker_result_inside_with_no_commit_is_blocked(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = _Broker(str(short_dir / "b.sock"), _workspace(short_dir, BASE), None)
    try:
        _inside(monkeypatch, short_dir, broker.socket_path, worker=WORKER)
        assert _run(["worker", "result", "--json"], b"", monkeypatch) == 3
    finally:
        broker.close()
    out = json.loads(capsys.readouterr().out)
    assert out["error"]["kind"] == "blocked" and "no commit beyond the base" in out["error"][
        "message"]  # fmt: skip


def test_oms_worker_anything_else_inside_is_refused(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _inside(monkeypatch, short_dir, str(short_dir / "none.sock"), worker=WORKER)
    assert _run(["worker", "list", "--json"], b"", monkeypatch) == 4
    assert json.loads(capsys.readouterr().out)["error"]["kind"] == "unavailable"


# -- the end rule -------------------------------------------------------------------------


def test_the_end_rule_waits_while_attached_and_ends_the_group_when_nobody_is() -> None:
    attached = threading.Event()
    attached.set()
    rule = EndRule(lambda: not attached.is_set(), poll_s=0.05)
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    finished = threading.Event()
    try:
        rule.watch(proc.pid, finished)
        time.sleep(0.3)
        assert proc.poll() is None and not rule.ended  # not done yet
        rule.done.set()
        time.sleep(0.3)
        assert proc.poll() is None and not rule.ended  # done, but a client is attached
        attached.clear()  # the human detaches
        assert proc.wait(timeout=30) == -signal.SIGTERM
        assert rule.ended
    finally:
        finished.set()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_broker_stop_ends_the_worker_once_nobody_is_attached() -> None:
    """Its budget spent or its key refused, an interactive CLI would wait at its prompt (or
    retry into the broker's refusals) until its time-out: the stop ends it as a receipt
    does, and the rule says it was stopped, not done."""
    rule = EndRule(lambda: True, poll_s=0.05)
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    finished = threading.Event()
    try:
        rule.watch(proc.pid, finished)
        time.sleep(0.3)
        assert proc.poll() is None and not rule.ended  # neither done nor stopped
        on_park = _on_park(None, rule)
        assert on_park is not None
        on_park(Parked("login", "anthropic", 401))
        assert proc.wait(timeout=30) == -signal.SIGTERM
        assert rule.ended and rule.stopped.is_set() and not rule.done.is_set()
    finally:
        finished.set()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # A run that is no worker's keeps its watch alone.
    watch = SimpleNamespace(park=print)
    assert _on_park(watch, None) is print  # type: ignore[arg-type]
    assert _on_park(None, None) is None
