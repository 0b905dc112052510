"""`oms scan`: both secret scanners on paths, a commit range or standard input."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import Outcome, View, command, scan_lines
from gatekeeper.gates import secrets


@click.command("scan")
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--diff", "diff", metavar="BASE..HEAD", help="Scan what a commit range adds.")
@click.option("--stdin", "use_stdin", is_flag=True, help="Scan standard input.")
@click.option("--sarif", type=click.Path(dir_okay=False, path_type=Path), help="Write SARIF 2.1.0.")
@REPO_OPTION
@command
def scan(
    paths: tuple[Path, ...], diff: str | None, use_stdin: bool, sarif: Path | None, repo: Path
) -> Outcome:
    """Secrets in PATHs, a commit range or stdin, from Gitleaks and detect-secrets (exit 3)."""
    text = sys.stdin.buffer.read().decode("utf-8", "surrogateescape") if use_stdin else None
    result = secrets.scan(repo, list(paths), diff, text, sarif)
    data, code = result.to_json(), result.exit_code
    return Outcome(data, code=code, lines=scan_lines(data, View.detect()))
