"""`oms conductor start` (and bare `oms` on a terminal), and the panes' own processes."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import click

from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import Outcome, command
from gatekeeper.errors import refusal
from gatekeeper.work.api import opened
from gatekeeper.work.fence import Work


def _use_state_root(state_root: Path | None) -> None:
    if state_root is not None:
        os.environ["OMS_HOME"] = str(state_root.absolute())


@click.command("start")
@REPO_OPTION
@click.option("--state-root", "state_root", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="The oms state root (default: $OMS_HOME).")  # fmt: skip
@click.option("--no-attach", "no_attach", is_flag=True,
              help="Create or resume the session without attaching to it.")  # fmt: skip
@command
def start(repo: Path, state_root: Path | None, no_attach: bool = False) -> Outcome:
    """Preflight, confirm at the terminal, then create or resume the conductor's tmux session."""
    from gatekeeper.work.conductor.start import start as start_conductor
    from gatekeeper.work.conductor.tmux import Tmux

    _use_state_root(state_root)
    with opened(repo) as work:
        shown = start_conductor(work)
    if not no_attach and sys.stdin.isatty() and sys.stdout.isatty():
        tm = Tmux(shown["socket"])
        argv = tm.attach_argv(shown["session"])
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": os.environ.get("HOME", "/"),
               "TERM": os.environ.get("TERM", "xterm-256color"),
               "LANG": os.environ.get("LANG", "C.UTF-8")}  # fmt: skip
        os.execve(argv[0], argv, env)  # noqa: S606 # nosec B606 -- tmux attach, an argv list
    word = "resumed" if shown["resumed"] else "started"
    lines = [f"conductor {shown['conductor']} {word} in tmux session {shown['session']}",
             f"attach: tmux -S {shown['socket']} attach -t {shown['session']}"]  # fmt: skip
    return Outcome(shown, lines=lines)


@click.command("worker", hidden=True)
@REPO_OPTION
@click.option("--worker", "worker_id", required=True, help="The worker (w-…).")
def worker_pane(repo: Path, worker_id: str) -> None:
    """A worker pane's process: run the dispatch's executor under `oms agent run`."""
    from gatekeeper.work.conductor.workers import run_worker

    _pane_process("worker", repo, lambda work: run_worker(work, worker_id))


@click.command("pane", hidden=True)
@REPO_OPTION
@click.option("--session", "session", required=True, help="The conductor session (c-…).")
def conductor_pane(repo: Path, session: str) -> None:
    """The conductor pane's process: the conductor role under `oms agent run`, read-only."""
    from gatekeeper.work.conductor.start import run_pane

    _pane_process("pane", repo, lambda work: run_pane(work, session))


def _pane_process(name: str, repo: Path, run: Callable[[Work], int]) -> NoReturn:
    """A pane's own process: its exit code, or its refusal's one line on the pane's stderr
    (no JSON: nobody reads this process's stdout but the pane)."""
    try:
        with opened(repo) as work:
            code = run(work)
    except Exception as exc:
        r = refusal(exc)
        click.echo(f"oms conductor {name}: {r.message}", err=True)
        sys.exit(r.exit_code)
    sys.exit(code)
