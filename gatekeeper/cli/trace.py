"""`oms trace fixture`: the full local ticket path, offline and non-certifying."""

from __future__ import annotations

import click

from gatekeeper.cli.options import FullHelpGroup
from gatekeeper.cli.render import Outcome, command
from gatekeeper.text import sanitize


@click.group(cls=FullHelpGroup)
def trace() -> None:
    """Local tracers: the whole ticket path on a fixture, offline and non-certifying."""


def _say(line: str) -> None:
    click.echo(f"oms: {sanitize(line, 300)}", err=True)


@trace.command("fixture")
@command
def fixture() -> Outcome:
    """GitHub-shaped issue to draft PR on a sample repository, in a temporary state root.

    Every provider is a scripted `command:` role and GitHub a loopback stand-in, so nothing
    leaves the machine and the run certifies nothing; it shows every gate on the path.
    """
    from gatekeeper.work.conductor.trace import trace_fixture

    data = trace_fixture(_say)
    return Outcome(data, lines=[
        f"ticket {data['ticket']}: {data['decision']}, commit {data['commit'][:12]}",
        f"branch {data['branch']} pushed; draft PR #{data['pr']} read back at that commit",
        "non-certifying: scripted providers, a local GitHub stand-in",
    ])  # fmt: skip
