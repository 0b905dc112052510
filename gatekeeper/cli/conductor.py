"""`oms conductor start|bridge|wait-event`: the conductor in tmux, its seven-tool bridge and
its waiter. Each subcommand lives in its own module; this group only gathers them."""

from __future__ import annotations

import click

from gatekeeper.cli.conductor_bridge import bridge
from gatekeeper.cli.conductor_start import conductor_pane, start, worker_pane
from gatekeeper.cli.conductor_wait import wait_event
from gatekeeper.cli.options import FullHelpGroup


@click.group(cls=FullHelpGroup)
def conductor() -> None:
    """The conductor: a read-only agent in tmux that routes tickets through typed tools."""


conductor.add_command(start)
conductor.add_command(bridge)
conductor.add_command(wait_event)
conductor.add_command(worker_pane)
conductor.add_command(conductor_pane)
