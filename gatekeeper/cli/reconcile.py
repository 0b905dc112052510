"""`oms reconcile watchdog`: one recovery-only pass (H5)."""

from __future__ import annotations

import click


@click.group()
def reconcile() -> None:
    """Recovery: one watchdog pass over dead panes, stalled work and expired leases."""
