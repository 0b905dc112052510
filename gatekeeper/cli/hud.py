"""`oms hud`: a read-only view of goals, tickets, workers, events and next actions (H2)."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import Outcome, command


@click.command("hud")
@REPO_OPTION
@command
def hud(repo: Path) -> Outcome:
    """A read-only view of goals, tickets, workers, events and next actions."""
    raise NotImplementedError
