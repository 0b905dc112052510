"""`--egress tunnel` from inside a real bwrap with its own empty network namespace.

The sandbox reaches nothing but the tunnel's unix socket (bound in read-only, as oms binds
its run directory); a provider host is overridden to a loopback TLS server outside that
holds a test CA's certificate, so TLS, SNI and the name check are real and no real host is
ever contacted. Each script prints a start and an end marker, asserted, so a sandbox that
refused to run never counts as a pass.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.sandbox import traversable_dir
from support.tls import ANSWER, CertAuthority, make_test_ca, tls_http_server

from gatekeeper.agent.tunnel import Tunnel, connect_overrides

RUN_ID = "20261201T150000Z-0a1b2c3d"
HOST = "api.anthropic.com"
BWRAP = "/usr/bin/bwrap"
PY = "/usr/bin/python3"  # Debian's python: stdlib only inside
CURL = "/usr/bin/curl"
RELAY_PORT = 47_101  # where the agent's HTTPS_PROXY points inside


# /usr and the merged-/usr links the dynamic loader needs.
_USR = ("--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin")  # fmt: skip


def _bwrap_netns_works() -> bool:
    try:
        probe = subprocess.run(
            [BWRAP, "--unshare-all", *_USR, "--", "/usr/bin/true"],
            capture_output=True, check=False, timeout=30,
        )  # fmt: skip
    except OSError:
        return False
    return probe.returncode == 0


pytestmark = pytest.mark.skipif(
    not _bwrap_netns_works() or not Path(PY).exists(),
    reason="needs /usr/bin/bwrap able to unshare the network, and /usr/bin/python3",
)

# Inside: no direct way out, no DNS; CONNECT over the socket, then TLS with the test CA.
CLIENT = r"""
import http.client, socket, ssl, sys
print("START", flush=True)
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5).close()
    print("direct: connected")
except OSError:
    print("direct: refused")
s = socket.socket(socket.AF_UNIX)
s.connect("/t/t.sock")
s.sendall(b"CONNECT api.anthropic.com:443 HTTP/1.1\r\nHost: api.anthropic.com:443\r\n\r\n")
head = b""
while not head.endswith(b"\r\n\r\n"):
    head += s.recv(1)
print("proxy:", head.split(b"\r\n")[0].decode())
tls = ssl.create_default_context(cafile="/t/ca.pem").wrap_socket(
    s, server_hostname="api.anthropic.com")
conn = http.client.HTTPConnection("api.anthropic.com")
conn.sock = tls
conn.request("GET", "/v1/models")
r = conn.getresponse()
print("answer:", r.status, r.read().decode().splitlines()[0])
print("END", flush=True)
"""

# Inside: a loopback TCP -> unix socket relay (oms' relay does this in a real run) and curl
# with HTTPS_PROXY pointing at it, as the agent's CLI would.
CURL_THROUGH_RELAY = r"""
import socket, subprocess, sys, threading
def pipe(a, b):
    try:
        while d := a.recv(65536):
            b.sendall(d)
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass
def serve(lsock):
    while True:
        c, _ = lsock.accept()
        u = socket.socket(socket.AF_UNIX)
        u.connect("/t/t.sock")
        threading.Thread(target=pipe, args=(c, u), daemon=True).start()
        threading.Thread(target=pipe, args=(u, c), daemon=True).start()
lsock = socket.create_server(("127.0.0.1", int(sys.argv[1])))
threading.Thread(target=serve, args=(lsock,), daemon=True).start()
print("START", flush=True)
env = {"PATH": "/usr/bin", "HTTPS_PROXY": "http://127.0.0.1:" + sys.argv[1]}
for url in sys.argv[2:]:
    p = subprocess.run(["curl", "-q", "-sS", "--cacert", "/t/ca.pem", "--max-time", "60", url],
                       env=env, capture_output=True, text=True)
    print("curl", url, "exit", p.returncode, p.stdout.splitlines()[:1], p.stderr.strip())
