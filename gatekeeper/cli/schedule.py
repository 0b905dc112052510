"""`oms schedule install|show|remove`: the one user-scoped schedule."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli.options import REPO_OPTION, FullHelpGroup
from gatekeeper.cli.render import Data, Outcome, command
from gatekeeper.text import sanitize


@click.group(cls=FullHelpGroup)
def schedule() -> None:
    """The one user-scoped schedule: GitHub sync every 60 s, the watchdog every 15 min."""


@schedule.command("install")
@REPO_OPTION
@command
def schedule_install(repo: Path) -> Outcome:
    """Install (or update) the schedule for this repository; again: unchanged."""
    from gatekeeper.work import schedule as s

    backend = s.detect()
    if backend is None:
        raise s.unavailable()
    data = s.install(Path.home(), backend, s.for_repo(repo))
    return Outcome(data, lines=install_lines(data["schedule"]))


@schedule.command("show")
@REPO_OPTION
@command
def schedule_show(repo: Path) -> Outcome:
    """What is installed, read back from the units or the crontab."""
    from gatekeeper.work import schedule as s

    del repo  # one schedule per user: shown whichever repository it is for
    backend = s.detect()
    if backend is None:
        raise s.unavailable()
    data = s.show(Path.home(), backend)
    return Outcome(data, lines=show_lines(data["schedule"]))


@schedule.command("remove")
@REPO_OPTION
@command
def schedule_remove(repo: Path) -> Outcome:
    """Remove oms' own units or crontab block; nothing else."""
    from gatekeeper.work import schedule as s

    del repo
    backend = s.detect()
    if backend is None:
        raise s.unavailable()
    data = s.remove(Path.home(), backend)
    got = data["schedule"]
    return Outcome(data, lines=[f"schedule ({got['backend']}): {got['action']}"])


def install_lines(got: Data) -> list[str]:
    lines = [f"schedule ({got['backend']}): {got['action']}"]
    for job in got["jobs"]:
        argv = " ".join(sanitize(a, 200) for a in job["argv"])
        lines.append(f"  {job['name']} every {job['interval_s']} s: {argv}")
    return lines


def show_lines(got: Data) -> list[str]:
    if not got["installed"]:
        return [f"schedule ({got['backend']}): not installed"]
    lines = [f"schedule ({got['backend']}): installed"]
    for e in got["entries"]:
        mine = "" if e["ours"] else " (not oms')"
        lines.append(f"{sanitize(e['file'], 200)}{mine}:")
        lines += [f"  {sanitize(line, 300)}" for line in e["text"].splitlines()]
    return lines
