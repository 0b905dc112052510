"""The observation route of a worker's agent run: `POST /oms/observe` on its broker.

Only a run started for a worker (`AgentRunRequest.worker`) has it. Inside, `oms hook …`
posts one bounded JSON observation over the one socket bound in; outside, the route starts
`python -P -m gatekeeper.work.events.hooks --repo TOP --worker W` (the worker of THIS run,
never a name from the payload) with the observation on stdin, and answers its one-line
receipt. The agent can report what its hooks saw; it cannot name another worker, change a
ticket or approve anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

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
        proc = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL, cwd="/", start_new_session=True,
            env={**os.environ, "OMS_AGENT_RUN_ID": self.run_id},
        )  # fmt: skip
        try:
            out, _ = await asyncio.wait_for(proc.communicate(body), RECORD_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return 4, b""
        return proc.returncode or 0, out[:MAX_RECEIPT_BYTES]


Route = Callable[[web.Application], None]


def observe_routes(*, repo_top: Path, run_id: str, worker: str | None,
                   python_argv: Sequence[str]) -> list[Route]:  # fmt: skip
    """The broker's observation route for a worker's run; none for any other run."""
    if worker is None:
        return []
    if not WORKER_ID_RE.fullmatch(worker):
        raise UsageError(f"not a worker id: {worker[:40]!r} (want w- and 12 hex digits)")
    argv = (*python_argv, "-m", MODULE, f"--repo={repo_top}", f"--worker={worker}")
    return [_ObserveRoute(argv=argv, run_id=run_id)]
