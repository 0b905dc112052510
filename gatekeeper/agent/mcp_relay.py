"""oms from inside the agent sandbox: `oms mcp` there is a relay to an `oms mcp` outside.

Outside, `mcp_route` adds `GET /oms/mcp` (a WebSocket) to the broker's aiohttp app. Each
connection starts its own `oms mcp --repo <the user's repository>` outside, with the run's
id in its environment (`OMS_AGENT_RUN_ID`), and relays JSON-RPC: one text message is one
line of the server's stdio. Inside, `oms mcp` is `relay_stdio`: stdin lines to the socket,
messages back as stdout lines. The authority (key, store) stays with the server outside,
which has no tool that approves or releases: the agent can ask, never approve.

A conductor's run (`AgentRunRequest.conductor` set) also gets `GET /oms/conductor/bridge`
and `GET /oms/conductor/wait-event`: `oms conductor bridge|wait-event --repo <top>
--session <the run's conductor>` outside. The session comes from the run's binding, never
from the arguments given inside. The waiter's exit code comes back as the close code
(`EXIT_CLOSE_BASE + code`), since its exit code is its answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import aiohttp
from aiohttp import WSCloseCode, WSMsgType, web

from gatekeeper.text import sanitize

MCP_PATH = "/oms/mcp"
BRIDGE_PATH = "/oms/conductor/bridge"
WAIT_PATH = "/oms/conductor/wait-event"
HOST = "http://oms"  # a placeholder: the unix socket decides
URL = f"{HOST}{MCP_PATH}"
CONDUCTOR_RE = re.compile(r"^c-[0-9a-f]{12}$")  # gatekeeper.work.conductor.model's (a layer up)
EXIT_CLOSE_BASE = 4000  # application close codes 4000-4999: 4000 + the waiter's exit code
RUN_ID_ENV = "OMS_AGENT_RUN_ID"
# The MCP SDK's own bound on one message (mcp.server.transport_security.
# DEFAULT_MAX_REQUEST_BODY_SIZE; a test holds them equal). Not imported: it costs ~1 s.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_CONNECTIONS = 4  # each one is an oms process outside: the agent cannot start a swarm
GRACE_S = 5.0  # after its stdin closes, the server's time to finish before SIGKILL
EXIT_UNAVAILABLE = 4  # gatekeeper.errors' code, not imported: it pulls in the foundations
WAKE_EXIT = 2  # gatekeeper.work.conductor.waiter's (a layer up): the conductor's wake


# -- outside: the route on the broker ----------------------------------------------------


@dataclass(eq=False)
class _Connection:
    ws: web.WebSocketResponse
    proc: asyncio.subprocess.Process

    async def end(self, code: int = WSCloseCode.GOING_AWAY) -> None:
        await self.ws.close(code=code)
        await _stop(self.proc)


@dataclass(eq=False)
class _StdioRoute:
    argv: tuple[str, ...]
    run_id: str
    path: str = MCP_PATH
    # The server's exit code is the answer (the waiter): closed with EXIT_CLOSE_BASE + code.
    exit_as_close: bool = False
    live: set[_Connection] = field(default_factory=set)
    opening: int = 0

    def __call__(self, app: web.Application) -> None:
        app.router.add_get(self.path, self.handle)
        app.on_shutdown.append(self.stop)

    async def stop(self, app: web.Application) -> None:
        """Broker stop: every connection closed and its server (and children) killed."""
        await asyncio.gather(*(c.end() for c in list(self.live)), return_exceptions=True)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if len(self.live) + self.opening >= MAX_CONNECTIONS:
            raise web.HTTPServiceUnavailable(text="too many oms mcp connections for this run")
        self.opening += 1
        try:
            ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE_BYTES, compress=False)
            await ws.prepare(request)
            try:
                proc = await self._spawn()
            except OSError:
                await ws.close(code=WSCloseCode.INTERNAL_ERROR, message=b"cannot start oms mcp")
                return ws
        finally:
            self.opening -= 1
        conn = _Connection(ws, proc)
        self.live.add(conn)
        code: int = WSCloseCode.OK
        try:
            server_ended = await _pump(ws, proc)
            # The server ending first is abnormal: the client inside hears it as 1011.
            code = WSCloseCode.INTERNAL_ERROR if server_ended else WSCloseCode.OK
            if server_ended and self.exit_as_close:
                rc = await proc.wait()
                code = EXIT_CLOSE_BASE + rc if 0 <= rc < 256 else WSCloseCode.INTERNAL_ERROR
        finally:
            self.live.discard(conn)
            await conn.end(code)
        return ws

    async def _spawn(self) -> asyncio.subprocess.Process:
        # Its own session, so that stopping it reaches the scanners and bwrap it started;
        # cwd "/" so that nothing resolves against the repository (hostile ground).
        return await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env={**os.environ, RUN_ID_ENV: self.run_id},
            cwd="/",
            start_new_session=True,
            limit=MAX_MESSAGE_BYTES,
        )


def mcp_route(
    *, repo_top: Path, run_id: str, oms_argv: Sequence[str]
) -> Callable[[web.Application], None]:
    """What the broker calls with its app: registers `GET /oms/mcp`, one `oms mcp --repo
    repo_top` outside per connection, killed when the socket closes or the broker stops."""
    return _StdioRoute(argv=(*oms_argv, "mcp", "--repo", str(repo_top)), run_id=run_id)


def conductor_routes(
    *, repo_top: Path, run_id: str, conductor: str, oms_argv: Sequence[str]
) -> list[Callable[[web.Application], None]]:
    """A conductor run's routes: its bridge and its waiter outside, for `conductor` (the
    run's binding; whatever the agent passes inside is never read)."""
    if not CONDUCTOR_RE.fullmatch(conductor):
        raise ValueError(f"not a conductor session id: {conductor[:40]!r}")
    tail = ("--repo", str(repo_top), "--session", conductor)
    return [
        _StdioRoute(argv=(*oms_argv, "conductor", "bridge", *tail), run_id=run_id,
                    path=BRIDGE_PATH),
        _StdioRoute(argv=(*oms_argv, "conductor", "wait-event", *tail), run_id=run_id,
                    path=WAIT_PATH, exit_as_close=True),
    ]  # fmt: skip


