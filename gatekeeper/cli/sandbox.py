"""`oms sandbox run`: one command in the check profile on a scratch copy of HEAD."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli.options import REPO_OPTION, FullHelpGroup
from gatekeeper.cli.render import Outcome, command, sandbox_lines
from gatekeeper.errors import EXIT_FAILED
from gatekeeper.gates import sandboxed


@click.group(cls=FullHelpGroup)
def sandbox() -> None:
    """Run a command in the check sandbox."""


@sandbox.command("run", context_settings={"ignore_unknown_options": True})
@REPO_OPTION
@click.option("--timeout", type=click.IntRange(1, 86_400), help="Wall-clock limit in seconds.")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
@command
def sandbox_run(repo: Path, timeout: int | None, cmd: tuple[str, ...]) -> Outcome:
    """Run CMD in the check profile on a scratch copy of the repository's HEAD."""
    data = sandboxed.sandbox_run(repo, list(cmd), timeout).to_json()
    code = 0 if data["exit_code"] == 0 and not data["timed_out"] else EXIT_FAILED
    return Outcome(data, code=code, lines=sandbox_lines(data))
