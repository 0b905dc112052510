"""`oms conductor bridge`: the session-scoped stdio MCP server of seven tools (H3)."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli.options import REPO_OPTION


@click.command("bridge")
@REPO_OPTION
@click.option("--session", "session", required=True, help="The conductor session (c-…).")
def bridge(repo: Path, session: str) -> None:
    """Serve the conductor's seven tools over stdio for one conductor session."""
    raise NotImplementedError
