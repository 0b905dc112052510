"""oms from inside an agent sandbox, driven in-process with the marker moved to `tmp_path`:
which commands still run, which relay to the broker, which refuse (exit 4, the envelope);
the relay's framing and bound; doctor's authority section and its plain sentence.

The bwrap-contained versions of these (the real marker at /run/oms/run.json, the real
MCP client through the real relay) are in tests/e2e/test_agent_inside.py.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from support.sandbox import AS_ROOT, traversable_dir

import gatekeeper.agent.inside as inside
import gatekeeper.agent.mcp_relay as mcp_relay
from gatekeeper.cli import render
from gatekeeper.cli.main import NO_STATE_INSIDE, main
from gatekeeper.gates import authority as auth
from gatekeeper.gates import doctor as doctor_gate
from gatekeeper.gates.authority import AgentSandbox, Authority
from gatekeeper.integrations.hooks.stop import INSIDE_NOTE

RUN_ID = "20261201T150000Z-0a1b2c3d"
DIGEST = "sha256:" + "ab" * 32
NOBODY = 65534


@pytest.fixture
def marked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process "inside": the marker at a path of the test's own."""
    marker = tmp_path / "run.json"
    marker.write_text(json.dumps({"run_id": RUN_ID, "socket": inside.SOCKET}))
    monkeypatch.setattr(inside, "MARKER", str(marker))
    return marker