print("END", flush=True)
"""


@pytest.fixture
def ca(tmp_path: Path) -> CertAuthority:
    return make_test_ca(tmp_path / "ca", (HOST,))


@pytest.fixture
def run_dir(ca: CertAuthority) -> Iterator[Path]:
    # Under /tmp and traversable: a short socket path the sandbox's uid can reach.
    with traversable_dir("oms-tunnel-e2e-") as d:
        (d / "ca.pem").write_bytes(ca.ca_pem.read_bytes())
        (d / "client.py").write_text(CLIENT)
        (d / "curl.py").write_text(CURL_THROUGH_RELAY)
        yield d


def in_sandbox(run_dir: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """argv in bwrap with every namespace unshared (the network too): /usr, and the run
    directory read-only at /t."""
    return subprocess.run(
        [BWRAP, "--unshare-all", "--die-with-parent", "--new-session",
         *_USR,
         "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
         "--ro-bind", str(run_dir), "/t", "--clearenv", "--setenv", "PATH", "/usr/bin",
         "--", *argv],
        capture_output=True, text=True, check=False, timeout=180,
    )  # fmt: skip


def tunnel_to(run_dir: Path, server: Any) -> tuple[Tunnel, list[Any]]:
    host, port = server.server_address[:2]
    env = {"OMS_EGRESS_TUNNEL_CONNECT": f"{HOST}={host}:{port}"}
    records: list[Any] = []
    tunnel = Tunnel(
        run_dir / "t.sock", run_id=RUN_ID, record=records.append,
        overrides=connect_overrides(env),
    )  # fmt: skip
    tunnel.start()
    return tunnel, records


def test_a_sandbox_without_network_reaches_a_provider_only_through_the_tunnel(
    run_dir: Path, ca: CertAuthority
) -> None:
    with tls_http_server(ca) as server:
        tunnel, records = tunnel_to(run_dir, server)
        try:
            proc = in_sandbox(run_dir, PY, "/t/client.py", str(server.server_address[1]))
        finally:
            totals = tunnel.stop()
        sni = list(server.seen_sni)
    out = proc.stdout.splitlines()
    assert out[:1] == ["START"] and out[-1:] == ["END"], (proc.stdout, proc.stderr)
    assert "direct: refused" in out  # the TLS server outside is not reachable directly
    assert "proxy: HTTP/1.1 200 Connection established" in out
    assert f"answer: 200 {ANSWER.decode().strip()}" in out
    assert sni == [HOST]
    [rec] = records
    assert (rec.host, rec.port, rec.action) == (HOST, 443, "connected")
    assert rec.bytes_up > 0 and rec.bytes_down > 0
    assert totals == (1, 0, rec.bytes_up + rec.bytes_down)


@pytest.mark.skipif(not Path(CURL).exists(), reason="needs /usr/bin/curl")
def test_curl_with_https_proxy_gets_the_provider_and_is_refused_elsewhere(
    run_dir: Path, ca: CertAuthority
) -> None:
    urls = [f"https://{HOST}/v1/models", "https://evil.example/", f"https://{HOST}:8443/"]
    with tls_http_server(ca) as server:
        tunnel, records = tunnel_to(run_dir, server)
        try:
            proc = in_sandbox(run_dir, PY, "/t/curl.py", str(RELAY_PORT), *urls)
        finally:
            totals = tunnel.stop()
    out = proc.stdout.splitlines()
    assert out[:1] == ["START"] and out[-1:] == ["END"], (proc.stdout, proc.stderr)
    provider, evil, port = out[1:4]
    assert provider.startswith(f"curl {urls[0]} exit 0 ") and ANSWER.decode().strip() in provider
    assert evil.startswith(f"curl {urls[1]} exit 56 ") and "403" in evil
    assert port.startswith(f"curl {urls[2]} exit 56 ") and "403" in port
    got = sorted((r.host, r.port, r.action) for r in records)
    assert got == [(HOST, 443, "connected"), (HOST, 8443, "refused"),
                   ("evil.example", 443, "refused")]  # fmt: skip
    assert totals[:2] == (3, 2)


def _free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


@pytest.mark.skipif(
    importlib.util.find_spec("gatekeeper.agent.relay") is None or not Path(CURL).exists(),
    reason="needs the egress helper's relay (gatekeeper/agent/relay.py) and /usr/bin/curl",
)
def test_oms_relay_carries_curl_through_the_tunnel(run_dir: Path, ca: CertAuthority) -> None:
    """The real relay as oms starts it inside (here as a plain process): HTTPS_PROXY to its
    loopback port, the tunnel's socket behind it."""
    port = _free_port()
    env = {"PATH": "/usr/bin", "HTTPS_PROXY": f"http://127.0.0.1:{port}",
           "PYTHONPATH": os.environ.get("PYTHONPATH", "")}  # fmt: skip
    curl = [CURL, "-q", "-sS", "--cacert", str(ca.ca_pem), "--max-time", "60",
            f"https://{HOST}/v1/models"]  # fmt: skip
    with tls_http_server(ca) as server:
        tunnel, records = tunnel_to(run_dir, server)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "gatekeeper.agent.relay",
                 "--forward", f"{port}={run_dir / 't.sock'}", "--", *curl],
                env=env, capture_output=True, text=True, check=False, timeout=120,
            )  # fmt: skip
        finally:
            tunnel.stop()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(ANSWER.decode())
    assert [(r.host, r.action) for r in records] == [(HOST, "connected")]