def one_line(text: str) -> str:
    """A JSON-RPC message as one stdio line. Raw CR/LF can only be whitespace between JSON
    tokens (inside strings they are escaped), so a space keeps the message's meaning."""
    return text.replace("\r", " ").replace("\n", " ")


async def _ws_to_stdin(ws: web.WebSocketResponse, stdin: asyncio.StreamWriter) -> None:
    async for msg in ws:
        if msg.type is not WSMsgType.TEXT:
            await ws.close(code=WSCloseCode.UNSUPPORTED_DATA, message=b"text messages only")
            return
        stdin.write(one_line(msg.data).encode() + b"\n")
        await stdin.drain()


async def _stdout_to_ws(stdout: asyncio.StreamReader, ws: web.WebSocketResponse) -> None:
    while True:
        try:
            line = await stdout.readline()
        except ValueError:  # a line over the bound: end rather than cut a message
            return
        if not line:
            return
        text = line.decode("utf-8", "replace").rstrip("\r\n")
        if text:
            await ws.send_str(text)


async def _pump(ws: web.WebSocketResponse, proc: asyncio.subprocess.Process) -> bool:
    """Relay both ways until one side ends; True when it was the server outside."""
    if proc.stdin is None or proc.stdout is None:  # both are PIPEs: never, but typed so
        return True
    up = asyncio.create_task(_ws_to_stdin(ws, proc.stdin))
    down = asyncio.create_task(_stdout_to_ws(proc.stdout, ws))
    try:
        done, _ = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (up, down):
            task.cancel()
        await asyncio.gather(up, down, return_exceptions=True)
    return down in done and up not in done


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """Close its stdin (the server ends on EOF), then kill its whole session."""
    try:
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        if proc.returncode is None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), GRACE_S)
    finally:  # cancelled or not: also whatever it left running in its session
        _kill_group(proc.pid)
    await proc.wait()


# -- inside: `oms mcp` -------------------------------------------------------------------


class _TooLong(Exception):
    pass


def _say(message: str) -> None:
    sys.stderr.write(f"oms: unavailable: {sanitize(message)}\n")
    sys.stderr.flush()


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 16)
    except OSError:  # a closed or broken stdin ends the relay like EOF
        return b""


