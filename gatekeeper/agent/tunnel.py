"""`--egress tunnel`: an HTTP CONNECT proxy on a unix socket, to the provider hosts only.

For subscription logins that cannot be brokered (the agent's CLI speaks TLS end to end with
its provider), inside the sandbox `HTTPS_PROXY` leads through the loopback relay to this
socket. Only `CONNECT <provider host>:443` is answered 200 and spliced, opaque (no TLS
interception); anything else is refused before any DNS lookup or outbound connection.
Each connection is one `TunnelConnection` record when it ends: where, and how many bytes.
h11 reads the request head (aiohttp's server does not hand a connection over after CONNECT).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import h11
from pydantic import TypeAdapter, ValidationError

from evidence import Payload
from gatekeeper.agent.payloads import RunId, TunnelConnection
from gatekeeper.errors import ConfigError, InternalError, Unavailable
from gatekeeper.text import sanitize

# The two model APIs, and the hosts of the two CLIs' subscription logins (Claude Code's
# OAuth, Codex's ChatGPT sign-in).
PROVIDER_HOSTS: frozenset[str] = frozenset({
    "api.anthropic.com", "api.openai.com",
    "claude.ai", "console.anthropic.com", "chatgpt.com", "auth.openai.com",
})  # fmt: skip
PORT = 443
RELAY_PORT = 47_101  # inside: the relay's loopback port for this socket (HTTPS_PROXY)
# Variables the agent's environment must not carry beside proxy_env(): they would send
# plain HTTP or chosen hosts around the tunnel's rule (curl, Node, reqwest read them).
PROXY_UNSET = ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy")
OVERRIDE_ENV = "OMS_EGRESS_TUNNEL_CONNECT"
MAX_TUNNELS = 64  # open at once; more are refused (503) rather than exhausting descriptors
HEAD_TIMEOUT_S = 30.0  # a client that never finishes its CONNECT head does not hold a slot
UPSTREAM_TIMEOUT_S = 30.0  # to connect to the provider; the kernel's own is minutes
_CHUNK = 64 * 1024
_HOST_TEXT = 253  # a DNS name's longest form: what a refused record keeps of a target


def connect_overrides(environ: Mapping[str, str]) -> dict[str, tuple[str, int]]:
    """Where each overridden provider host:443 is really connected (tests point it at a
    loopback server), from `OMS_EGRESS_TUNNEL_CONNECT="host=addr:port,…"` in oms' own
    environment. ConfigError for a malformed entry or a host the tunnel does not allow."""
    out: dict[str, tuple[str, int]] = {}
    for entry in environ.get(OVERRIDE_ENV, "").split(","):
        if not entry.strip():
            continue
        host, eq, where = entry.strip().partition("=")
        addr, colon, port = where.rpartition(":")
        addr = addr.removeprefix("[").removesuffix("]")
        host = host.strip().lower()
        if not (eq and colon and addr and port.isascii() and port.isdigit()):
            raise ConfigError(f"{OVERRIDE_ENV}: {sanitize(entry, 200)!r} is not host=address:port")
        if host not in PROVIDER_HOSTS:
            raise ConfigError(
                f"{OVERRIDE_ENV}: {sanitize(host, 200)!r} is not a host the tunnel allows "
                f"({', '.join(sorted(PROVIDER_HOSTS))})"
            )
        if not 0 < int(port) < 65536:
            raise ConfigError(f"{OVERRIDE_ENV}: port {port} of {host} is out of range")
        out[host] = (addr, int(port))
    return out


def proxy_env() -> dict[str, str]:
    """The agent's proxy variables under `--egress tunnel` (both spellings: clients differ
    in which they read); the rest of PROXY_UNSET stays out of its environment."""
    url = f"http://127.0.0.1:{RELAY_PORT}"
    return {"HTTPS_PROXY": url, "https_proxy": url}


@dataclass(frozen=True)
class Verdict:
    """What the tunnel makes of one request head: allowed when `status` is 200."""

    host: str
    port: int
    status: int
    reason: str | None = None


def judge(method: bytes, target: bytes) -> Verdict:
    """Only `CONNECT <provider host>:443`: a name from PROVIDER_HOSTS (any case), never an
    IP literal, never another port. Pure: nothing is looked up or connected here."""
    if method != b"CONNECT":
        name = sanitize(method.decode("ascii", "replace"), 20)
        return Verdict("", 0, 405, f"method {name} is not CONNECT")
    text = target.decode("ascii", "replace")
    host, colon, port_text = text.rpartition(":")
    port = int(port_text) if port_text.isascii() and port_text.isdigit() else 0
    port = port if port < 65536 else 0
    host = sanitize(host.lower(), _HOST_TEXT)
    if not colon or not host:
        return Verdict(sanitize(text, _HOST_TEXT), port, 400, "target is not host:port")
    if _is_ip_literal(host):
        return Verdict(host, port, 403, "IP literal: only provider host names are allowed")
    if host not in PROVIDER_HOSTS:
        return Verdict(host, port, 403, "host is not a provider host the tunnel allows")
    if port_text != str(PORT):
        return Verdict(host, port, 403, f"port is not {PORT}")
    return Verdict(host, PORT, 200)


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return False
    return True


@dataclass
class _Conn:
    """One connection's running tally (mutable, private to the tunnel's loop)."""

    host: str = ""
    port: int = 0
    action: Literal["connected", "refused"] = "refused"
    reason: str | None = "no CONNECT request"
    up: int = 0
    down: int = 0


class Tunnel:
    """The CONNECT proxy of one run, on its own thread and event loop.

    `record` is called on the tunnel's thread, once per connection as it ends, one call at
    a time. If it raises, the tunnel stops taking connections and `stop()` raises
    Unavailable: a connection that cannot be recorded is not one to keep open.
    """

    def __init__(
        self,
        socket_path: Path,
        *,
        run_id: str,
        record: Callable[[Payload], None],
        overrides: Mapping[str, tuple[str, int]],
        socket_uid: int | None = None,
    ) -> None:
        try:
            TypeAdapter(RunId).validate_python(run_id)
        except ValidationError:
            raise InternalError(f"tunnel: {sanitize(run_id, 80)!r} is not a run id") from None
        unknown = set(overrides) - PROVIDER_HOSTS
        if unknown:
            raise ConfigError(f"tunnel: cannot override {', '.join(sorted(unknown))}")
        self._path = socket_path
        self._run_id = run_id
        self._record = record
        self._overrides = dict(overrides)
        self._uid = socket_uid
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        self._record_error: BaseException | None = None
        self._inode: int | None = None
        self._totals = [0, 0, 0]  # connections, refused, bytes
        self._stopped = False

    def start(self) -> None:
        """Listen on the socket (mode 0600, owned by `socket_uid` when given) on a thread of
        its own; returns once it listens. Unavailable when the socket cannot be made."""
        if self._thread is not None:
            raise InternalError("tunnel: started twice")
        self._thread = threading.Thread(target=self._run, name="oms-tunnel", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._start_error is not None:
            self._thread.join()
            err = self._start_error
            raise Unavailable(f"the tunnel socket {self._path} cannot be listened on: {err}")

    def stop(self) -> tuple[int, int, int]:
        """Close every open tunnel (each is recorded) and the socket; (connections, refused,
        bytes) over the whole run, where connections counts refused ones too."""
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and not self._stopped:
            self._stopped = True
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result()
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
        if self._record_error is not None:
            raise Unavailable(f"the tunnel could not record a connection: {self._record_error}")
        connections, refused, total = self._totals
        return connections, refused, total

    # The tunnel's own thread from here on.

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._listen())
        except OSError as exc:
            self._start_error = exc
            self._ready.set()
            loop.close()
            return
        self._loop = loop
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _listen(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # Linux gives a socket file the mode of the socket's inode: 0600 from birth,
            # with no moment in which another uid could connect.
            os.fchmod(sock.fileno(), 0o600)
            sock.bind(str(self._path))
            self._inode = os.lstat(self._path).st_ino
            if self._uid is not None:
                os.chown(self._path, self._uid, -1, follow_symlinks=False)
            self._server = await asyncio.start_unix_server(self._handle, sock=sock)
        except OSError:
            sock.close()
            self._unlink()
            raise

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        await asyncio.sleep(0)  # a connection accepted just before: its task joins the set
        while self._tasks:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        self._unlink()

    def _unlink(self) -> None:
        with contextlib.suppress(OSError):
            if self._inode is not None and os.lstat(self._path).st_ino == self._inode:
                os.unlink(self._path)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:  # always: the server runs each connection as a task
            self._tasks.add(task)
        conn = _Conn()
        try:
            await self._serve(conn, reader, writer)
        except (OSError, h11.ProtocolError):
            pass  # a peer gone or misbehaving ends its own connection; the record says how far
        except asyncio.CancelledError:
            pass  # stop() cancels: this task is the connection's own, so the cancel ends here
        finally:
            writer.close()
            self._tasks.discard(task)
            self._finish(conn)

    async def _serve(
        self, conn: _Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        http = h11.Connection(h11.SERVER)
        try:
            request = await asyncio.wait_for(_read_head(http, reader), HEAD_TIMEOUT_S)
        except TimeoutError:
            return
        except h11.RemoteProtocolError:
            conn.reason = "malformed request"
            await _answer(writer, http, 400, conn.reason)
            return
        if request is None:
            return
        verdict = judge(request.method, request.target)
        conn.host, conn.port, conn.reason = verdict.host, verdict.port, verdict.reason
        if verdict.status == 200 and len(self._tasks) > MAX_TUNNELS:
            verdict = Verdict(verdict.host, verdict.port, 503, f"over {MAX_TUNNELS} open tunnels")
            conn.reason = verdict.reason
        if verdict.status != 200:
            await _answer(writer, http, verdict.status, verdict.reason or "refused")
            return
        await self._tunnel(conn, http, reader, writer)

    async def _tunnel(
        self,
        conn: _Conn,
        http: h11.Connection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        addr, port = self._overrides.get(conn.host, (conn.host, PORT))
        try:
            opening = asyncio.open_connection(addr, port)
            up_reader, up_writer = await asyncio.wait_for(opening, UPSTREAM_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            why = getattr(exc, "strerror", None) or type(exc).__name__
            conn.reason = f"upstream unreachable: {why}"
            await _answer(writer, http, 502, conn.reason)
            return
        try:
            ok = h11.Response(status_code=200, headers=[], reason=b"Connection established")
            writer.write(http.send(ok))
            conn.action, conn.reason = "connected", None
            early, _closed = http.trailing_data  # what the client sent right after its head
            if early:
                up_writer.write(early)
                conn.up += len(early)
            await asyncio.gather(
                _pump(reader, up_writer, writer, conn, "up"),
                _pump(up_reader, writer, up_writer, conn, "down"),
            )
        finally:
            up_writer.close()

    def _finish(self, conn: _Conn) -> None:
        self._totals[0] += 1
        self._totals[1] += int(conn.action == "refused")
        self._totals[2] += conn.up + conn.down
        if self._record_error is not None:
            return
        try:
            self._record(
                TunnelConnection(
                    run_id=self._run_id,
                    host=conn.host,
                    port=conn.port,
                    action=conn.action,
                    reason=conn.reason,
                    bytes_up=conn.up,
                    bytes_down=conn.down,
                )
            )
        except Exception as exc:  # fail closed: no unrecorded tunnels after this one
            self._record_error = exc
            if self._server is not None:
                self._server.close()
            for task in self._tasks:
                task.cancel()


async def _read_head(http: h11.Connection, reader: asyncio.StreamReader) -> h11.Request | None:
    """The request head and its end (a CONNECT carries no body); None if the client left."""
    request: h11.Request | None = None
    while True:
        event = http.next_event()
        if event is h11.NEED_DATA:
            http.receive_data(await reader.read(_CHUNK))
        elif isinstance(event, h11.Request) and request is None:
            request = event
        elif isinstance(event, h11.EndOfMessage) and request is not None:
            return request
        elif isinstance(event, h11.ConnectionClosed):
            return None
        else:  # a body, or anything else before the head ends
            raise h11.RemoteProtocolError("a CONNECT request carries no body")


async def _answer(
    writer: asyncio.StreamWriter, http: h11.Connection, status: int, why: str
) -> None:
    """A refusal the client can read, then the connection closes."""
    body = f"oms tunnel: {why}\n".encode("ascii", "replace")
    headers = [("content-type", "text/plain"), ("content-length", str(len(body)))]
    headers += [("connection", "close")] + ([("allow", "CONNECT")] if status == 405 else [])
    if http.our_state is not h11.SEND_RESPONSE and http.our_state is not h11.IDLE:
        return
    writer.write(http.send(h11.Response(status_code=status, headers=headers)))
    writer.write(http.send(h11.Data(data=body)) + http.send(h11.EndOfMessage()))
    await writer.drain()


async def _pump(
    src: asyncio.StreamReader,
    dst: asyncio.StreamWriter,
    src_writer: asyncio.StreamWriter,
    conn: _Conn,
    direction: str,
) -> None:
    """Copy one direction until EOF, then half-close `dst`; on a failure close both ends so
    that the other direction ends too."""
    try:
        while chunk := await src.read(_CHUNK):
            dst.write(chunk)
            if direction == "up":
                conn.up += len(chunk)
            else:
                conn.down += len(chunk)
            await dst.drain()
        if dst.can_write_eof():
            dst.write_eof()
    except OSError:
        dst.close()
        src_writer.close()
