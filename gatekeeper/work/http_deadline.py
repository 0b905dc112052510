"""An httpx transport under which a whole answer has a deadline, not only each read.

httpx bounds each socket operation (connect, one read, one write), never the whole answer
(encode/httpx#1450): a server that sends one byte every 2 s, in its status line, headers
or body, keeps a request alive forever under a 30 s read timeout. Here every network
operation of a request is given at most the time left before `Deadline.at` (a
`time.monotonic()` instant the caller sets before each request), so an answer — connect,
TLS, request, status line, headers, body — ends by then, however the server drips.
Name resolution is the one step not bounded (the stdlib resolver takes no timeout).
"""

from __future__ import annotations

import ssl
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx


@dataclass
class Deadline:
    """When the answer now awaited must be complete (`time.monotonic()`); None: no bound."""

    at: float | None = None

    def passed(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at

    def left(self, timeout: float | None) -> float | None:
        """`timeout` shortened to the time left; raises a timeout once none is left."""
        if self.at is None:
            return timeout
        left = self.at - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout("the answer's deadline passed")
        return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, deadline: Deadline) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._deadline.left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._deadline.left(timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:  # fmt: skip
        tls = self._inner.start_tls(ssl_context, server_hostname, self._deadline.left(timeout))
        return _Stream(tls, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, deadline: Deadline) -> None:
        self._inner = httpcore.SyncBackend()
        self._deadline = deadline

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None
                    ) -> httpcore.NetworkStream:  # fmt: skip
        inner = self._inner.connect_tcp(host, port, self._deadline.left(timeout), local_address,
                                        socket_options)  # fmt: skip
        return _Stream(inner, self._deadline)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None
                            ) -> httpcore.NetworkStream:  # fmt: skip
        inner = self._inner.connect_unix_socket(path, self._deadline.left(timeout), socket_options)
        return _Stream(inner, self._deadline)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def proxy_for(url: str) -> str | None:
    """The proxy the environment names for `url` (`https_proxy`, `no_proxy`…), as httpx's
    own `trust_env` would use it; None for a direct connection."""
    parts = urlsplit(url)
    proxy = urllib.request.getproxies_environment().get(parts.scheme)
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]
    return None if not proxy or bypass(parts.hostname or "") else str(proxy)


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's own transport (its request mapping and error types), over a connection pool
    whose every socket operation stops at `deadline`. `proxy`: an http(s) proxy URL."""

    def __init__(self, deadline: Deadline, proxy: str | None = None) -> None:
        super().__init__(trust_env=False)
        self._pool.close()  # httpx's pool, unused: it has no way to take a network backend
        context = httpx.create_ssl_context()
        backend = _Backend(deadline)
        if proxy is None:
            self._pool = httpcore.ConnectionPool(ssl_context=context, network_backend=backend)
            return
        url = httpx.URL(proxy)
        auth = (url.username.encode(), url.password.encode()) if url.username else None
        self._pool = httpcore.HTTPProxy(
            proxy_url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port,
                                   target=b"/"),
            proxy_auth=auth, ssl_context=context, network_backend=backend,
        )  # fmt: skip
