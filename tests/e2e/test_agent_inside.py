"""oms from inside an agent sandbox, with real parts: bwrap, git, the MCP SDK's own client.

Inside is a minimal bwrap (every namespace unshared, only /usr, the interpreter, the venv and
this source read-only, the marker read-only at /run/oms/run.json, the broker's socket bound at
/run/oms/broker.sock when the test has one); the agent profile itself is "box"'s. The broker is
a minimal aiohttp app made here with `mcp_route` on a `web.UnixSite`; the real one is
"egress"'s. Every script run inside prints a start and an end marker, asserted, so a sandbox
that refused to run never counts as a refusal of oms.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import mcp_types as types
import pytest
from aiohttp import web
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from support.env import clean_env
from support.oms import parse_single_json, run_oms
from support.repos import make_repo
from support.sandbox import traversable_dir

from gatekeeper.agent import inside
from gatekeeper.agent.mcp_relay import (
    MAX_CONNECTIONS,
    MAX_MESSAGE_BYTES,
    RUN_ID_ENV,
    URL,
    mcp_route,
)
from gatekeeper.cli.main import NO_STATE_INSIDE

RUN_ID = "20261201T150000Z-0a1b2c3d"
DIGEST = "sha256:" + "ab" * 32
START, END = "OMS-INSIDE-START", "OMS-INSIDE-END"
WORKTREE = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)
BASE = Path(os.path.realpath(sys.base_prefix))
PY = sys.executable  # the venv's interpreter, at the same path inside
BWRAP = "/usr/bin/bwrap"
README = "hello from the served repository\n"

pytestmark = pytest.mark.skipif(not os.access(BWRAP, os.X_OK), reason="needs /usr/bin/bwrap")

# The broker's `oms mcp` outside, wrapped: records what it was started with and leaves a
# child in its session, so that a test can see both killed.
WRAPPER = f"""
import json, os, runpy, subprocess, sys
RUN_ID_ENV = {RUN_ID_ENV!r}
record = sys.argv[1]
child = subprocess.Popen(["sleep", "600"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
with open(record + ".tmp", "w") as f:
    json.dump({{"pid": os.getpid(), "child": child.pid, "argv": sys.argv[2:],
               "cwd": os.getcwd(), "run_id": os.environ.get(RUN_ID_ENV)}}, f)
os.rename(record + ".tmp", record)
sys.argv = ["oms", *sys.argv[2:]]
runpy.run_module("gatekeeper", run_name="__main__")
"""


@dataclass
class World:
    root: Path  # traversable by every uid: the marker and the socket live here
    repo: Path
    env: dict[str, str]
    marker: Path
    sock: Path

    def record(self) -> Path:
        return self.root / "outside.json"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with traversable_dir("oms-inside-") as root:
        home = tmp_path / "home"
        home.mkdir()
        env = clean_env(home, tmp_path / "oms-state")
        repo = make_repo(tmp_path / "repo", {"README.md": README}, env=env, readme=None)
        proc = run_oms(["init", "--repo", str(repo), "--json"], env=env)
        assert proc.returncode == 0, proc.stderr
        marker = root / "run.json"
        marker.write_text(json.dumps({"run_id": RUN_ID, "socket": inside.SOCKET,
                                      "relay_port": inside.RELAY_PORT}))  # fmt: skip
        yield World(root, repo, env, marker, root / "broker.sock")


def bwrap_inside(w: World, *, with_socket: bool) -> list[str]:
    """A minimal agent-like sandbox: the real profile is box's; this one holds the marker."""
    # The tmpfs mounts first: a checkout (and its venv) below /tmp must not be hidden.
    argv = [BWRAP, "--unshare-all", "--die-with-parent", "--new-session",
            "--tmpfs", "/tmp", "--tmpfs", "/run", "--tmpfs", inside.HOME,
            "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
            "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
            "--ro-bind", str(BASE), str(BASE), "--ro-bind", str(VENV), str(VENV),
            "--ro-bind", str(WORKTREE), str(WORKTREE),
            "--proc", "/proc", "--dev", "/dev",
            "--ro-bind", str(w.marker), inside.MARKER]  # fmt: skip
    if with_socket:
        argv += ["--bind", str(w.sock), inside.SOCKET]
    return [*argv, "--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
            "--setenv", "HOME", inside.HOME, "--setenv", "PYTHONPATH", str(WORKTREE),
            "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--chdir", "/tmp", "--"]  # fmt: skip


def run_inside(w: World, script: str) -> list[str]:
    """`script` in /bin/sh inside; its stdout lines between the asserted start and end."""
    body = f"echo {START}\n{script}\necho {END}\n"
    proc = subprocess.run([*bwrap_inside(w, with_socket=False), "/bin/sh", "-c", body],
                          capture_output=True, text=True, timeout=180, check=False)  # fmt: skip
    lines = proc.stdout.splitlines()
    assert lines[:1] == [START] and lines[-1:] == [END], (proc.stdout, proc.stderr)
    return lines[1:-1]


OMS_INSIDE = f"{PY} -P -m gatekeeper"


# -- everything but `oms mcp` refuses inside ----------------------------------------------


def test_inside_transfer_approve_and_evidence_note_refuse_with_exit_4(world: World) -> None:
    lines = run_inside(world, "\n".join([
        f"{OMS_INSIDE} transfer approve {DIGEST} --code 123456 --json; echo rc=$?",
        f"{OMS_INSIDE} evidence note -m hello --json; echo rc=$?",
        f"{OMS_INSIDE} init --json; echo rc=$?",
    ]))  # fmt: skip
    envelope = {"ok": False, "oms_exit_code": 4,
                "error": {"kind": "unavailable", "message": NO_STATE_INSIDE}}  # fmt: skip
    assert len(lines) == 6, lines
    for out, rc in zip(lines[0::2], lines[1::2], strict=True):
        assert json.loads(out) == envelope and rc == "rc=4", lines


def test_inside_oms_mcp_without_the_broker_socket_exits_4_with_one_line(world: World) -> None:
    lines = run_inside(world, f"{OMS_INSIDE} mcp </dev/null 2>&1; echo rc=$?")
    assert len(lines) == 2 and lines[1] == "rc=4", lines
    want = f"oms: unavailable: cannot reach oms outside through {inside.SOCKET}"
    assert lines[0].startswith(want), lines


def test_doctor_inside_says_there_is_no_authority_here(world: World) -> None:
    lines = run_inside(world, f"{OMS_INSIDE} doctor --json; echo rc=$?\n{OMS_INSIDE} doctor")
    report = json.loads(lines[0])
    assert lines[1] == "rc=4" and report["oms_exit_code"] == 4  # not ready: no key here
    assert report["authority"] == {
        "key_readable": False, "inside_agent_sandbox": True, "run_id": RUN_ID,
        "note": report["authority"]["note"],
    }  # fmt: skip
    assert report["probe"]["failures"] == ["not run: inside an oms agent sandbox"]
    assert f"authority: inside an oms agent sandbox (run {RUN_ID}): no authority here" in lines
    assert "authority: signing key readable by this process: no" in lines


def test_doctor_outside_reports_the_readable_key_without_calling_it_not_ready(
    world: World,
) -> None:
    proc = run_oms(["doctor", "--repo", str(world.repo), "--json"], env=world.env, timeout=180)
    report = parse_single_json(proc)
    assert report["authority"]["key_readable"] is True
    assert report["authority"]["inside_agent_sandbox"] is False
    assert report["authority"]["run_id"] is None
    assert not [p for p in report["problems"] if "readable" in p], report["problems"]
    assert set(report["egress"]["modes"]) == {"none", "api", "tunnel"}


# -- `oms mcp` inside: the real MCP client, through the relay, to `oms mcp` outside ---------


@asynccontextmanager
async def broker(w: World, oms_argv: list[str]) -> AsyncIterator[web.AppRunner]:
    app = web.Application()
    mcp_route(repo_top=w.repo, run_id=RUN_ID, oms_argv=oms_argv)(app)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.UnixSite(runner, str(w.sock)).start()
    try:
        yield runner
    finally:
        await runner.cleanup()


@asynccontextmanager
async def session(params: StdioServerParameters, errlog: Any) -> AsyncIterator[ClientSession]:
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=120) as s:
            await s.initialize()
            yield s


def _schemas(tools: list[types.Tool]) -> dict[str, Any]:
    return {t.name: t.input_schema for t in tools}


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


async def _gone(*pids: int) -> bool:
    for _ in range(600):  # a deadline against hanging, not a timing assertion
        if not any(_alive(p) for p in pids):
            return True
        await asyncio.sleep(0.05)
    return False


async def _mcp_both_ways(w: World, errlog: Any) -> dict[str, Any]:
    inside_params = StdioServerParameters(
        command=BWRAP, args=[*bwrap_inside(w, with_socket=True)[1:], PY, "-P", "-m",
                             "gatekeeper", "mcp"], env={})  # fmt: skip
    outside_params = StdioServerParameters(
        command=PY, args=["-P", "-m", "gatekeeper", "mcp", "--repo", str(w.repo)], env=w.env
    )
    got: dict[str, Any] = {}
    async with broker(w, [PY, "-P", "-c", WRAPPER, str(w.record())]):
        async with session(inside_params, errlog) as s:
            got["inside"] = (await s.list_tools()).tools
            got["read"] = await s.call_tool("oms_repo_read_file", {"path": "README.md"})
            got["record"] = json.loads(w.record().read_text())
        got["gone"] = await _gone(got["record"]["pid"], got["record"]["child"])
    async with session(outside_params, errlog) as s:
        got["outside"] = (await s.list_tools()).tools
    return got


def test_oms_mcp_inside_offers_the_same_tools_and_answers_from_the_repo_outside(
    world: World, tmp_path: Path
) -> None:
    with open(tmp_path / "mcp.stderr", "w") as errlog:
        got = asyncio.run(_mcp_both_ways(world, errlog))
    assert got["inside"], "no tools through the relay"
    assert _schemas(got["inside"]) == _schemas(got["outside"])
    assert [t.name for t in got["inside"]] == [t.name for t in got["outside"]]
    # The same profile as outside: the gatekeeper's (the base policy names no `[mcp] tools`).
    assert "oms_process_result" in {t.name for t in got["inside"]}
    assert "oms_status" not in {t.name for t in got["inside"]}
    read = got["read"]
    assert not read.is_error and read.structured_content["ok"] is True, read
    assert README.strip() in json.dumps(read.structured_content["data"])
    rec = got["record"]  # what the broker started outside, for this run
    assert rec["argv"] == ["mcp", "--repo", str(world.repo)]
    assert rec["run_id"] == RUN_ID and rec["cwd"] == "/"
    assert got["gone"], "the server outside (or its child) outlived the closed socket"


# -- the route itself: framing, bounds, connections, stop -----------------------------------

ECHO = "import sys\nfor line in sys.stdin:\n    sys.stdout.write(line)\n    sys.stdout.flush()\n"


@asynccontextmanager
async def ws_client(w: World) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(w.sock))) as s:
        async with s.ws_connect(URL) as ws:
            yield ws


