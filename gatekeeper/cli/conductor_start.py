"""`oms conductor start` (and bare `oms` on a terminal), and the worker pane's own process
(H4)."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import Outcome, command


@click.command("start")
@REPO_OPTION
@click.option("--state-root", "state_root", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="The oms state root (default: $OMS_HOME).")  # fmt: skip
@command
def start(repo: Path, state_root: Path | None) -> Outcome:
    """Preflight, confirm at the terminal, then create or resume the conductor's tmux session."""
    raise NotImplementedError


@click.command("worker", hidden=True)
@REPO_OPTION
@click.option("--worker", "worker_id", required=True, help="The worker (w-…).")
def worker_pane(repo: Path, worker_id: str) -> None:
    """A worker pane's process: run the dispatch's executor under `oms agent run`."""
    raise NotImplementedError
