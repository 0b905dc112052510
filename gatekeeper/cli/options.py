"""Options shared by several command groups."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

REPO_OPTION = click.option(
    "--repo",
    "repo",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The repository.",
)

# approve, release and show: a digest names its manifest wherever oms is run from, so the
# copied approval command works as copied. `--repo` is still accepted.
DIGEST_REPO_OPTION = click.option(
    "--repo",
    "repo",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The repository (default: the current one if it holds the manifest, else the one "
    "the manifest names).",
)


FULL_LINE = 10_000  # no shortening: a command's whole first sentence is its line in --help


def full_help_rows(commands: Sequence[tuple[str, click.Command]]) -> list[tuple[str, str]]:
    """(name, the command's first sentence, whole): click shortens it to fit one line,
    which cuts descriptions mid-word; `write_dl` wraps the whole sentence instead."""
    return [(name, cmd.get_short_help_str(FULL_LINE)) for name, cmd in commands if not cmd.hidden]


class FullHelpGroup(click.Group):
    """A command group whose --help lists each command with its whole one-line description."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        found = [(n, self.get_command(ctx, n)) for n in self.list_commands(ctx)]
        rows = full_help_rows([(n, c) for n, c in found if c is not None])
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
