"""A worker's hook and receipt routes on its broker, and the rule that ends it.

Only a run started for a worker (`AgentRunRequest.worker`) has them. Inside, `oms hook …`
answers with oms' own checks (gatekeeper/integrations/hooks) and posts the event and that
answer to `POST /oms/hook`; `oms worker result` posts to `POST /oms/worker/result`. Outside,
the broker records each as one `agent.hook` entry under the run's identity (run id, and
the worker and role of THIS run, never names from the body) and answers; the answer
printed inside is the broker's. A Stop (or a result) with a commit beyond the base in the
workspace marks the worker done; a later tool call (a human talking to it) unmarks it.

`EndRule` is the worker path's half: while marked done, or once the broker stopped the
run's model traffic (`stopped`: its budget spent or its key refused, so its lane is parked
and nothing it asks can leave), `may_end()` (the caller's: no tmux client is attached to
the pane) is asked every `poll_s`; when it says yes, the agent's process group is sent
SIGTERM (SIGKILL after a grace) and `ended` is set, so that the run is collected and
settled (a finished one when it was done and not stopped). The agent layer imports nothing
of the orchestration: the caller passes the callable.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from evidence import Payload
from gatekeeper.agent.payloads import HookEvent
from gatekeeper.agent.snapshot import workspace_head

HOOK_PATH = "/oms/hook"
RESULT_PATH = "/oms/worker/result"
MAX_BODY_BYTES = 64 << 10  # the event's digest and oms' answer (bounded reasons), no input
STOP_GRACE_S = 5.0
_DECISIONS = ("allow", "deny", "block", "silent", "error")


@dataclass(eq=False)
class EndRule:
    """The end of an unattended worker: done (a receipt's commit is there) or stopped (the
    broker parked its lane), AND `may_end()`."""

    may_end: Callable[[], bool]
    poll_s: float = 0.5
    done: threading.Event = field(default_factory=threading.Event)
    stopped: threading.Event = field(default_factory=threading.Event)
    ended: bool = False
    _pid: int | None = None

    def watch(self, pid: int, finished: threading.Event) -> None:
        """A daemon thread: end the agent's group (bwrap's, `pid`) when the rule holds."""
        self._pid = pid
        threading.Thread(target=self._loop, args=(finished,), daemon=True).start()

    def _loop(self, finished: threading.Event) -> None:
        while not finished.wait(self.poll_s):
            if not (self.done.is_set() or self.stopped.is_set()) or not self._allowed():
                continue
            self.ended = True
            self._signal(signal.SIGTERM)
            if not finished.wait(STOP_GRACE_S):
                self._signal(signal.SIGKILL)
            return

    def _allowed(self) -> bool:
        try:
            return self.may_end()
        except Exception:  # a question that cannot be answered keeps the worker
            return False

    def _signal(self, sig: signal.Signals) -> None:
        if self._pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._pid, sig)


Record = Callable[[Payload], None]


@dataclass(eq=False)
class _WorkerRoutes:
    run_id: str
    worker: str
    role: str | None
    workspace: Path
    base: str
    record: Record
    rule: EndRule | None

    def __call__(self, app: web.Application) -> None:
        app.router.add_post(HOOK_PATH, self.hook)
        app.router.add_post(RESULT_PATH, self.result)

    def _beyond_base(self) -> str | None:
        try:
            head = workspace_head(self.workspace / ".git")
        except Exception:  # an unreadable workspace has no commit to file
            return None
        return head if head != self.base else None

    def _entry(self, client: str, event: str, tool: str, digest: str | None, decision: str,
               commit: str | None) -> None:  # fmt: skip
        self.record(HookEvent(run_id=self.run_id, worker=self.worker, role=self.role,
                              client=client, event=event[:64], tool=tool[:128],
                              input_sha256=digest, decision=decision, commit=commit))  # fmt: skip

    async def hook(self, request: web.Request) -> web.StreamResponse:
        body = await _bounded(request)
        obs, answer = body.get("observation"), body.get("answer")
        if not isinstance(obs, dict) or not isinstance(answer, dict):
            raise web.HTTPBadRequest(text="a hook call is {observation, answer}")
        client, event = str(obs.get("client", "")), str(obs.get("event", ""))
        if client not in ("claude-code", "codex"):
            raise web.HTTPBadRequest(text="unknown hook client")
        decision = str(answer.get("decision", "error"))
        decision = decision if decision in _DECISIONS else "error"
        commit = self._beyond_base() if event == "Stop" else None
        digest = obs.get("input_sha256")
        self._entry(client, event, str(obs.get("tool", "")),
                    digest if isinstance(digest, str) else None, decision, commit)  # fmt: skip
        self._mark(event, commit)
        return web.json_response({"exit_code": answer.get("exit_code", 0),
                                  "stdout": answer.get("stdout", ""),
                                  "stderr": answer.get("stderr", ""),
                                  "run_id": self.run_id, "worker": self.worker})  # fmt: skip

    def _mark(self, event: str, commit: str | None) -> None:
        if self.rule is None:
            return
        if event == "Stop" and commit is not None:
            self.rule.done.set()
        elif event == "PreToolUse":  # working again (a human asked for more): not done
            self.rule.done.clear()

    async def result(self, request: web.Request) -> web.StreamResponse:
        await _bounded(request)  # whatever was sent inside is not read: the run decides
        commit = self._beyond_base()
        self._entry("oms", "worker.result", "", None, "result", commit)
        if commit is None:
            return web.json_response({"ok": False, "run_id": self.run_id, "worker": self.worker,
                                      "message": "the workspace has no commit beyond the "
                                      "base: commit the work first"}, status=409)  # fmt: skip
        if self.rule is not None:
            self.rule.done.set()
        return web.json_response({"ok": True, "run_id": self.run_id, "worker": self.worker,
                                  "commit": commit, "filed": "when the run ends"})  # fmt: skip


async def _bounded(request: web.Request) -> dict[str, Any]:
    raw = await request.content.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_BODY_BYTES, actual_size=len(raw))
    try:
        data = json.loads(raw) if raw.strip() else {}
    except ValueError:
        raise web.HTTPBadRequest(text="not JSON") from None
    if not isinstance(data, dict):
        raise web.HTTPBadRequest(text="not a JSON object")
    return data


def worker_routes(*, run_id: str, worker: str | None, role: str | None, workspace: Path,
                  base: str, record: Record,
                  rule: EndRule | None) -> list[Callable[[web.Application], None]]:  # fmt: skip
    """The hook and receipt routes of a worker's run; none for any other run."""
    if worker is None:
        return []
    return [_WorkerRoutes(run_id, worker, role, workspace, base, record, rule)]
