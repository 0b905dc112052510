"""`oms transfer …`: the data boundary — preview, approve, release, show, list."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from gatekeeper.cli import render
from gatekeeper.cli.options import DIGEST_REPO_OPTION, REPO_OPTION, FullHelpGroup
from gatekeeper.cli.render import Outcome, command
from gatekeeper.digest import Sha256Digest
from gatekeeper.errors import EXIT_BLOCKED, UsageError
from gatekeeper.gates.transfer.approve import approve as approve_transfer
from gatekeeper.gates.transfer.preview import preview as preview_transfer
from gatekeeper.gates.transfer.release import release as release_transfer
from gatekeeper.gates.transfer.state import list_transfers, manifest_digest
from gatekeeper.gates.transfer.state import show as show_transfer


@click.group(cls=FullHelpGroup)
def transfer() -> None:
    """The data boundary: preview, approve, release, show, list."""


@transfer.command("preview")
@REPO_OPTION
@click.option("--to", "to", required=True, metavar="PROVIDER:MODEL", help="The destination.")
@click.option("--purpose", required=True, help="Why the context leaves (sent too).")
@click.option(
    "--context", type=click.Choice(["repo", "diff", "paths", "none"]), default="none",
    show_default=True,
)  # fmt: skip
@click.option("--path", "paths", multiple=True, help="With --context paths: a file or folder.")
@click.option("--base", help="With --context diff: the base (default: the default branch).")
@click.option("--kind", type=click.Choice(["cli", "api", "browser"]), default="api",
              show_default=True, help="How the destination is reached.")  # fmt: skip
@click.option("--redact", is_flag=True, help="Replace lines with findings instead of blocking.")
@command
def transfer_preview(repo: Path, to: str, purpose: str, context: str, paths: tuple[str, ...],
                     base: str | None, kind: str, redact: bool) -> Outcome:  # fmt: skip
    """Build, scan, sign and record a transfer manifest, and print its approval packet."""
    data = preview_transfer(repo, to, purpose, context, list(paths), base, redact, kind).to_json()
    code = EXIT_BLOCKED if data["status"] == "blocked" else 0
    return Outcome(data, code=code, lines=render.preview_lines(data), page=True)


@transfer.command("approve")
@click.argument("digest", metavar="DIGEST")
@click.option("--code", required=True, help="The code from the approval packet.")
@DIGEST_REPO_OPTION
@command
def transfer_approve(digest: str, code: str, repo: Path | None) -> Outcome:
    """Approve one manifest: a human at the controlling terminal, or an autopilot rule."""
    data = approve_transfer(repo, manifest_digest(repo, digest), code).to_json()
    return Outcome(data, lines=render.approve_lines(data))


@transfer.command("release")
@click.argument("digest", metavar="DIGEST")
@click.option("--out", default="-", show_default=True, help="FILE, or - for standard output.")
@DIGEST_REPO_OPTION
@command
def transfer_release(digest: str, out: str, repo: Path | None) -> Outcome:
    """Write the approved payload, once, if nothing changed since the preview."""
    if out == "-" and "--json" in sys.argv:
        raise UsageError("with --json, give --out FILE (stdout carries the JSON)")
    full = manifest_digest(repo, digest)
    if out == "-":
        released, payload = release_transfer(repo, full, out)
        sys.stdout.buffer.write(payload)
        sys.stdout.flush()
        return Outcome(released.to_json(), lines=[])
    data = _release_to_file(repo, full, out)
    return Outcome(data, lines=render.release_lines(data, out))


def _release_to_file(repo: Path | None, digest: Sha256Digest, out: str) -> dict[str, Any]:
    # Create the file first, so an unwritable --out does not spend the approval.
    try:
        fh = open(out, "xb")
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror}") from None
    try:
        released, payload = release_transfer(repo, digest, out)
        data = released.to_json()
        fh.write(payload)
        fh.close()
    except BaseException:
        fh.close()
        if Path(out).stat().st_size == 0:
            Path(out).unlink()
        raise
    return data


@transfer.command("show")
@click.argument("digest", metavar="DIGEST")
@DIGEST_REPO_OPTION
@command
def transfer_show(digest: str, repo: Path | None) -> Outcome:
    """A manifest, its packet and its state."""
    data = show_transfer(repo, manifest_digest(repo, digest)).to_json()
    return Outcome(data, lines=render.show_lines(data), page=True)


@transfer.command("list")
@REPO_OPTION
@command
def transfer_list(repo: Path) -> Outcome:
    """Every manifest of this repository and its state."""
    data = list_transfers(repo).to_json()
    return Outcome(data, lines=render.list_lines(data))
