"""The `--egress tunnel` CONNECT proxy (gatekeeper/agent/tunnel.py), in this process.

Loopback only: provider hosts are overridden to servers the test owns (a TLS server with a
test CA's certificate, or a plain listener); no real host is ever looked up or contacted.
"""

from __future__ import annotations

import http.client
import os
import socket
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import h11
import pytest
from support.sandbox import traversable_dir
from support.tls import ANSWER, CertAuthority, client_context, make_test_ca, tls_http_server

from gatekeeper.agent import tunnel as tunnel_mod
from gatekeeper.agent.payloads import TunnelConnection
from gatekeeper.agent.tunnel import PROVIDER_HOSTS, Tunnel, connect_overrides, judge
from gatekeeper.errors import ConfigError, InternalError, Unavailable

RUN_ID = "20261201T150000Z-0a1b2c3d"
HOST = "api.anthropic.com"
# Not a timed assertion: only so that a broken tunnel fails a test instead of hanging it.
STUCK_S = 30


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # Under /tmp: a unix socket's path must stay short (tmp_path can be too long).
    with traversable_dir("oms-tunnel-") as d:
        yield d


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> CertAuthority:
    return make_test_ca(tmp_path_factory.mktemp("ca"), (HOST, "chatgpt.com"))


@contextmanager
def running(
    path: Path, overrides: dict[str, tuple[str, int]] | None = None
) -> Iterator[tuple[Tunnel, list[TunnelConnection]]]:
    records: list[Any] = []
    tunnel = Tunnel(path, run_id=RUN_ID, record=records.append, overrides=overrides or {})
    tunnel.start()
    try:
        yield tunnel, records
    finally:
        tunnel.stop()


