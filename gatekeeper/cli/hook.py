"""`oms hook claude-code|codex EVENT`: the agent clients' hooks, in their own protocols."""

from __future__ import annotations

import click


@click.group()
def hook() -> None:
    """Agent hooks in Claude Code's and Codex's protocols: deny secrets and protected writes."""