def _run(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    code = exited.value.code
    assert isinstance(code, int)
    return code


REFUSED = [
    ["transfer", "approve", DIGEST, "--code", "123456"],
    ["evidence", "note", "--repo", ".", "-m", "hello"],
    ["init", "--repo", "."],
    ["process-result", "--candidate", "HEAD"],
    ["scan", "--stdin"],
    ["mcp", "tools-digest"],
    ["mcp", "--bogus"],
    ["mcp", "--tools", "all"],  # the agent cannot widen its profile: the base's policy does
    ["release", "status"],
]


@pytest.mark.parametrize("argv", REFUSED, ids=lambda a: " ".join(a[:2]))
def test_inside_every_other_command_refuses_with_exit_4_and_the_envelope(
    marked: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run([*argv, "--json"]) == 4
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    error = {"kind": "unavailable", "message": NO_STATE_INSIDE}
    assert json.loads(out) == {"ok": False, "oms_exit_code": 4, "error": error}


def test_inside_a_refusal_without_json_is_one_line_on_stderr(
    marked: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["evidence", "note", "-m", "x"]) == 4
    got = capsys.readouterr()
    assert got.out == "" and got.err == f"oms: unavailable: {NO_STATE_INSIDE}\n"


@pytest.mark.parametrize("argv", [["mcp"], ["mcp", "--repo", "/x"], ["mcp", "--repo=/x"]])
def test_inside_oms_mcp_is_the_relay_to_the_broker_socket(
    marked: Path, argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    called: list[str] = []
    monkeypatch.setattr(mcp_relay, "relay_stdio", lambda path: called.append(path) or 0)
    assert _run(argv) == 0
    assert called == [inside.SOCKET]


def test_inside_oms_mcp_config_still_prints_snippets(
    marked: Path, git_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(["mcp", "config", "--repo", str(git_repo), "--json"]) == 0
    assert "claude-code" in json.loads(capsys.readouterr().out)["snippets"]


@pytest.mark.parametrize("client", ["claude-code", "codex"])
def test_inside_oms_hook_runs_and_stop_says_the_gate_runs_outside(
    marked: Path, client: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    body = json.dumps({"hook_event_name": "Stop", "session_id": "s", "cwd": "/"}).encode()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(body)))
    assert _run(["hook", client, "Stop"]) == 0
    assert json.loads(capsys.readouterr().out) == {"systemMessage": INSIDE_NOTE}


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["mcp", "--help"]])
def test_inside_help_and_version_still_answer(
    marked: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(argv) == 0
    assert capsys.readouterr().out


def test_outside_the_same_command_is_not_refused_as_inside(
    git_repo: Path, oms_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the marker the refusal is not there (this test's guard against a broken
    check that refuses everywhere)."""
    assert not inside.inside_agent_sandbox()
    assert _run(["init", "--repo", str(git_repo), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["created"] is True


# -- the relay's framing and bound -------------------------------------------------------


def test_the_relay_bound_is_the_mcp_sdks_own() -> None:
    assert mcp_relay.MAX_MESSAGE_BYTES == DEFAULT_MAX_REQUEST_BODY_SIZE


def test_one_line_keeps_a_pretty_printed_message_and_makes_it_one_line() -> None:
    msg = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
           "params": {"name": "x", "arguments": {"text": "a\nb\r\nc"}}}  # fmt: skip
    pretty = json.dumps(msg, indent=2).replace("\n", "\r\n")
    line = mcp_relay.one_line(pretty)
    assert "\n" not in line and "\r" not in line
    assert json.loads(line) == msg


class _Direct:
    """Stands in for the event loop and its queue: what the reading thread hands over."""

    def __init__(self) -> None:
        self.got: list[bytes] = []

    def call_soon_threadsafe(self, fn: Any, arg: bytes) -> None:
        fn(arg)

    def put_nowait(self, line: bytes) -> None:
        self.got.append(line)


def _lines_of(data: bytes) -> list[bytes]:
    r, w = os.pipe()
    direct = _Direct()
    with os.fdopen(w, "wb") as f:
        f.write(data)  # small: within the pipe's capacity, read after the writer closed
    mcp_relay._read_lines(r, direct, direct)  # type: ignore[arg-type]
    os.close(r)
    return direct.got


def test_stdin_is_read_as_lines_with_eof_last() -> None:
    assert _lines_of(b'{"a":1}\n\n{"b":2}') == [b'{"a":1}\n', b"\n", b'{"b":2}', b""]


@pytest.mark.parametrize("end", [b"\n{}\n", b""], ids=["ended", "unended"])
def test_a_line_over_the_bound_ends_the_reading(tmp_path: Path, end: bytes) -> None:
    big = tmp_path / "big"  # a file: more than a pipe holds, read without a writer thread
    big.write_bytes(b"x" * (mcp_relay.MAX_MESSAGE_BYTES + 10) + end)
    direct = _Direct()
    fd = os.open(big, os.O_RDONLY)
    try:
        mcp_relay._read_lines(fd, direct, direct)  # type: ignore[arg-type]
    finally:
        os.close(fd)
    assert len(direct.got) == 1 and len(direct.got[0]) > mcp_relay.MAX_MESSAGE_BYTES


def test_oms_mcp_inside_without_a_socket_exits_4_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert mcp_relay.relay_stdio(str(tmp_path / "absent.sock")) == 4
    err = capsys.readouterr().err
    assert err.startswith("oms: unavailable: cannot reach oms outside") and err.count("\n") == 1


# -- doctor: authority ---------------------------------------------------------------------


def test_the_marker_gives_the_run_id_and_a_malformed_one_is_left_out() -> None:
    assert AgentSandbox.of(True, {"run_id": RUN_ID}) == AgentSandbox(True, RUN_ID)
    assert AgentSandbox.of(True, {"run_id": "\x1b[2J; rm"}) == AgentSandbox(True, None)
    assert AgentSandbox.of(True, {}) == AgentSandbox(True, None)
    assert AgentSandbox.of(False, {"run_id": RUN_ID}) == AgentSandbox(False, None)


@pytest.fixture
def state(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A state root with a key file, in a directory every uid can traverse."""
    with traversable_dir("oms-authority-") as root:
        (root / "keys").mkdir(mode=0o755)
        key = auth.key_path(root)
        key.write_text("-----BEGIN PRIVATE KEY-----\n")
        key.chmod(0o600)
        monkeypatch.setenv("OMS_HOME", str(root))
        yield key


def _in_child_as(uid: int, fn: Any) -> int:
    """`fn()` (a bool) in a forked child running as `uid`: 1 true, 0 false, 2 failed."""
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            os.setgid(uid)
            os.setuid(uid)
            code = 1 if fn() else 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _readable() -> bool:
    return auth.authority(AgentSandbox(False)).key_readable


def test_key_readable_is_true_for_the_owner(state: Path) -> None:
    assert _readable() is True


def test_key_readable_is_false_without_a_key(state: Path) -> None:
    state.unlink()
    assert _readable() is False


@pytest.mark.skipif(not AS_ROOT, reason="needs root to become the owning, unprivileged uid")
def test_key_readable_as_an_unprivileged_owner_and_after_chmod_000(state: Path) -> None:
    """Root reads everything, so the unreadable case runs as uid 65534 owning the key."""
    os.chown(state, NOBODY, NOBODY)
    assert _in_child_as(NOBODY, _readable) == 1
    state.chmod(0o000)
    assert _in_child_as(NOBODY, _readable) == 0


@pytest.mark.skipif(AS_ROOT, reason="root reads a mode-000 file: as root, the test above")
def test_key_readable_is_false_after_chmod_000(state: Path) -> None:
    state.chmod(0o000)
    assert _readable() is False


@pytest.mark.skipif(not AS_ROOT, reason="needs root to run as another uid")
def test_key_readable_is_false_for_another_uid(state: Path) -> None:
    assert _in_child_as(NOBODY, _readable) == 0


def test_a_readable_key_is_a_problem_only_inside_a_sandbox() -> None:
    outside = Authority(key_readable=True, inside_agent_sandbox=False, run_id=None)
    breached = Authority(key_readable=True, inside_agent_sandbox=True, run_id=RUN_ID)
    contained = Authority(key_readable=False, inside_agent_sandbox=True, run_id=RUN_ID)
    assert auth.breach(outside) is None and auth.breach(contained) is None
    assert "readable inside an oms agent sandbox" in (auth.breach(breached) or "")


def test_doctor_inside_with_a_readable_key_is_not_ready_and_says_why(
    git_repo: Path, state: Path
) -> None:
    """The wiring in the doctor itself: inside, with the key in reach, the sandbox failed.
    (`state` after `git_repo`: its `$OMS_HOME` is the one in force.)"""
    report = doctor_gate.doctor(git_repo, AgentSandbox(True, RUN_ID))
    assert report.authority.key_readable and report.authority.run_id == RUN_ID
    assert report.ready is False
    assert any("readable inside an oms agent sandbox" in p for p in report.problems)
    assert report.probe.failures == ("not run: inside an oms agent sandbox",)


def _report(who: Authority) -> dict[str, Any]:
    egress = auth.Egress(on_secret="block", modes=dict(auth.EGRESS_MODES))
    return {"authority": who.to_json(), "egress": egress.to_json()}


def test_doctor_says_plainly_who_could_sign_inside() -> None:
    who = Authority(key_readable=False, inside_agent_sandbox=True, run_id=RUN_ID)
    assert render.authority_lines(_report(who)) == [
        "authority: signing key readable by this process: no",
        f"authority: inside an oms agent sandbox (run {RUN_ID}): no authority here",
        "authority: approvals and evidence are only as strong as this answer: an agent "
        "that can read the key can sign; run agents under `oms agent run`",
        f"egress:   none: {auth.EGRESS_MODES['none']}",
        f"egress:   api: {auth.EGRESS_MODES['api']}",
        f"egress:   tunnel: {auth.EGRESS_MODES['tunnel']}",
        "egress:   a secret in an api request: block ([agent.egress] on_secret)",
    ]


def test_doctor_outside_with_a_readable_key_says_so() -> None:
    who = Authority(key_readable=True, inside_agent_sandbox=False, run_id=None)
    lines = render.authority_lines(_report(who))
    assert lines[:2] == ["authority: signing key readable by this process: yes",
                         "authority: not inside an oms agent sandbox"]  # fmt: skip
    assert "tunnel" in auth.EGRESS_MODES and "nothing is scanned" in auth.EGRESS_MODES["tunnel"]
