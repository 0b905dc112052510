"""The observation route of a worker's agent run: `POST /oms/observe` on its broker.

Only a run started for a worker (`AgentRunRequest.worker`) has it. Inside, `oms hook …`
posts one bounded JSON observation over the one socket bound in; outside, the route starts
`python -m gatekeeper.work.events.hooks --repo TOP --worker W` from this oms' own source
(the worker of THIS run, never a name from the payload) with the observation on stdin,
and answers its one-line receipt. The agent can report what its hooks saw; it cannot name
another worker, change a ticket or approve anything.

A worker's run also has the broker's quota watch (`QuotaReport`): a provider's usage-limit
response becomes one quota observation, recorded the same way with `--quota` (a flag the
hook route never passes, so an agent cannot forge one). The same watch publishes the
broker's stop of a run's model traffic (`Parked`: its budget spent, or the provider
refusing oms' key), once per kind, which parks the lane outside the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from gatekeeper.agent.budget import Parked
from gatekeeper.agent.quota import iso, quota_seen, reset_of
from gatekeeper.errors import UsageError

OBSERVE_PATH = "/oms/observe"
MAX_OBSERVATION_BYTES = 4 << 10  # gatekeeper.work.events.hooks' bound (not imported: a layer up)
MAX_RECEIPT_BYTES = 4 << 10
MAX_CONCURRENT = 2  # each one is an oms process outside
RECORD_TIMEOUT_S = 30.0
MODULE = "gatekeeper.work.events.hooks"
WORKER_ID_RE = re.compile(r"^w-[0-9a-f]{12}$")  # gatekeeper.work.conductor.model's


@dataclass(eq=False)
class _ObserveRoute:
    argv: tuple[str, ...]
    run_id: str
    running: int = 0

    def __call__(self, app: web.Application) -> None:
        app.router.add_post(OBSERVE_PATH, self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = b""
        while len(body) <= MAX_OBSERVATION_BYTES and (chunk := await request.content.read(
                MAX_OBSERVATION_BYTES + 1 - len(body))):  # fmt: skip
            body += chunk
        if len(body) > MAX_OBSERVATION_BYTES:
            raise web.HTTPRequestEntityTooLarge(max_size=MAX_OBSERVATION_BYTES,
                                                actual_size=len(body))  # fmt: skip
        if self.running >= MAX_CONCURRENT:
            raise web.HTTPServiceUnavailable(text="too many observations at once")
        self.running += 1
        try:
            code, out = await self._record(body)
        finally:
            self.running -= 1
        try:
            answer = json.loads(out)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            return web.json_response({"error": "unavailable",
                                      "message": "the observation could not be recorded"},
                                     status=503)  # fmt: skip
        return web.json_response(answer, status=200 if code == 0 else 422)

    async def _record(self, body: bytes) -> tuple[int, bytes]:
        return await _record_outside(self.argv, self.run_id, body)


async def _record_outside(argv: Sequence[str], run_id: str, body: bytes) -> tuple[int, bytes]:
    """`argv` outside with `body` on stdin: its exit code and bounded stdout."""
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, cwd="/", start_new_session=True,
        env={**os.environ, "OMS_AGENT_RUN_ID": run_id},
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(body), RECORD_TIMEOUT_S)
    except (TimeoutError, asyncio.CancelledError) as exc:  # cancelled: the broker stops
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        if isinstance(exc, asyncio.CancelledError):
            raise
        return 4, b""
    return proc.returncode or 0, out[:MAX_RECEIPT_BYTES]


Route = Callable[[web.Application], None]
MAX_QUOTA_REPORTS = 16  # per run: a CLI that retries on 429 for hours is not a flood
QUOTA_SLACK_S = 60  # a reset within this of the one published is the same limit


@dataclass(eq=False)
class QuotaReport:
    """The broker's response watch for a worker's run: each provider usage-limit answer
    (`gatekeeper.agent.quota`) becomes ONE quota observation, recorded outside by
    `python -m gatekeeper.work.events.hooks --quota` for the worker of THIS run. A
    reset within QUOTA_SLACK_S after the one published is not published again; never more
    than MAX_QUOTA_REPORTS; failures are a warning line. It never changes, delays or
    signals anything."""

    argv: tuple[str, ...]
    run_id: str
    last: float | None = None  # the reset last published (epoch seconds)
    sent: int = 0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    parked: set[str] = field(default_factory=set)  # the kinds of stop published

    def __call__(self, provider: str | None, status: int, headers: Mapping[str, str]) -> None:
        now = time.time()
        seen = quota_seen(provider, status, headers, now)
        if seen is None or self.sent >= MAX_QUOTA_REPORTS:
            return
        at = reset_of(headers, now)[0]
        if self.last is not None and at <= self.last + QUOTA_SLACK_S:
            return  # the limit already published (a retry's `retry-after` counts on)
        self.last, self.sent = at, self.sent + 1
        self._spawn(seen)

    def park(self, stop: Parked) -> None:
        """The broker stopped the run's model traffic: park its lane, once per kind."""
        if stop.event in self.parked:
            return
        self.parked.add(stop.event)
        self._spawn(stop.observation(iso(time.time())))

    def _spawn(self, seen: Mapping[str, object]) -> None:
        task = asyncio.get_running_loop().create_task(self._publish(json.dumps(seen).encode()))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _publish(self, body: bytes) -> None:
        code, _ = await _record_outside(self.argv, self.run_id, body)
        if code != 0:
            print("oms: warning: the run's quota observation was not recorded", file=sys.stderr,
                  flush=True)  # fmt: skip


def quota_report(*, repo_top: Path, run_id: str, worker: str | None,
                 python_argv: Sequence[str]) -> QuotaReport | None:  # fmt: skip
    """The broker's quota watch for a worker's run; None for any other run."""
    if worker is None:
        return None
    if not WORKER_ID_RE.fullmatch(worker):
        raise UsageError(f"not a worker id: {worker[:40]!r} (want w- and 12 hex digits)")
    argv = (*python_argv, "-m", MODULE, f"--repo={repo_top}", f"--worker={worker}", "--quota")
    return QuotaReport(argv=argv, run_id=run_id)


def observe_routes(*, repo_top: Path, run_id: str, worker: str | None,
                   python_argv: Sequence[str]) -> list[Route]:  # fmt: skip
    """The broker's observation route for a worker's run; none for any other run."""
    if worker is None:
        return []
    if not WORKER_ID_RE.fullmatch(worker):
        raise UsageError(f"not a worker id: {worker[:40]!r} (want w- and 12 hex digits)")
    argv = (*python_argv, "-m", MODULE, f"--repo={repo_top}", f"--worker={worker}")
    return [_ObserveRoute(argv=argv, run_id=run_id)]
