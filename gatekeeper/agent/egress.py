"""The egress broker: the agent's only way to its provider, outside the sandbox.

An aiohttp server on the run's unix socket (bound into the sandbox, reached through the
loopback relay inside). With `--egress api` it forwards only the providers' model
endpoints, drops every credential the agent sent and injects oms' real key, scans each
request body (egress_scan: new texts only, cached by digest), redacts or blocks
secrets, always blocks this run's canary, and streams the response back unchanged.
Every request is one `EgressRequest` record, written before any byte of the body
leaves: a request that cannot be recorded is not sent (fail closed). It runs on its
own thread and event loop, so oms' main thread stays free to run the agent.
What goes upstream is built only from what was scanned and is recorded (issue 29):
allow-listed headers and query keys, each value scanned; the record names what was
dropped by count and SHA-256, and hashes the canonical form of everything sent. The
upstream client follows no redirect: the key would go with it.
Beside it: egress_config (upstreams, keys), egress_http (routes, headers, errors, the
socket), egress_scan (canaries, scanning, redaction).
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from evidence import Payload
from gatekeeper.agent.broker_socket import bind_socket
from gatekeeper.agent.budget import Meter, Parked, UsageReader
from gatekeeper.agent.egress_config import (
    KEY_ENV,
    Provider,
    ProviderKeys,
    Upstreams,
    provider_keys,
    upstreams_from_env,
)
from gatekeeper.agent.egress_http import (
    HOP_BY_HOP,
    MAX_BODY_BYTES,
    ROUTES,
    BodyRefused,
    Kept,
    Seen,
    egress_findings,
    error,
    not_recorded,
    only_models,
    read_body,
    recorded_path,
    sent_digest,
    upstream_headers,
)
from gatekeeper.agent.egress_scan import Inspection, ScanCache, inspect
from gatekeeper.agent.payloads import EgressRequest, EgressTotals
from gatekeeper.errors import Unavailable
from gatekeeper.scan import ScannerUnavailable
from gatekeeper.scan.gitleaks import locate as locate_gitleaks
from policy import LoadedPolicy

__all__ = ["Broker", "ProviderKeys", "Upstreams", "provider_keys", "upstreams_from_env"]

Action = Literal["forwarded", "redacted", "blocked", "refused"]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Called on the broker's loop with each provider response's (provider, status, headers).
ResponseWatch = Callable[[str | None, int, Mapping[str, str]], None]
# Called on the broker's loop when it stops a run's model traffic (budget, refused login).
ParkWatch = Callable[[Parked], None]
AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")
DRAIN_S = 5.0  # how long stop() lets in-flight requests finish
START_S = 30.0
UPSTREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=30, sock_read=600)
NO_KEY = (
    "oms has no {p} API key: set {env} in oms' own environment or write it to "
    "$OMS_HOME/providers/{p} (one line, chmod 600)"
)


class _NotRecorded(Exception):
    """The record of a request failed: its body must not leave."""


class Broker:
    """The run's egress broker; `start()` listens, `stop()` drains and returns the totals."""

    def __init__(
        self,
        socket_path: Path,
        *,
        run_id: str,
        egress: Literal["none", "api", "tunnel"],
        keys: ProviderKeys,
        upstreams: Upstreams,
        on_secret: Literal["redact", "block"],
        loaded: LoadedPolicy,
        canaries: Sequence[str],
        record: Callable[[Payload], None],
        socket_uid: int | None = None,
        routes: Sequence[Callable[[web.Application], None]] = (),
        on_response: ResponseWatch | None = None,
        meter: Meter | None = None,
        on_park: ParkWatch | None = None,
    ) -> None:
        self._socket_path = socket_path
        self._run_id = run_id
        self._egress = egress
        self._keys = keys
        self._upstreams = upstreams
        self._block_secrets = on_secret == "block"  # noqa: S105 # nosec B105 (an action)
        self._canaries = tuple(canaries)
        self._record_fn = record
        self._socket_uid = socket_uid
        self._routes = tuple(routes)
        self._on_response = on_response
        self._meter = meter if meter is not None else Meter()
        self._on_park = on_park
        self._cache = ScanCache(loaded)
        self._counts: dict[str, int] = dict.fromkeys(EgressTotals.model_fields, 0)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._scan_lock: asyncio.Lock | None = None
        self._bound = False

    # -- life cycle ------------------------------------------------------------------

    def start(self, sock: socket.socket | None = None) -> None:
        """Listen on the socket from a thread of its own; returns once it accepts. `sock`:
        the socket already bound at `socket_path` (a `LazyBroker`'s), else it is bound here."""
        if self._thread is not None:
            raise Unavailable("the egress broker was already started")
        if self._egress == "api":
            locate_gitleaks()  # ScannerUnavailable now rather than on the first request
        if sock is None:
            sock = bind_socket(self._socket_path, self._socket_uid)
        self._bound = True
        ready: Future[None] = Future()
        self._thread = threading.Thread(
            target=self._serve, args=(sock, ready), name="oms-egress-broker", daemon=True
        )
        self._thread.start()
        try:
            ready.result(timeout=START_S)
        except Exception as exc:
            self.stop()
            raise Unavailable(f"the egress broker did not start: {exc}") from None

    def stop(self) -> EgressTotals:
        """Stop accepting, let in-flight requests finish (at most DRAIN_S), close, join."""
        thread, loop = self._thread, self._loop
        if thread is not None and loop is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=DRAIN_S + START_S)
        if self._bound:
            self._socket_path.unlink(missing_ok=True)
            self._bound = False
        return self.totals

    @property
    def totals(self) -> EgressTotals:
        with self._lock:
            return EgressTotals(**self._counts)

    @property
    def meter(self) -> Meter:
        """What this run's model traffic spent, and why it was stopped, if it was."""
        return self._meter

    @property
    def scanned_bytes(self) -> int:
        """Bytes handed to the scanners in this run (the bench's measure of re-scanning)."""
        return self._cache.scanned_bytes

    def _serve(self, sock: socket.socket, ready: Future[None]) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            try:
                loop.run_until_complete(self._startup(sock))
            except BaseException as exc:
                sock.close()
                loop.run_until_complete(self._shutdown())
                ready.set_exception(exc)
                return
            ready.set_result(None)
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
        finally:
            loop.close()

    async def _startup(self, sock: socket.socket) -> None:
        self._scan_lock = asyncio.Lock()
        # Nothing but the headers the broker hashes and records: no automatic ones.
        self._session = aiohttp.ClientSession(
            timeout=UPSTREAM_TIMEOUT, auto_decompress=False, skip_auto_headers=AUTO_HEADERS
        )
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        for path, provider in ROUTES.items():
            app.router.add_route("*", path, self._provider_route(path, provider))
        for add in self._routes:  # before the catch-all, which would shadow them
            add(app)
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=DRAIN_S
        )
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
        # What the run's watches started (a quota or a stop being recorded outside) ends
        # first: at most DRAIN_S more, then cancelled (its process killed).
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if left:
            _, late = await asyncio.wait(left, timeout=DRAIN_S)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        await asyncio.get_running_loop().shutdown_default_executor()

    # -- requests --------------------------------------------------------------------

    def _provider_route(self, path: str, provider: Provider) -> Handler:
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self._provider(request, path, provider)

        return handle

    async def _unknown(self, request: web.Request) -> web.StreamResponse:
        seen = Seen.of(request, request.path, None, await read_body(request))
        return self._refuse(seen, 404, "not_found", only_models())

    async def _provider(
        self, request: web.Request, path: str, provider: Provider
    ) -> web.StreamResponse:
        body = await read_body(request)
        seen = Seen.of(request, path, provider, body)
        if request.method != "POST":
            return self._refuse(seen, 405, "method_not_allowed", f"only POST {path} is forwarded")
        if isinstance(body, BodyRefused):
            return self._refuse(seen, body.status, body.code, body.message)
        if self._egress != "api":
            return self._refuse(seen, 403, "egress_" + self._egress,
                                f"egress is {self._egress} for this run")  # fmt: skip
        key = self._keys.of(provider)
        if key is None:  # 401: a status clients do not retry (503 is retried)
            self._count(no_key=1)
            return self._refuse(seen, 401, "no_key",
                                NO_KEY.format(p=provider, env=KEY_ENV[provider]))  # fmt: skip
        return await self._scanned(request, seen, body, provider, key)

    async def _scanned(
        self, request: web.Request, seen: Seen, body: bytes, provider: Provider, key: str
    ) -> web.StreamResponse:
        """Scan what may go; block it, or forward exactly that, as recorded."""
        kept = Kept.of(request, provider)
        seen = replace(seen, dropped=kept.dropped, sha256_dropped=kept.sha256_dropped)
        try:
            ins = await self._inspect(body, kept)
        except ScannerUnavailable as exc:
            why = f"the request was not scanned, so not sent: {exc.message}"
            return self._refuse(seen, 503, "scanner_unavailable", why)
        if ins.canary:
            return self._canary(seen)
        if ins.findings and self._block_secrets:
            return self._block(seen, ins)
        if (stop := self._meter.admit(provider, seen.path)) is not None:
            return self._stopped(seen, stop)
        url = URL(self._upstreams.of(provider) + seen.path).with_query(list(ins.query))
        headers = upstream_headers(provider, key, ins.headers, len(ins.body), url)
        seen = replace(seen, path=recorded_path(seen.path, url))
        action: Action = "redacted" if ins.redacted else "forwarded"
        digest = sent_digest(request.method, url, headers, provider, ins.body)
        payload = self._payload(seen, action, findings=egress_findings(ins),
                                bytes_sent=len(ins.body), sha256_request=digest,
                                sha256_sent=hashlib.sha256(ins.body).hexdigest())  # fmt: skip
        return await self._forward(request, seen, ins, url, headers, payload)

    async def _inspect(self, body: bytes, kept: Kept) -> Inspection:
        assert self._scan_lock is not None  # nosec B101 (set by _startup)
        async with self._scan_lock:  # one scan at a time: the cache, and 2 cores
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(
                None, inspect, body, kept.headers, kept.query, self._cache, self._canaries
            )

    def _refuse(self, seen: Seen, status: int, code: str, message: str) -> web.Response:
        payload = self._payload(seen, "refused", reason=message, status=status)
        if not self._record(payload):
            return not_recorded()
        return error(status, code, message)

    def _stopped(self, seen: Seen, stop: Parked) -> web.Response:
        """A model request refused because the run's budget is spent or its provider refused
        oms' key: a status the CLIs do not retry, and the lane parked (the watch dedupes)."""
        self._park(stop)
        code = "budget_spent" if stop.event == "budget" else "login_refused"
        return self._refuse(
            seen, stop.status, code, f"oms did not send this request: {stop.reason}"
        )

    def _park(self, stop: Parked) -> None:
        if self._on_park is None:
            return
        try:
            self._on_park(stop)
        except Exception as exc:
            print(f"oms: warning: egress broker: the lane was not parked "
                  f"({type(exc).__name__})", file=sys.stderr, flush=True)  # fmt: skip

    def _canary(self, seen: Seen) -> web.Response:
        print(f"oms: ALARM: this run's canary from $OMS_HOME was in the agent's request to "
              f"{seen.method} {seen.path} (run {self._run_id}); blocked, not sent",
              file=sys.stderr, flush=True)  # fmt: skip
        reason = "the request holds this run's canary: the agent reached oms' state"
        payload = self._payload(seen, "blocked", reason=reason, status=403, canary=True)
        if not self._record(payload):
            return not_recorded()
        self._count(blocked=1)
        return error(403, "canary", f"oms blocked this request: {reason}")

    def _block(self, seen: Seen, ins: Inspection) -> web.Response:
        found = egress_findings(ins)
        named = ", ".join(f"{f.rule} (fingerprint {f.fingerprint})" for f in found)
        reason = f"the request holds a secret: {named}"
        payload = self._payload(seen, "blocked", reason=reason, status=403, findings=found)
        if not self._record(payload):
            return not_recorded()
        self._count(blocked=1)
        hint = "remove it, or allow its fingerprint in [scanners] allow_fingerprints"
        return error(403, "secret", f"oms blocked this request: {reason}; {hint}")

    async def _forward(
        self,
        request: web.Request,
        seen: Seen,
        ins: Inspection,
        url: URL,
        headers: CIMultiDict[str],
        payload: EgressRequest,
    ) -> web.StreamResponse:
        """Send exactly what `payload` records (recorded first), with no redirect followed."""
        sent = ins.body
        state = {"recorded": False, "failed": False}

        async def body() -> AsyncIterator[bytes]:
            # Runs once the upstream connection is up: a refused connection is a refusal
            # recorded as such, and a failed record stops the body before it leaves.
            if not self._record(payload):
                state["failed"] = True
                raise _NotRecorded
            state["recorded"] = True
            self._count(forwarded=1, redacted=int(ins.redacted), bytes_up=len(sent))
            yield sent

        assert self._session is not None  # nosec B101 (set by _startup)
        try:
            async with self._session.post(
                url, data=body(), headers=headers, allow_redirects=False
            ) as up:
                self._watch(seen, up)
                return await self._relay(request, seen, up)
        except (aiohttp.ClientError, TimeoutError) as exc:
            if state["failed"]:
                return not_recorded()
            message = f"oms could not reach the {seen.provider} upstream ({type(exc).__name__})"
            if not state["recorded"]:
                return self._refuse(seen, 502, "upstream_unreachable", message)
            return error(502, "upstream_failed", message)

    async def _relay(
        self, request: web.Request, seen: Seen, up: aiohttp.ClientResponse
    ) -> web.StreamResponse:
        """The upstream's answer as it arrives: status, headers less hop-by-hop, each chunk
        (its usage read on the way by the run's meter, never held whole)."""
        reader = UsageReader(up.status, up.headers.get("Content-Type", ""))
        try:
            return await self._relayed(request, up, reader)
        finally:
            self._answered(seen, reader)

    def _answered(self, seen: Seen, reader: UsageReader) -> None:
        assert seen.provider is not None  # nosec B101 (only provider routes forward)
        reader.close()
        if (stop := self._meter.answered(seen.provider, reader)) is not None:
            self._park(stop)

    async def _relayed(
        self, request: web.Request, up: aiohttp.ClientResponse, reader: UsageReader
    ) -> web.StreamResponse:
        resp = web.StreamResponse(status=up.status, reason=up.reason)
        for k, v in up.headers.items():
            if k.lower() not in HOP_BY_HOP:
                resp.headers.add(k, v)
        await resp.prepare(request)
        try:
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
                reader.feed(chunk)
                self._count(bytes_down=len(chunk))
            await resp.write_eof()
        except (aiohttp.ClientError, OSError, TimeoutError):
            # The status is already sent: cut the agent's connection, so that a stream
            # cut short upstream (or by the agent) is never taken for a whole one.
            if request.transport is not None:
                request.transport.close()
        return resp

    def _watch(self, seen: Seen, up: aiohttp.ClientResponse) -> None:
        """The run's response watch (its quota observation) sees the status and headers;
        it never changes or delays the answer, and its failure is one warning line."""
        if self._on_response is None:
            return
        try:
            self._on_response(seen.provider, up.status, up.headers)
        except Exception as exc:
            print(f"oms: warning: egress broker: a response was not observed "
                  f"({type(exc).__name__})", file=sys.stderr, flush=True)  # fmt: skip

    def _payload(self, seen: Seen, action: Action, **fields: Any) -> EgressRequest:
        return EgressRequest(run_id=self._run_id, method=seen.method, path=seen.path,
                             provider=seen.provider, bytes_in=seen.bytes_in,
                             dropped=seen.dropped, sha256_dropped=seen.sha256_dropped,
                             bytes_sent=fields.pop("bytes_sent", 0),
                             sha256_sent=fields.pop("sha256_sent", None),
                             action=action, **fields)  # fmt: skip

    def _record(self, payload: EgressRequest) -> bool:
        self._count(requests=1)
        try:
            self._record_fn(payload)
        except Exception as exc:  # any failure to record: the request does not leave
            print(f"oms: egress broker: could not record a request ({type(exc).__name__}); "
                  "it was not sent", file=sys.stderr, flush=True)  # fmt: skip
            return False
        return True

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for name, n in deltas.items():
                self._counts[name] += n
