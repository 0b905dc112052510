"""`oms worker result`: a worker's typed receipt, the only move of a ticket to `verifying`."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli.goal import ticket_line
from gatekeeper.cli.options import REPO_OPTION, FullHelpGroup
from gatekeeper.cli.render import Outcome, command
from gatekeeper.work.dispatch import worker_result


@click.group(cls=FullHelpGroup)
def worker() -> None:
    """Workers: the receipt a dispatched worker files when it is done."""


@worker.command("result")
@REPO_OPTION
@click.option("--dispatch", "dispatch_id", required=True, help="The dispatch it answers.")
@click.option("--lease", "lease", required=True, help="The ticket's lease token.")
@click.option("--nonce", required=True, help="A fresh nonce; a replayed one refuses (exit 3).")
@click.option("--commit", default=None, metavar="SHA",
              help="The run's commit (default: the one the dispatch's run produced).")  # fmt: skip
@command
def worker_result_cmd(repo: Path, dispatch_id: str, lease: str, nonce: str,
                      commit: str | None) -> Outcome:  # fmt: skip
    """File the receipt of a dispatch's run: the ticket moves to verifying, never further."""
    data = worker_result(repo, dispatch_id, lease, nonce, commit)
    r = data["receipt"]
    return Outcome(data, lines=[f"receipt {r['id']} for dispatch {r['dispatch']}: {r['commit']}",
                                ticket_line(data["ticket"])])  # fmt: skip
