"""`oms worker result` inside a worker's agent run: the broker outside files the receipt.

The broker (gatekeeper/agent/worker_route.py) checks the workspace for a commit beyond the
run's base and marks the worker done; the receipt is filed with the dispatch's own lease
by the worker process outside when the run ends (gatekeeper/work/conductor/workers.py).
"""

from __future__ import annotations

import http.client

from gatekeeper.cli.render import emit_error, emit_json
from gatekeeper.errors import Blocked, Unavailable
from gatekeeper.integrations.hooks.observe import post_json
from gatekeeper.text import sanitize

RESULT_PATH = "/oms/worker/result"  # worker_route's (the broker's side)


def worker_result_inside(as_json: bool, socket_path: str) -> int:
    """Ask the broker; the exit code: 0 done, 3 no commit to file, 4 no broker or route."""
    try:
        status, got = post_json(socket_path, RESULT_PATH, {})
    except (OSError, http.client.HTTPException) as exc:
        return _refused(as_json, Unavailable(f"cannot reach oms outside: {type(exc).__name__}"))
    if status == 404 or not isinstance(got, dict):
        return _refused(as_json, Unavailable("this run is not a worker's: there is no receipt "
                                             "to file from inside"))  # fmt: skip
    if status != 200 or not got.get("ok"):
        why = sanitize(str(got.get("message") or f"HTTP {status}"), 300)
        return _refused(as_json, Blocked(why))
    data = {k: got.get(k) for k in ("run_id", "worker", "commit", "filed")}
    if as_json:
        emit_json({"ok": True, "oms_exit_code": 0, **data})
    else:
        print(f"receipt for run {data['run_id']}: {data['commit']} (filed {data['filed']})")
    return 0


def _refused(as_json: bool, err: Blocked | Unavailable) -> int:
    emit_error(as_json, err.exit_code, err.kind, err.message)
    return err.exit_code
