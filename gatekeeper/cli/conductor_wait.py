"""`oms conductor wait-event`: the conductor's waiter, armed by its SessionStart/Stop hooks
(H5)."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli.options import REPO_OPTION


@click.command("wait-event")
@REPO_OPTION
@click.option("--session", "session", required=True, help="The conductor session (c-…).")
def wait_event(repo: Path, session: str) -> None:
    """Wait for the next notification batch; print its opaque id and exit with the wake code."""
    raise NotImplementedError
