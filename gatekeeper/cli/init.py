"""`oms init`: the state root, signing key and evidence log of a repository."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import Outcome, command, init_lines
from gatekeeper.gates import records


@click.command()
@REPO_OPTION
@click.option("--default-branch", help="The branch whose tip is the trusted base (recorded in "
              "the state root; default: origin/HEAD, else main, else master).")  # fmt: skip
@command
def init(repo: Path, default_branch: str | None) -> Outcome:
    """Create the state root, signing key and evidence log for a repository."""
    data = records.init(repo, default_branch).to_json()
    return Outcome(data, lines=init_lines(data))