@contextmanager
def listener() -> Iterator[socket.socket]:
    """A loopback listening socket the test owns: a connect to it waits in its backlog."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        s.settimeout(STUCK_S)
        yield s


def to(where: Any) -> dict[str, tuple[str, int]]:
    """Overrides sending HOST to this test server or listener."""
    addr = where.server_address if hasattr(where, "server_address") else where.getsockname()
    return {HOST: (addr[0], addr[1])}


def pending_connections(lsock: socket.socket) -> int:
    lsock.setblocking(False)
    n = 0
    while True:
        try:
            conn, _ = lsock.accept()
        except BlockingIOError:
            return n
        conn.close()
        n += 1


def unix_client(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(STUCK_S)
    s.connect(str(path))
    return s


def accept(lsock: socket.socket) -> socket.socket:
    conn, _ = lsock.accept()
    conn.settimeout(STUCK_S)
    return conn


def send_head(
    path: Path, request: h11.Request, extra: bytes = b""
) -> tuple[int, bytes, socket.socket]:
    """Send one request head to the tunnel; (status, refusal body, the socket)."""
    s = unix_client(path)
    client = h11.Connection(h11.CLIENT)
    data = client.send(request) or b""
    if request.method != b"CONNECT":
        data += client.send(h11.EndOfMessage()) or b""
    s.sendall(data + extra)
    status, body = 0, b""
    while True:
        event = client.next_event()
        if event is h11.NEED_DATA:
            client.receive_data(s.recv(65536))
        elif isinstance(event, h11.Response):
            status = event.status_code
            if status == 200 and request.method == b"CONNECT":
                return status, body, s
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            return status, body, s


def connect(path: Path, target: str, extra: bytes = b"") -> tuple[int, bytes, socket.socket]:
    request = h11.Request(method="CONNECT", target=target, headers=[("host", target)])
    return send_head(path, request, extra)


def https_get(s: socket.socket, ca: CertAuthority, name: str = HOST) -> tuple[int, bytes]:
    """TLS with the test CA and SNI `name` over an open tunnel, then one GET."""
    tls = client_context(ca).wrap_socket(s, server_hostname=name)
    conn = http.client.HTTPConnection(name)
    conn.sock = tls
    conn.request("GET", "/v1/models")
    response = conn.getresponse()
    return response.status, response.read()


def read_to_eof(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


# -- judge: the whole allow rule, pure --------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "target", "status", "host", "port"),
    [
        (b"CONNECT", b"api.anthropic.com:443", 200, "api.anthropic.com", 443),
        (b"CONNECT", b"API.OpenAI.com:443", 200, "api.openai.com", 443),
        (b"CONNECT", b"claude.ai:443", 200, "claude.ai", 443),
        (b"CONNECT", b"evil.example:443", 403, "evil.example", 443),
        (b"CONNECT", b"api.anthropic.com.evil.example:443", 403,
         "api.anthropic.com.evil.example", 443),
        (b"CONNECT", b"api.anthropic.com.:443", 403, "api.anthropic.com.", 443),
        (b"CONNECT", b"api.anthropic.com:80", 403, "api.anthropic.com", 80),
        (b"CONNECT", b"api.anthropic.com:0443", 403, "api.anthropic.com", 443),
        (b"CONNECT", b"api.anthropic.com:99999", 403, "api.anthropic.com", 0),
        (b"CONNECT", b"127.0.0.1:443", 403, "127.0.0.1", 443),
        (b"CONNECT", b"[::1]:443", 403, "[::1]", 443),
        (b"CONNECT", b"user@api.anthropic.com:443", 403, "user@api.anthropic.com", 443),
        (b"CONNECT", b"api.anthropic.com", 400, "api.anthropic.com", 0),
        (b"GET", b"/", 405, "", 0),
        (b"GET", b"http://api.anthropic.com/", 405, "", 0),
    ],
)  # fmt: skip
def test_judge_allows_only_connect_to_a_provider_host_on_443(
    method: bytes, target: bytes, status: int, host: str, port: int
) -> None:
    verdict = judge(method, target)
    assert (verdict.status, verdict.host, verdict.port) == (status, host, port)
    assert (verdict.reason is None) == (status == 200)


@pytest.mark.parametrize(
    ("target", "why"),
    [(b"127.0.0.1:443", "IP literal"), (b"[::1]:443", "IP literal"),
     (b"evil.example:443", "not a provider host"), (b"api.openai.com:8443", "port is not 443"),
     (b"api.openai.com", "not host:port")],
)  # fmt: skip
def test_judge_says_why_it_refuses(target: bytes, why: str) -> None:
    assert why in (judge(b"CONNECT", target).reason or "")


def test_provider_hosts_are_the_two_apis_and_their_logins() -> None:
    assert {"api.anthropic.com", "api.openai.com", "claude.ai", "console.anthropic.com",
            "chatgpt.com", "auth.openai.com"} == PROVIDER_HOSTS  # fmt: skip


# -- connect_overrides ------------------------------------------------------------------------


def test_connect_overrides_maps_allowed_hosts_to_addresses() -> None:
    env = {"OMS_EGRESS_TUNNEL_CONNECT": " API.anthropic.com=127.0.0.1:8443, chatgpt.com=[::1]:9,"}
    assert connect_overrides(env) == {HOST: ("127.0.0.1", 8443), "chatgpt.com": ("::1", 9)}
    assert connect_overrides({}) == {}


@pytest.mark.parametrize(
    "value",
    ["evil.example=127.0.0.1:8443", "api.anthropic.com", "api.anthropic.com=127.0.0.1",
     "api.anthropic.com=127.0.0.1:x", "api.anthropic.com=127.0.0.1:70000", "=127.0.0.1:1"],
)  # fmt: skip
def test_connect_overrides_refuses_other_hosts_and_malformed_entries(value: str) -> None:
    with pytest.raises(ConfigError, match="OMS_EGRESS_TUNNEL_CONNECT"):
        connect_overrides({"OMS_EGRESS_TUNNEL_CONNECT": value})


def test_tunnel_refuses_an_override_of_another_host_and_a_bad_run_id(sock_dir: Path) -> None:
    with pytest.raises(ConfigError, match=r"evil\.example"):
        Tunnel(sock_dir / "t.sock", run_id=RUN_ID, record=print,
               overrides={"evil.example": ("127.0.0.1", 1)})  # fmt: skip
    with pytest.raises(InternalError, match="not a run id"):
        Tunnel(sock_dir / "t.sock", run_id="../x", record=print, overrides={})


# -- the tunnel -------------------------------------------------------------------------------


def test_connect_to_a_provider_host_splices_tls_end_to_end_and_records_bytes(
    sock_dir: Path, ca: CertAuthority
) -> None:
    with tls_http_server(ca) as server, running(sock_dir / "t.sock", to(server)) as (t, recs):
        status, _, s = connect(sock_dir / "t.sock", f"{HOST}:443")
        assert status == 200
        with s:
            assert https_get(s, ca) == (200, ANSWER + b"path=/v1/models\n")
        totals = t.stop()
        assert server.seen_sni == [HOST]
    [rec] = recs
    assert (rec.run_id, rec.host, rec.port, rec.action, rec.reason) == (
        RUN_ID, HOST, 443, "connected", None)  # fmt: skip
    assert rec.bytes_up > 100 and rec.bytes_down > len(ANSWER)  # TLS records, not plaintext
    assert totals == (1, 0, rec.bytes_up + rec.bytes_down)


def test_host_names_match_whatever_their_case(sock_dir: Path, ca: CertAuthority) -> None:
    with tls_http_server(ca) as server, running(sock_dir / "t.sock", to(server)) as (t, recs):
        status, _, s = connect(sock_dir / "t.sock", "API.Anthropic.COM:443")
        with s:
            assert status == 200 and https_get(s, ca)[0] == 200
        t.stop()
    assert [(r.host, r.action) for r in recs] == [(HOST, "connected")]


@pytest.fixture
def outbound(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every DNS lookup and every IP connect this process attempts from now on."""
    seen: list[object] = []
    real_getaddrinfo, real_connect = socket.getaddrinfo, socket.socket.connect

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(("dns", host))
        return real_getaddrinfo(host, *args, **kwargs)

    def connect_(self: socket.socket, address: Any) -> None:
        if self.family != socket.AF_UNIX:
            seen.append(("connect", address))
        real_connect(self, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect_)
    return seen