async def _echo(w: World) -> list[Any]:
    async with broker(w, [PY, "-c", ECHO]), ws_client(w) as ws:
        pretty = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}, indent=2)
        await ws.send_str(pretty)
        back = await ws.receive()
        await ws.send_bytes(b"{}")
        closed = await ws.receive()
        return [back.data, closed.type, ws.close_code]


def test_the_route_relays_one_message_as_one_line_and_refuses_binary(world: World) -> None:
    back, closed, code = asyncio.run(_echo(world))
    assert json.loads(back) == {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert "\n" not in back
    assert closed is aiohttp.WSMsgType.CLOSE and code == aiohttp.WSCloseCode.UNSUPPORTED_DATA


async def _too_many(w: World) -> int | None:
    sleeper = [PY, "-c", "import time; time.sleep(600)"]
    async with (
        broker(w, sleeper),
        aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(w.sock))) as s,
    ):
        held = [await s.ws_connect(URL) for _ in range(MAX_CONNECTIONS)]
        try:
            await s.ws_connect(URL)
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status
        finally:
            for ws in held:
                await ws.close()
    return None


def test_the_route_refuses_connections_beyond_its_bound(world: World) -> None:
    assert asyncio.run(_too_many(world)) == 503


async def _stop_kills(w: World) -> tuple[bool, bool, int | None]:
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=str(w.sock))) as s:
        async with broker(w, [PY, "-P", "-c", WRAPPER, str(w.record())]) as runner:
            ws = await s.ws_connect(URL)
            for _ in range(600):  # until the server outside has started
                if w.record().exists():
                    break
                await asyncio.sleep(0.05)
            rec = json.loads(w.record().read_text())
            alive = _alive(rec["pid"])
            closing = asyncio.create_task(ws.receive())  # the client reads, as a relay does
            await runner.cleanup()  # the broker stops with the connection still open
            gone = not _alive(rec["pid"]) and await _gone(rec["child"])
            await closing
            return alive, gone, ws.close_code


