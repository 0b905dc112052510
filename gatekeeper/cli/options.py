"""Options shared by several command groups."""

from __future__ import annotations

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
