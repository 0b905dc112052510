"""The broker's socket, and a run's broker started by the first connection on it.

With `--egress none` the broker forwards nothing to a model, but it still serves the run's own
routes (the MCP relay, hook observations, a worker's receipt). A run whose command never calls
them (`oms agent run --egress none -- true`) should not pay for aiohttp and the scanners
(issue 33): `LazyBroker` binds and listens on the socket from the start, so no connection is
ever refused or raced, and the first connection pending on it starts the real broker on that
very socket. Stdlib only: importing this module imports no HTTP stack.
"""

from __future__ import annotations

import os
import select
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gatekeeper.agent.budget import Meter
from gatekeeper.agent.payloads import EgressTotals
from gatekeeper.errors import Unavailable

if TYPE_CHECKING:
    from gatekeeper.agent.egress import Broker


def bind_socket(path: Path, uid: int | None) -> socket.socket:
    """A unix socket bound at `path` (which must not exist), mode 0600 and owned by `uid`
    before it listens: nobody else can connect, not even in between."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
    except OSError as exc:
        sock.close()
        raise Unavailable(f"cannot create the broker socket {path}: {exc.strerror}") from None
    try:
        os.chmod(path, 0o600)
        if uid is not None:
            os.chown(path, uid, -1)
    except OSError as exc:
        sock.close()
        path.unlink(missing_ok=True)
        raise Unavailable(f"cannot restrict the broker socket {path}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock


class LazyBroker:
    """A broker that exists once somebody connects. `make(sock)` builds and starts the real
    one on the listening socket (from this class's thread); until then `stop()` only closes
    the socket and the totals are zero. If `make` fails, the socket is closed: the agent's
    connections are refused from then on (fail closed), and `failure` says why."""

    def __init__(self, socket_path: Path, socket_uid: int | None, meter: Meter,
                 make: Callable[[socket.socket], Broker]) -> None:  # fmt: skip
        self._path, self._uid, self._meter, self._make = socket_path, socket_uid, meter, make
        self._lock = threading.Lock()
        self._real: Broker | None = None
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self._wake: tuple[int, int] | None = None
        self.failure: BaseException | None = None

    def start(self) -> None:
        if self._thread is not None:
            raise Unavailable("the egress broker was already started")
        sock = bind_socket(self._path, self._uid)
        sock.listen()
        self._sock, self._wake = sock, os.pipe()
        self._thread = threading.Thread(target=self._wait, name="oms-egress-lazy", daemon=True)
        self._thread.start()

    def _wait(self) -> None:
        sock, wake = self._sock, self._wake
        if sock is None or wake is None:
            return
        ready, _, _ = select.select([sock.fileno(), wake[0]], [], [])
        with self._lock:
            if self._stopped or sock.fileno() not in ready:
                return
            try:
                self._real = self._make(sock)
            except Exception as exc:  # kept, and the agent's connections refused from now on
                self.failure = exc
                sock.close()

    def stop(self) -> EgressTotals:
        """Stop the real broker if a connection started it; close and unlink the socket."""
        if self._thread is not None and self._wake is not None:
            with self._lock:  # a broker being started finishes starting first
                self._stopped = True
            os.write(self._wake[1], b"x")
            self._thread.join()
            os.close(self._wake[0])
            os.close(self._wake[1])
            self._thread = self._wake = None
        if self._real is not None:
            return self._real.stop()
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self._path.unlink(missing_ok=True)
        return EgressTotals()

    @property
    def meter(self) -> Meter:
        return self._meter if self._real is None else self._real.meter