def test_broker_stop_closes_the_connection_and_kills_the_server_outside(world: World) -> None:
    alive, gone, code = asyncio.run(_stop_kills(world))
    assert alive and gone
    assert code == aiohttp.WSCloseCode.GOING_AWAY


RELAY = (
    "import sys\nfrom gatekeeper.agent.mcp_relay import relay_stdio\n"
    "sys.exit(relay_stdio(sys.argv[1]))"
)


async def _relay_against(
    w: World, oms_argv: list[str], feed: bytes | None, answers: int = 0
) -> tuple[int, bytes, bytes]:
    """`relay_stdio` as `oms mcp` inside runs it, against a broker serving `oms_argv`;
    `feed` is written to its stdin, which is closed once `answers` lines came back (None:
    stdin held open until the relay ends)."""
    async with broker(w, oms_argv):
        proc = await asyncio.create_subprocess_exec(
            PY, "-P", "-c", RELAY, str(w.sock), stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**w.env, "PYTHONPATH": str(WORKTREE)},
        )  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        got = b""
        if feed is not None:
            proc.stdin.write(feed)
            await proc.stdin.drain()
            got = b"".join([await proc.stdout.readline() for _ in range(answers)])
            proc.stdin.close()
        out, err = await asyncio.gather(proc.stdout.read(), proc.stderr.read())
        out = got + out
        code = await proc.wait()
        proc.stdin.close()
        return code, out, err


def test_oms_mcp_inside_relays_lines_both_ways_and_ends_with_stdin(world: World) -> None:
    feed = b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n\n{"jsonrpc":"2.0","id":2}\n'
    code, out, err = asyncio.run(_relay_against(world, [PY, "-c", ECHO], feed, answers=2))
    assert (code, err) == (0, b"")
    assert out == b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n{"jsonrpc":"2.0","id":2}\n'


def test_oms_mcp_inside_refuses_a_message_over_the_bound(world: World) -> None:
    feed = b"x" * (MAX_MESSAGE_BYTES + 1) + b"\n"
    code, _, err = asyncio.run(_relay_against(world, [PY, "-c", ECHO], feed))
    assert code == 4
    assert err.decode().startswith(f"oms: unavailable: a JSON-RPC message over {MAX_MESSAGE_BYTES}")


def test_oms_mcp_inside_exits_4_when_the_server_outside_ends(world: World) -> None:
    code, _, err = asyncio.run(_relay_against(world, ["/bin/true"], None))
    assert code == 4
    assert err.decode().startswith("oms: unavailable: oms mcp outside ended")
