"""`oms release status`: release readiness of oms itself. Imports nothing beyond click,
so it shows what start-up alone costs."""

from __future__ import annotations

import click

from gatekeeper.cli.options import FullHelpGroup
from gatekeeper.cli.render import Outcome, command


@click.group(cls=FullHelpGroup)
def release() -> None:
    """Release readiness of oms itself."""


@release.command("status")
@command
def release_status() -> Outcome:
    """Always `not_stable`: nothing in oms merges or releases."""
    return Outcome({"status": "not_stable"}, lines=["not_stable"])