REFUSED = [
    (h11.Request(method="CONNECT", target="evil.example:443", headers=[("host", "x")]), 403),
    (h11.Request(method="CONNECT", target="api.anthropic.com:80", headers=[("host", "x")]), 403),
    (h11.Request(method="CONNECT", target="127.0.0.1:443", headers=[("host", "x")]), 403),
    (h11.Request(method="CONNECT", target="[::1]:443", headers=[("host", "x")]), 403),
    (h11.Request(method="CONNECT", target="api.anthropic.com", headers=[("host", "x")]), 400),
    (h11.Request(method="GET", target="/", headers=[("host", HOST)]), 405),
    (h11.Request(method="GET", target="http://api.anthropic.com/", headers=[("host", HOST)]), 405),
]


@pytest.mark.parametrize(("request_", "status"), REFUSED, ids=lambda r: getattr(r, "target", r))
def test_refused_requests_make_no_dns_lookup_and_no_outbound_connection(
    sock_dir: Path, outbound: list[object], request_: h11.Request, status: int
) -> None:
    with listener() as lsock, running(sock_dir / "t.sock", to(lsock)) as (t, recs):
        got, body, s = send_head(sock_dir / "t.sock", request_)
        with s:
            assert read_to_eof(s) == b""  # and then the tunnel closes the connection
        assert t.stop() == (1, 1, 0)
        assert (got, outbound, pending_connections(lsock)) == (status, [], 0)
    assert body.startswith(b"oms tunnel: ")
    [rec] = recs
    assert rec.action == "refused" and rec.reason and (rec.bytes_up, rec.bytes_down) == (0, 0)


def test_the_outbound_probe_sees_an_allowed_connect(sock_dir: Path, outbound: list[object]) -> None:
    """The control for the test above: the same probe and listener do see an allowed one."""
    with listener() as lsock, running(sock_dir / "t.sock", to(lsock)) as (t, recs):
        status, _, s = connect(sock_dir / "t.sock", f"{HOST}:443")
        s.close()
        t.stop()
        assert status == 200
        assert outbound == [("connect", lsock.getsockname())]
        assert pending_connections(lsock) == 1
    assert [r.action for r in recs] == ["connected"]


def test_a_malformed_head_is_400_and_recorded_refused(sock_dir: Path) -> None:
    with running(sock_dir / "t.sock") as (t, recs):
        with unix_client(sock_dir / "t.sock") as s:
            s.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            assert read_to_eof(s).startswith(b"HTTP/1.1 400 ")
        t.stop()
    assert [(r.action, r.reason) for r in recs] == [("refused", "malformed request")]


def test_a_client_that_leaves_without_a_request_is_recorded_refused(sock_dir: Path) -> None:
    with running(sock_dir / "t.sock") as (t, recs):
        with unix_client(sock_dir / "t.sock") as s:
            s.shutdown(socket.SHUT_WR)
            assert read_to_eof(s) == b""
        assert t.stop() == (1, 1, 0)
    assert [(r.host, r.action, r.reason) for r in recs] == [("", "refused", "no CONNECT request")]


def test_bytes_sent_right_after_the_connect_head_reach_upstream(sock_dir: Path) -> None:
    with listener() as lsock, running(sock_dir / "t.sock", to(lsock)) as (t, recs):
        status, _, s = connect(sock_dir / "t.sock", f"{HOST}:443", extra=b"EARLY")
        up = accept(lsock)
        with s, up:
            assert status == 200
            s.shutdown(socket.SHUT_WR)
            assert read_to_eof(up) == b"EARLY"  # and the half-close reached it too
            up.sendall(b"LATE")
            up.shutdown(socket.SHUT_WR)
            assert read_to_eof(s) == b"LATE"
        t.stop()
    assert [(r.bytes_up, r.bytes_down) for r in recs] == [(5, 4)]


