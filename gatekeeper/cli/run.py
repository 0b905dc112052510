"""`oms run plan|orchestrate|consult|summon|fanout|continue|loop|reconcile|abort|status|list|
artifact|capture`: renders `gatekeeper.work.runs` (one function per command). STUB: the
surface helper fills it."""

from __future__ import annotations

import click


@click.group()
def run() -> None:
    """Runs: plan, orchestrate, consult, summon, fanout, continue, loop, reconcile, abort."""
