"""Inside a worker's agent run: each hook call publishes one bounded observation outside.

`publish` is called by `oms hook …` after its answer is formed and changes nothing of it:
when the run's marker names a worker, ONE `POST /oms/observe` over the broker's unix socket
carries the event name, the session id, the tool name, a timestamp and the input's digest
(never the prompt, the tool's input or output). A failure to publish is one stderr line.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import socket
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from gatekeeper.integrations.hooks.protocol import CLIENTS, EVENTS, HookAnswer, decision_of
from gatekeeper.text import sanitize

PATH = "/oms/observe"
TIMEOUT_S = 40.0  # the recorder outside has 30 s
_SESSION = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_TOOL = re.compile(r"^[A-Za-z0-9._:/-]{0,128}$")


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("oms", timeout=TIMEOUT_S)  # the host is a placeholder
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(TIMEOUT_S)
        sock.connect(self._path)
        self.sock = sock


def observation(client: str, event: str, stdin: bytes) -> dict[str, Any] | None:
    """The observation of one hook call, or None when there is nothing to observe (an event
    oms does not install, or input without a usable session id)."""
    if client not in CLIENTS or event not in EVENTS:
        return None
    try:
        data = json.loads(stdin)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    session, tool = data.get("session_id"), data.get("tool_name") or ""
    if not isinstance(session, str) or not _SESSION.fullmatch(session):
        return None
    if not isinstance(tool, str) or not _TOOL.fullmatch(tool):
        tool = ""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"client": client, "event": event, "session": session, "tool": tool,
            "observed": now, "input_sha256": hashlib.sha256(stdin).hexdigest()}  # fmt: skip


def publish(client: str, event: str, stdin: bytes, marker: Mapping[str, Any]) -> str | None:
    """Publish one observation when `marker` (the run's) names a worker; the receipt key,
    or None when there is nothing to publish. ObservationNotPublished when it failed."""
    socket_path = marker.get("socket")
    if not marker.get("worker") or not isinstance(socket_path, str):
        return None
    obs = observation(client, event, stdin)
    if obs is None:
        return None
    body = json.dumps(obs).encode()
    try:
        conn = _UnixConnection(socket_path)
        try:  # the same body on a retry: the receipt outside is idempotent
            status, answer = _post(conn, body)
            if status >= 500:
                status, answer = _post(conn, body)
        finally:
            conn.close()
    except (OSError, http.client.HTTPException) as exc:
        raise ObservationNotPublished(f"cannot reach the broker: {type(exc).__name__}") from None
    if status != 200 or not isinstance(answer, dict) or "receipt" not in answer:
        why = answer.get("message") if isinstance(answer, dict) else None
        raise ObservationNotPublished(sanitize(str(why or f"HTTP {status}"), 200))
    return str(answer["receipt"])


def _post(conn: _UnixConnection, body: bytes, path: str = PATH) -> tuple[int, Any]:
    conn.request("POST", path, body=body, headers={"content-type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read(8192)
    try:
        return resp.status, json.loads(raw)
    except ValueError:
        return resp.status, None


class ObservationNotPublished(Exception):
    """The observation did not reach the recorder outside (the hook's answer stands)."""


def publish_quietly(client: str, event: str, stdin: bytes, marker: Mapping[str, Any]) -> str:
    """`publish`, and its failure as the one stderr line to write ('' when it went well)."""
    try:
        publish(client, event, stdin, marker)
    except ObservationNotPublished as exc:
        return f"oms: warning: the hook's observation was not recorded: {exc}\n"
    except Exception as exc:  # never let an observation change the hook's answer
        return f"oms: warning: the hook's observation was not recorded: {type(exc).__name__}\n"
    return ""


# -- the hook's answer through the broker (gatekeeper/agent/worker_route.py) ---------------

HOOK_PATH = "/oms/hook"  # worker_route's (the broker's side)
NO_ROUTE = 404  # a run without a worker binding, or an older broker


def post_json(socket_path: str, path: str, doc: Mapping[str, Any]) -> tuple[int, Any]:
    """One POST of `doc` over the broker's unix socket: its status and JSON answer (None
    when it is not JSON). OSError or HTTPException when the broker cannot be reached."""
    conn = _UnixConnection(socket_path)
    try:
        return _post(conn, json.dumps(doc).encode(), path)
    finally:
        conn.close()


def relay(client: str, event: str, stdin: bytes, answer: HookAnswer,
          marker: Mapping[str, Any]) -> HookAnswer | None:  # fmt: skip
    """The broker's answer to this hook call (it records the event with the run's
    identity), given oms' own `answer`; None for a run that is not a worker's, or where
    the broker has no such route (an older one): the local answer stands. HookNotRelayed
    when the broker cannot be reached or refused."""
    socket_path = marker.get("socket")
    obs = observation(client, event, stdin)
    # Only a worker's run has the route: any other run keeps the local answer, unasked.
    if not marker.get("worker") or not isinstance(socket_path, str) or obs is None:
        return None
    doc = {
        "observation": obs,
        "answer": {
            "decision": decision_of(answer),
            "exit_code": answer.exit_code,
            "stdout": answer.stdout,
            "stderr": answer.stderr,
        },
    }
    try:
        status, got = post_json(socket_path, HOOK_PATH, doc)
    except (OSError, http.client.HTTPException) as exc:
        raise HookNotRelayed(f"cannot reach the broker: {type(exc).__name__}") from None
    if status == NO_ROUTE:
        return None
    if status != 200 or not isinstance(got, dict):
        raise HookNotRelayed(f"the broker answered HTTP {status}")
    code, out, err = got.get("exit_code"), got.get("stdout"), got.get("stderr")
    if not isinstance(code, int) or not isinstance(out, str) or not isinstance(err, str):
        raise HookNotRelayed("the broker's answer is not a hook answer")
    return HookAnswer(exit_code=code, stdout=out, stderr=err)


class HookNotRelayed(Exception):
    """The broker could not be asked: the hook refuses in the event's own form."""
