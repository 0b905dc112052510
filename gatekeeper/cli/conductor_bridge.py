"""`oms conductor bridge`: the session-scoped stdio MCP server of seven tools."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gatekeeper.cli import render
from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.errors import OmsError


@click.command("bridge")
@REPO_OPTION
@click.option("--session", "session", required=True, help="The conductor session (c-…).")
def bridge(repo: Path, session: str) -> None:
    """Serve the conductor's seven tools over stdio for one conductor session."""
    # Imported here: the MCP SDK costs a second of start-up that `oms --help` must not pay.
    from gatekeeper.mcp.bridge import serve

    try:
        serve(repo, session)
    except OmsError as err:
        # Nothing on stdout (the protocol's channel): one line on stderr, never a traceback.
        render.emit_error(False, err.exit_code, err.kind, err.message)
        sys.exit(err.exit_code)
