"""`oms evidence …`: audit, show, prove, export, note, key and repair the evidence store."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli import render
from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import Outcome, command
from gatekeeper.errors import EXIT_BLOCKED
from gatekeeper.gates import records

SEQ = click.argument("seq", type=click.IntRange(min=0))


@click.group()
def evidence() -> None:
    """The evidence store: audit, show, prove, export, note, key, repair."""


@evidence.command("audit")
@REPO_OPTION
@command
def evidence_audit(repo: Path) -> Outcome:
    """Verify the whole log, blobs, checkpoints and witness offline."""
    report = records.audit_repo(repo).to_json()
    code = 0 if report["intact"] else EXIT_BLOCKED
    return Outcome(report, code=code, lines=render.audit_lines(report))


@evidence.command("show")
@SEQ
@REPO_OPTION
@command
def evidence_show(seq: int, repo: Path) -> Outcome:
    """Print one entry."""
    return Outcome(records.show(repo, seq))


@evidence.command("prove")
@SEQ
@REPO_OPTION
@command
def evidence_prove(seq: int, repo: Path) -> Outcome:
    """Inclusion proof of an entry against the latest checkpoint, verified."""
    data = records.prove_entry(repo, seq)
    return Outcome(data, code=0 if data["verified"] else EXIT_BLOCKED)


@evidence.command("export")
@SEQ
@click.option("--dsse", is_flag=True, required=True, help="A DSSE envelope (the only format).")
@REPO_OPTION
@command
def evidence_export(seq: int, dsse: bool, repo: Path) -> Outcome:
    """Export an entry as a DSSE envelope holding an in-toto Statement v1."""
    env = records.export_entry(repo, seq)
    return Outcome({"envelope": env}, lines=render.export_lines(env))


@evidence.command("note")
@click.option("--message", "-m", required=True, help="The note text.")
@click.option(
    "--attach", type=click.Path(dir_okay=False, path_type=Path), help="A file to store as a blob."
)
@REPO_OPTION
@command
def evidence_note(message: str, attach: Path | None, repo: Path) -> Outcome:
    """Append a human note."""
    data = records.note(repo, message, attach).to_json()
    return Outcome(data, lines=render.note_lines(data))


@evidence.command("key")
@REPO_OPTION
@command
def evidence_key(repo: Path) -> Outcome:
    """Print the public signing key and its id."""
    data = records.key_info(repo).to_json()
    return Outcome(data, lines=render.key_lines(data))


@evidence.command("repair")
@REPO_OPTION
@command
def evidence_repair(repo: Path) -> Outcome:
    """Move a torn last line to quarantine (never a complete entry) and record it."""
    data = records.repair(repo).to_json()
    return Outcome(data, lines=render.repair_lines(data))
