"""The conductor's relay routes in-process: a real aiohttp broker app on a unix socket with
`conductor_routes`, the inside relay (`_relay`) against it, and a stand-in `oms` outside
that records its argv and answers as the waiter does (a line, then its exit code)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from aiohttp import web

from gatekeeper.agent.mcp_relay import WAIT_PATH, _relay, conductor_routes
from gatekeeper.cli import main

CID = "c-" + "ab" * 6
WAITER = """
import json, sys
with open(sys.argv[1], "w") as f:
    json.dump(sys.argv[2:], f)
print("n-0123456789ab", flush=True)
sys.exit(3)
"""


async def _wait_through_broker(
    tmp_path: Path, waiter: str = WAITER
) -> tuple[int, bytes, list[str]]:
    record = tmp_path / "argv.json"
    app = web.Application()
    oms = [sys.executable, "-c", waiter, str(record)]
    for route in conductor_routes(repo_top=tmp_path / "repo", run_id="r", conductor=CID,
                                  oms_argv=oms):  # fmt: skip
        route(app)
    runner = web.AppRunner(app)
    await runner.setup()
    short = tempfile.mkdtemp(prefix="oms-relay-")  # a unix socket path is at most 107 bytes
    sock = os.path.join(short, "broker.sock")
    await web.UnixSite(runner, sock).start()
    try:
        out = io.BytesIO()
        code = await _relay(sock, None, out, WAIT_PATH)
    finally:
        await runner.cleanup()
        shutil.rmtree(short, ignore_errors=True)
    return code, out.getvalue(), json.loads(record.read_text())


def test_the_waiter_runs_outside_for_the_runs_own_session_and_its_exit_code_returns(
    tmp_path: Path,
) -> None:
    code, out, argv = asyncio.run(_wait_through_broker(tmp_path))
    assert argv == ["conductor", "wait-event", "--repo", str(tmp_path / "repo"),
                    "--session", CID]  # fmt: skip
    assert out == b"n-0123456789ab\n" and code == 3


def test_an_exit_2_without_a_notification_does_not_wake_the_conductor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """2 is the wake code (Claude Code re-wakes on it) and a usage error's code too (an
    `oms` outside that does not know `conductor wait-event` exits 2): only a notification
    line makes it a wake; else it is unavailable, or the conductor loops."""
    usage = WAITER.replace('print("n-0123456789ab", flush=True)', "").replace("exit(3)", "exit(2)")
    code, out, _ = asyncio.run(_wait_through_broker(tmp_path, usage))
    assert out == b"" and code == 4
    assert "no notification" in capsys.readouterr().err
    wake = WAITER.replace("exit(3)", "exit(2)")
    code, out, _ = asyncio.run(_wait_through_broker(tmp_path, wake))
    assert out == b"n-0123456789ab\n" and code == 2


def test_a_malformed_conductor_binding_gets_no_route(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a conductor session id"):
        conductor_routes(repo_top=tmp_path, run_id="r", conductor="--session=c-1",
                         oms_argv=["oms"])  # fmt: skip


REFUSED = [["start"], ["worker", "--worker", "w-1"], [], ["bridge", "--json"],
           ["wait-event", "--state-root", "/"],
           # `--help` only as itself: as a flag's value it must not open another command
           ["pane", "--session", "c-" + "0" * 12, "--repo", "--help"],
           ["start", "--help", "--no-attach"]]  # fmt: skip


@pytest.mark.parametrize("args", [["--help"], ["bridge", "--help"], ["wait-event", "-h"]])
def test_inside_help_alone_is_answered_as_usual(args: list[str]) -> None:
    assert main._inside_conductor(args) is None  # click prints the help


@pytest.mark.parametrize("args", REFUSED)
def test_inside_only_the_bridge_and_the_waiter_are_relayed(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main._inside_conductor(args)
    got = capsys.readouterr()
    assert info.value.code == 4 and "unavailable" in got.out + got.err  # --json: on stdout
