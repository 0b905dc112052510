"""`oms trust report --day YYYY-MM-DD`: one closed UTC day's protected verdicts per role."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli.options import REPO_OPTION, FullHelpGroup
from gatekeeper.cli.render import Data, Outcome, command
from gatekeeper.text import sanitize
from gatekeeper.work.trust import trust_report


@click.group(cls=FullHelpGroup)
def trust() -> None:
    """Review of verdicts per role: closed UTC days only, built from evidence; grants nothing."""


@trust.command("report")
@REPO_OPTION
@click.option("--day", required=True, help="A closed UTC day, YYYY-MM-DD (before today).")
@command
def report(repo: Path, day: str) -> Outcome:
    """Verdicts of one closed UTC day, bound to ticket, attempt, lease, commit, policy, plan."""
    data = trust_report(repo, day)
    return Outcome(data, lines=report_lines(data))


def report_lines(data: Data) -> list[str]:
    """The day, how many verdicts were counted and excluded, one line per role, each exclusion."""
    counted = f"{len(data['verdicts'])} protected verdict(s), {len(data['excluded'])} excluded"
    lines = [f"trust report for {data['day']} (UTC, closed): review only, grants nothing", counted]
    for role, c in sorted(data["by_role"].items()):
        lines.append(
            f"{sanitize(role)}: ready {c['ready']}, failed {c['failed']}, blocked "
            f"{c['blocked']}, parked {c['parked']}; grades pass {c['grade_pass']}, fail "
            f"{c['grade_fail']}, uncertain {c['grade_uncertain']}; disagreements "
            f"{c['disagreements']}"
        )
    lines += [f"excluded seq {x['verify_seq']}: {sanitize(x['reason'])}" for x in data["excluded"]]
    return lines
