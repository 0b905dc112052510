"""`oms install claude-code|codex`: wire oms into an agent client in one command."""

from __future__ import annotations

import click


@click.group()
def install() -> None:
    """Wire oms into Claude Code or Codex: MCP server, hooks and agent instructions."""
