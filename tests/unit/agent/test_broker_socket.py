"""The lazy broker of `--egress none` (gatekeeper/agent/broker_socket.py) on a real unix socket:
nothing is started until somebody connects, and the first connection starts the broker on the
very socket it is waiting on (so it is served, not refused). `make` here answers the one
connection itself in place of the aiohttp broker (whose routes have their own tests, and
tests/e2e/test_agent_run.py's `oms mcp` inside reaches them through this lazy start)."""

from __future__ import annotations

import socket
import stat
import threading
from pathlib import Path

from gatekeeper.agent.broker_socket import LazyBroker
from gatekeeper.agent.budget import Meter
from gatekeeper.agent.payloads import EgressTotals


class Answering:
    """A started 'broker': accepts one connection on the socket it was given and says hi."""

    def __init__(self, sock: socket.socket) -> None:
        self.meter = Meter()
        sock.setblocking(True)
        self._thread = threading.Thread(target=self._serve, args=(sock,))
        self._thread.start()
        self.sock = sock

    def _serve(self, sock: socket.socket) -> None:
        conn, _ = sock.accept()
        with conn:
            conn.sendall(b"hi")

    def stop(self) -> EgressTotals:
        self._thread.join()
        self.sock.close()
        return EgressTotals(requests=1)


def test_a_broker_nobody_calls_is_never_made(tmp_path: Path) -> None:
    made: list[socket.socket] = []
    path = tmp_path / "broker.sock"
    lazy = LazyBroker(path, None, Meter(), lambda s: made.append(s))  # type: ignore[func-returns-value,arg-type,return-value]
    lazy.start()
    assert stat.S_ISSOCK(path.lstat().st_mode) and stat.S_IMODE(path.lstat().st_mode) == 0o600
    assert lazy.stop() == EgressTotals()
    assert made == [] and not path.exists()


def test_the_first_connection_starts_the_broker_on_the_listening_socket(tmp_path: Path) -> None:
    path = tmp_path / "broker.sock"
    lazy = LazyBroker(path, None, Meter(), Answering)  # type: ignore[arg-type]
    lazy.start()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(str(path))
        assert client.recv(2) == b"hi"
    assert lazy.stop() == EgressTotals(requests=1) and lazy.failure is None


def test_a_broker_that_fails_to_start_refuses_connections_from_then_on(tmp_path: Path) -> None:
    def failing(_sock: socket.socket) -> None:
        raise OSError("no broker today")

    path = tmp_path / "broker.sock"
    lazy = LazyBroker(path, None, Meter(), failing)  # type: ignore[arg-type]
    lazy.start()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(str(path))  # queued on the listening socket, then dropped
        try:
            got = client.recv(2)
        except ConnectionResetError:
            got = b""
        assert got == b""
    assert isinstance(lazy.failure, OSError)
    assert lazy.stop() == EgressTotals() and not path.exists()
