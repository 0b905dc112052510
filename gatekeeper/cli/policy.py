"""`oms policy init|check|show`: write, validate and read `oms.toml`."""

from __future__ import annotations

import click


@click.group()
def policy() -> None:
    """The policy file: init (a starter oms.toml), check (validate a file), show (effective)."""
