"""`oms schedule install|show|remove`: the one user-scoped schedule (H2)."""

from __future__ import annotations

import click


@click.group()
def schedule() -> None:
    """The one user-scoped schedule: GitHub sync every 60 s, the watchdog every 15 min."""
