"""`oms toolchain prepare|lock|list|verify|gc`: trusted toolchains from the base's lockfiles."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli.options import REPO_OPTION, FullHelpGroup
from gatekeeper.cli.render import Data, Outcome, command
from gatekeeper.gates.toolchain import lock, manage, prepare
from gatekeeper.text import sanitize


def _progress(line: str) -> None:
    # stderr: stdout carries the one JSON object with --json.
    click.echo(f"oms: {sanitize(line)}", err=True)


@click.group(cls=FullHelpGroup)
def toolchain() -> None:
    """Trusted toolchains: built from the base's lockfiles, bound read-only into checks."""


@toolchain.command("prepare")
@REPO_OPTION
@click.argument("names", nargs=-1)
@command
def toolchain_prepare(repo: Path, names: tuple[str, ...]) -> Outcome:
    """Build the base policy's toolchains (or NAMES) that are not built yet, outside the
    sandbox, with hash-checked installs; record each build as evidence."""
    data = prepare.prepare(repo, names, _progress).to_json()
    return Outcome(data, lines=prepare_lines(data))


@toolchain.command("lock")
@REPO_OPTION
@click.option(
    "--output",
    default=lock.DEFAULT_LOCK,
    show_default=True,
    help="Where to write it, in the worktree (never onto a symlink or device).",
)
@click.option(
    "--extra",
    "extras",
    multiple=True,
    help="An extra of [project.optional-dependencies] to include (repeatable; "
    "default: test, tests or testing when the project has it).",
)
@click.option(
    "--python",
    default="/usr/bin/python3",
    show_default=True,
    help="The interpreter to resolve for (the python-venv toolchain's `python`).",
)
@command
def toolchain_lock(repo: Path, output: str, extras: tuple[str, ...], python: str) -> Outcome:
    """Write a hash-pinned requirements.lock with uv from pyproject.toml as committed on
    the default branch (resolved in a temporary folder; nothing is built)."""
    data = lock.lock(repo, output, extras, python, _progress).to_json()
    extra = "".join(f" [{e}]" for e in data["extras"])
    lines = [
        f"wrote {data['path']}: {data['packages']} packages, hash-pinned, from "
        f"pyproject.toml{extra} at {data['commit'][:12]}",
        "next:",
    ]
    return Outcome(
        data, lines=[sanitize(x) for x in [*lines, *(f"  {s}" for s in data["next_steps"])]]
    )


@toolchain.command("verify")
@REPO_OPTION
@click.argument("names", nargs=-1)
@command
def toolchain_verify(repo: Path, names: tuple[str, ...]) -> Outcome:
    """Recompute each toolchain's tree digest against its record (exit 4 unless intact)."""
    data = manage.verify(repo, names).to_json()
    return Outcome(data, lines=state_lines(data["toolchains"]))


@toolchain.command("list")
@REPO_OPTION
@command
def toolchain_list(repo: Path) -> Outcome:
    """The toolchains prepared on this machine, and those the repository's base names."""
    data = manage.toolchain_list(repo).to_json()
    return Outcome(data, lines=list_lines(data))


@toolchain.command("gc")
@REPO_OPTION
@click.option("--keep-days", type=click.IntRange(0, 36_500), default=30, show_default=True,
              help="Keep toolchains a gate used within this many days.")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
@command
def toolchain_gc(repo: Path, keep_days: int, dry_run: bool) -> Outcome:
    """Remove unfinished builds, and toolchains no gate used for --keep-days (never one
    the repository's base policy names)."""
    data = manage.gc(repo, keep_days, dry_run).to_json()
    verb = "would remove" if dry_run else "removed"
    lines = [f"{verb} {sanitize(p)}" for p in data["removed"]] or ["nothing to remove"]
    return Outcome(data, lines=lines)


def prepare_lines(data: Data) -> list[str]:
    if not data["toolchains"]:
        return ["no [[toolchains]] in the base's policy"]
    return [f"{t['name']}: {t['state']} {t['tree_digest'][:19]}… {sanitize(t['dir'])}"
            for t in data["toolchains"]]  # fmt: skip


def state_lines(states: list[Data]) -> list[str]:
    return [f"{s['name']}: {s['state']} ({s['kind']}, {sanitize(s['dir'])})" for s in states]


def list_lines(data: Data) -> list[str]:
    lines = [f"toolchain directory: {sanitize(data['toolchain_dir'])}"]
    if data["policy_commit"] is not None:
        lines.append(f"base {data['policy_commit'][:12]}:")
        lines += [f"  {line}" for line in state_lines(data["policy"])] or ["  (none)"]
    lines.append("prepared on this machine:")
    prepared = [f"  {p['name']} {p['kind']} {p['id'][7:19]} {p['bytes']} bytes, "
                f"last used {p['last_used'] or 'never'}" for p in data["prepared"]]  # fmt: skip
    return lines + (prepared or ["  (none)"])