def test_many_concurrent_tunnels_each_carry_and_record_their_own_bytes(
    sock_dir: Path, ca: CertAuthority
) -> None:
    n = 16
    barrier = threading.Barrier(n)
    answers: list[tuple[int, bytes]] = []

    def one() -> None:
        status, _, s = connect(sock_dir / "t.sock", f"{HOST}:443")
        barrier.wait()  # all n tunnels are open at once before any is used
        with s:
            answers.append(https_get(s, ca) if status == 200 else (status, b""))

    with tls_http_server(ca) as server, running(sock_dir / "t.sock", to(server)) as (t, recs):
        threads = [threading.Thread(target=one) for _ in range(n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        totals = t.stop()
    assert answers == [(200, ANSWER + b"path=/v1/models\n")] * n
    assert [r.action for r in recs] == ["connected"] * n
    assert totals == (n, 0, sum(r.bytes_up + r.bytes_down for r in recs))


def test_stop_closes_open_tunnels_and_records_them(sock_dir: Path) -> None:
    with listener() as lsock, running(sock_dir / "t.sock", to(lsock)) as (t, recs):
        _, _, s = connect(sock_dir / "t.sock", f"{HOST}:443")
        up = accept(lsock)
        with s, up:
            s.sendall(b"abc")
            assert up.recv(3) == b"abc"
            assert t.stop() == (1, 0, 3)
            assert read_to_eof(s) == b"" and read_to_eof(up) == b""  # both ends closed
    assert [(r.action, r.bytes_up) for r in recs] == [("connected", 3)]
    assert not (sock_dir / "t.sock").exists()


def test_upstream_unreachable_is_502_and_recorded_refused(sock_dir: Path) -> None:
    with listener() as lsock:
        closed = lsock.getsockname()  # nothing listens there once this block ends
    with running(sock_dir / "t.sock", {HOST: closed}) as (t, recs):
        status, body, s = connect(sock_dir / "t.sock", f"{HOST}:443")
        s.close()
        assert t.stop() == (1, 1, 0)
    assert status == 502 and b"upstream unreachable" in body
    assert [(r.host, r.action) for r in recs] == [(HOST, "refused")]


def test_more_open_tunnels_than_the_cap_are_refused_503(
    sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tunnel_mod, "MAX_TUNNELS", 1)
    with listener() as lsock, running(sock_dir / "t.sock", to(lsock)) as (t, recs):
        first, _, s1 = connect(sock_dir / "t.sock", f"{HOST}:443")
        second, _, s2 = connect(sock_dir / "t.sock", f"{HOST}:443")
        s1.close()
        s2.close()
        t.stop()
    assert (first, second) == (200, 503)
    assert sorted(r.action for r in recs) == ["connected", "refused"]


def test_the_socket_is_0600_and_owned_by_socket_uid(sock_dir: Path) -> None:
    uid = 65534 if os.geteuid() == 0 else os.geteuid()  # only root may give a socket away
    tunnel = Tunnel(sock_dir / "t.sock", run_id=RUN_ID, record=print, overrides={},
                    socket_uid=uid)  # fmt: skip
    tunnel.start()
    try:
        st = os.lstat(sock_dir / "t.sock")
        assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
        assert st.st_uid == uid
    finally:
        assert tunnel.stop() == (0, 0, 0)


def test_start_twice_is_refused_and_stop_twice_gives_the_same_totals(sock_dir: Path) -> None:
    with running(sock_dir / "t.sock") as (t, _):
        with pytest.raises(InternalError, match="started twice"):
            t.start()
        connect(sock_dir / "t.sock", "evil.example:443")[2].close()
        assert t.stop() == t.stop() == (1, 1, 0)


def test_start_refuses_a_socket_path_that_exists_and_leaves_it(sock_dir: Path) -> None:
    (sock_dir / "t.sock").write_text("not a socket")
    tunnel = Tunnel(sock_dir / "t.sock", run_id=RUN_ID, record=print, overrides={})
    with pytest.raises(Unavailable, match="cannot be listened on"):
        tunnel.start()
    assert (sock_dir / "t.sock").read_text() == "not a socket"
    assert tunnel.stop() == (0, 0, 0)


def test_a_record_that_fails_closes_the_tunnel_and_stop_raises(sock_dir: Path) -> None:
    def record(payload: object) -> None:
        raise OSError("evidence store is full")

    tunnel = Tunnel(sock_dir / "t.sock", run_id=RUN_ID, record=record, overrides={})
    tunnel.start()
    status, _, s = connect(sock_dir / "t.sock", "evil.example:443")
    with s:
        assert status == 403 and read_to_eof(s) == b""
    with socket.socket(socket.AF_UNIX) as again, pytest.raises(ConnectionRefusedError):
        again.connect(str(sock_dir / "t.sock"))  # no connection after an unrecorded one
    with pytest.raises(Unavailable, match="evidence store is full"):
        tunnel.stop()


def test_the_agent_is_sent_to_the_relay_port_for_https_only() -> None:
    env = tunnel_mod.proxy_env()
    assert env == {"HTTPS_PROXY": "http://127.0.0.1:47101", "https_proxy": "http://127.0.0.1:47101"}
    assert not set(env) & set(tunnel_mod.PROXY_UNSET)
