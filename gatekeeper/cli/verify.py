"""`oms verify TICKET`: the result gate on the ticket's receipt, then one supplemental grade."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli.goal import NONCE_OPTION, ticket_line
from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import (
    PLAIN,
    Data,
    Outcome,
    View,
    refused_result_lines,
    result_lines,
    showing_refusals,
)
from gatekeeper.text import sanitize
from gatekeeper.work.verify import verify as run_verify


def _progress(line: str) -> None:
    click.echo(f"oms: {sanitize(line)}", err=True)  # stderr: stdout is the outcome


@click.command("verify")
@REPO_OPTION
@click.argument("ticket_id")
@NONCE_OPTION
@click.option(
    "--transfer",
    default=None,
    help="sha256:<digest>: an approved transfer manifest, for an external grader.",
)
@showing_refusals(refused_result_lines)
def verify(repo: Path, ticket_id: str, nonce: str | None, transfer: str | None) -> Outcome:
    """The result gate decides; one fresh grade from another engine is recorded beside it."""
    data, code = run_verify(repo, ticket_id, nonce, transfer, _progress)
    return Outcome(data, code=code, lines=verify_lines(data, View.detect()))


def verify_lines(data: Data, view: View = PLAIN) -> list[str]:
    """The verdict as `oms process-result` shows it, the ticket's new state, the grade."""
    lines = [*result_lines(data["verdict"], view), ticket_line(data["ticket"])]
    if data["ticket"]["human_hold"]:
        lines.append("on human hold: oms never merges")
    g = data["grade"]
    if g is not None:
        lines.append(f"grade {g['grade']} by {g['role']} ({sanitize(g['engine'])}), seq {g['seq']}")
        lines += [f"  - {sanitize(r)}" for r in g["reasons"]]
    else:
        lines.append(f"no grade: {sanitize(data['grade_problem'] or '')} (ticket parked)")
    return lines