def _read_lines(fd: int, loop: asyncio.AbstractEventLoop, queue: Any) -> None:
    """A thread: stdin lines into `queue`, then b"" at EOF; a line over the bound is queued as
    it stands and ends the reading. A daemon on the raw descriptor (no buffered-reader lock),
    so a read still blocked at exit never holds or crashes the process."""

    def put(line: bytes) -> None:
        with contextlib.suppress(RuntimeError):  # the relay has ended and its loop closed
            loop.call_soon_threadsafe(queue.put_nowait, line)

    pieces: list[bytes] = []  # of the line not yet ended: joined once, never re-copied
    while chunk := _read(fd):
        *ends, rest = chunk.split(b"\n")
        for end in ends:
            line, pieces = b"".join([*pieces, end, b"\n"]), []
            put(line)
            if len(line) > MAX_MESSAGE_BYTES:
                return
        pieces += [rest] if rest else []
        if sum(map(len, pieces)) > MAX_MESSAGE_BYTES:
            put(b"".join(pieces))
            return
    if pieces:
        put(b"".join(pieces))
    put(b"")


async def _stdin_to_ws(queue: asyncio.Queue[bytes], ws: aiohttp.ClientWebSocketResponse) -> None:
    while line := await queue.get():
        if len(line) > MAX_MESSAGE_BYTES:
            raise _TooLong
        text = line.decode("utf-8", "replace").strip()
        if text:
            await ws.send_str(text)


async def _ws_to_stdout(ws: aiohttp.ClientWebSocketResponse, out: BinaryIO) -> int:
    """Relay the messages as lines until the socket ends; how many there were."""
    lines = 0
    async for msg in ws:
        if msg.type is not WSMsgType.TEXT:
            break
        out.write(one_line(msg.data).encode() + b"\n")
        out.flush()
        lines += 1
    return lines


async def _relay(socket_path: str, stdin_fd: int | None, stdout: BinaryIO,
                 path: str = MCP_PATH) -> int:  # fmt: skip
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=socket_path)) as s:
        try:
            ws = await s.ws_connect(f"{HOST}{path}", max_msg_size=MAX_MESSAGE_BYTES,
                                    compress=0)  # fmt: skip
        except (aiohttp.ClientError, OSError) as exc:
            _say(f"cannot reach oms outside through {socket_path}: {exc}")
            return EXIT_UNAVAILABLE
        if stdin_fd is None:  # the waiter: no input, its answer is the close code
            lines = await _ws_to_stdout(ws, stdout)
            await ws.close()
            code = ws.close_code or 0
            if code == EXIT_CLOSE_BASE + WAKE_EXIT and not lines:
                # Exit 2 is also a usage error's: without a notification line it must not
                # wake the conductor (Claude Code re-wakes it on 2; it would loop).
                _say("oms conductor wait-event outside failed (exit 2) with no notification")
                return EXIT_UNAVAILABLE
            if EXIT_CLOSE_BASE <= code < EXIT_CLOSE_BASE + 256:
                return code - EXIT_CLOSE_BASE
            if code in (0, WSCloseCode.OK):
                return 0
            _say(f"oms outside ended the connection (close code {code})")
            return EXIT_UNAVAILABLE
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        threading.Thread(target=_read_lines, args=(stdin_fd, loop, queue), daemon=True).start()
        up = asyncio.create_task(_stdin_to_ws(queue, ws))
        down = asyncio.create_task(_ws_to_stdout(ws, stdout))
        done, _ = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        for task in (up, down):
            task.cancel()
        await asyncio.gather(up, down, return_exceptions=True)
        await ws.close()
        if up in done:  # stdin ended first: the client is done (or sent too much)
            if not isinstance(up.exception(), _TooLong):
                return 0
            _say(f"a JSON-RPC message over {MAX_MESSAGE_BYTES} bytes cannot be relayed")
            return EXIT_UNAVAILABLE
        if ws.close_code not in (None, WSCloseCode.OK):
            _say(f"oms mcp outside ended the connection (close code {ws.close_code})")
            return EXIT_UNAVAILABLE
        return 0


def relay_stdio(socket_path: str, path: str = MCP_PATH) -> int:
    """INSIDE: `oms mcp` (or, at `path`, `oms conductor bridge`) as a relay over the
    broker's unix socket, until either side ends. Exit 4 with one line on stderr when the
    broker cannot be reached."""
    return asyncio.run(_relay(socket_path, 0, sys.stdout.buffer, path))  # fd 0: the raw stdin


def relay_wait(socket_path: str) -> int:
    """INSIDE: `oms conductor wait-event` outside, its stdout relayed and its exit code
    returned (exit 4 when the broker cannot be reached)."""
    return asyncio.run(_relay(socket_path, None, sys.stdout.buffer, WAIT_PATH))
