"""`oms conductor wait-event`: the conductor's waiter, armed by its SessionStart/Stop hooks.

Like `oms hook`, its output is the client's, not the `--json` envelope: on a wake it prints
ONE line of opaque ids, `{"notification": "n-…", "dispatchable": [{"goal", "ticket",
"state"}, …]}` (the canonical state it wakes the conductor to: at most 20 tickets, those
`verifying` first, for `process_result`, then the pending or retryable ones; never their
text), on stdout and the same line on stderr (which Claude Code hands to the model when an
`asyncRewake` hook exits 2), and exits 2; at the timeout it prints `{"notification": null}`
and exits 0 (its generation is then `failed`, reason `timeout`).
A refusal is one stderr line and DESIGN.md's exit code (3: another waiter is armed and
alive, or this one was superseded).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import error_line
from gatekeeper.errors import refusal
from gatekeeper.work.conductor import waiter
from gatekeeper.work.fence import Work, new_nonce


@click.command("wait-event")
@REPO_OPTION
@click.option("--session", "session", required=True, help="The conductor session (c-…).")
@click.option("--timeout", "timeout_s", type=click.FloatRange(0, waiter.MAX_TIMEOUT_S),
              default=None, help="Give up after S seconds (exit 0); default: wait on.")  # fmt: skip
def wait_event(repo: Path, session: str, timeout_s: float | None) -> None:
    """Wait for the next notification batch; print its opaque id and exit with the wake code."""
    try:
        work = Work.open(repo)
        try:
            gen = waiter.arm(work, session, new_nonce())
            done = waiter.wait(work, gen, timeout_s)
            woke = done.state == "notified"
            ready = waiter.dispatchable(work) if woke else []
        finally:
            work.close()
    except Exception as exc:
        err = refusal(exc)
        sys.stderr.write(error_line(err.kind, err.message) + "\n")
        sys.exit(err.exit_code)
    shown: dict[str, object] = {"notification": done.notification}
    if woke:
        shown["dispatchable"] = ready
    line = json.dumps(shown)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    if woke:
        sys.stderr.write(line + "\n")
        sys.exit(waiter.WAKE_EXIT)
    sys.exit(0)
