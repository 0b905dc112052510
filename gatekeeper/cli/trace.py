"""`oms trace fixture`: the full local ticket path, offline and non-certifying (lead)."""

from __future__ import annotations

import click


@click.group()
def trace() -> None:
    """Local tracers: the whole ticket path on a fixture, offline and non-certifying."""
