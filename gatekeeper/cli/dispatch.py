"""`oms dispatch TICKET`: deliver a leased ticket to a role's provider and wait for its result."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli.goal import ticket_line
from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import Data, Outcome, command
from gatekeeper.errors import EXIT_FAILED, UsageError
from gatekeeper.text import sanitize
from gatekeeper.work.dispatch import dispatch as run_dispatch


@click.command("dispatch")
@REPO_OPTION
@click.argument("ticket_id")
@click.option("--lease", "lease", required=True, help="The token `oms ticket lease` printed.")
@click.option("--role", "role", required=True, help="A [roles.<name>] of the trusted policy.")
@click.option("--nonce", required=True, help="A fresh nonce; a replayed one refuses (exit 3).")
@click.option("--wait/--no-wait", "wait", default=True, show_default=True,
              help="Run the worker to completion (the only mode for exec providers).")  # fmt: skip
@click.option("--transfer", default=None, metavar="sha256:DIGEST",
              help="The approved transfer manifest an external role's context needs.")  # fmt: skip
@command
def dispatch(repo: Path, ticket_id: str, lease: str, role: str, nonce: str, wait: bool,
             transfer: str | None) -> Outcome:  # fmt: skip
    """Deliver a leased ticket to a role's provider: the envelope first, then the run."""
    if not wait:
        raise UsageError("--no-wait: interactive delivery arrives with the conductor")
    data = run_dispatch(repo, ticket_id, lease, role, nonce, transfer)
    filed = data["dispatch"]["state"] == "received"
    return Outcome(data, code=0 if filed else EXIT_FAILED, lines=dispatch_lines(data))


def dispatch_lines(data: Data) -> list[str]:
    d = data["dispatch"]
    head = (f"dispatch {d['id']} attempt {d['attempt']} run {d['run_id']} "
            f"(role {d['role']}, {d['engine']}): {d['state']}")  # fmt: skip
    lines = [head, ticket_line(data["ticket"])]
    if d["candidate"]:
        lines.append(f"candidate {d['candidate']} (exit {d['exit_code']})")
    elif d["reason"]:
        lines.append(f"no result: {sanitize(d['reason'])}")
    return lines
