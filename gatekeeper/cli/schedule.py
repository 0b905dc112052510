"""`oms schedule install|show|remove`: the one user-scoped schedule."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import click

from evidence import state_root
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
    data = s.install(Path.home(), backend, s.for_repo(repo, state_root()))
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
    data = s.show(Path.home(), backend, state_root())
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
    data = s.remove(Path.home(), backend, state_root())
    got = data["schedule"]
    return Outcome(data, lines=[f"schedule ({got['backend']}): {got['action']}"])


@schedule.command("run")
@click.argument("job", type=click.Choice(["sync", "watchdog"]))
@REPO_OPTION
@command
def schedule_run(job: str, repo: Path) -> Outcome:
    """Run JOB once, as the schedule does: logged and recorded under $OMS_HOME/schedule.

    What the cron line or unit starts. The outcome is what `oms schedule show` and
    `oms doctor` report; the exit code is the job's."""
    from gatekeeper.work import job_log
    from gatekeeper.work import schedule as s

    # The intervals are the schedule's business, not one run's.
    sync, watchdog = s.jobs(s.oms_argv(), repo.absolute(), 60, 900, state_root())
    done = job_log.run(sync if job == "sync" else watchdog)
    # Silent when it worked: cron mails what a job prints.
    lines = [sanitize(f"{job} failed (exit {done.exit_code}): {done.error}")] if done.error else []
    return Outcome({"run": asdict(done)}, code=done.exit_code, lines=lines)


def install_lines(got: Data) -> list[str]:
    lines = [f"schedule ({got['backend']}): {got['action']}"]
    for job in got["jobs"]:
        argv = " ".join(sanitize(a, 200) for a in job["argv"])
        lines.append(f"  {job['name']} every {job['interval_s']} s: {argv}")
    if got["jobs"]:
        home = sanitize(got["jobs"][0]["oms_home"], 200)
        lines.append(f"  run as `oms schedule run JOB` with OMS_HOME={home}; logs in "
                     f"{home}/schedule/")  # fmt: skip
    return lines


def show_lines(got: Data) -> list[str]:
    if not got["installed"]:
        return [f"schedule ({got['backend']}): not installed", *_run_lines(got)]
    lines = [f"schedule ({got['backend']}): installed"]
    for e in got["entries"]:
        mine = "" if e["ours"] else " (not oms')"
        lines.append(f"{sanitize(e['file'], 200)}{mine}:")
        lines += [f"  {sanitize(line, 300)}" for line in e["text"].splitlines()]
    return [*lines, *_run_lines(got)]


def _run_lines(got: Data) -> list[str]:
    lines = []
    for job, last in got["last_runs"].items():
        if last is None:
            lines.append(f"last {job}: never run (under {sanitize(got['oms_home'], 200)})")
            continue
        how = "ok" if last.get("exit_code") == 0 else f"FAILED, exit {last.get('exit_code')}"
        why = f": {last['error']}" if last.get("error") else ""
        lines.append(sanitize(f"last {job}: {how} at {last.get('started')}{why}", 400))
    return lines
