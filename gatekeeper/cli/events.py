"""`oms events sync github`: one-shot GitHub sync into typed, deduplicated events (H1)."""

from __future__ import annotations

import click


@click.group()
def events() -> None:
    """Typed events: GitHub sync into deduplicated events, pending tickets and notifications."""


@events.group("sync")
def sync() -> None:
    """One-shot syncs of an event source."""
