"""`oms goal create|status`: a durable goal, recorded before any ticket is dispatched."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli.options import REPO_OPTION, FullHelpGroup
from gatekeeper.cli.render import Data, Outcome, command
from gatekeeper.text import sanitize
from gatekeeper.work import api

NONCE_OPTION = click.option(
    "--nonce", default=None, help="A fresh nonce for this change (default: one oms makes)."
)


@click.group(cls=FullHelpGroup)
def goal() -> None:
    """Goals: an objective, when it is done, and the tickets that serve it."""


@goal.command("create")
@REPO_OPTION
@click.option("--objective", required=True, help="What the goal is for.")
@click.option("--stop-when", "stop_when", required=True, help="When it is done.")
@click.option("--horizon", type=click.Choice(["until-empty", "12h", "24h"]),
              default="until-empty", show_default=True, help="How long it runs.")  # fmt: skip
@NONCE_OPTION
@command
def goal_create(repo: Path, objective: str, stop_when: str, horizon: str,
                nonce: str | None) -> Outcome:  # fmt: skip
    """Record a goal (its objective and stop condition) as state and as evidence."""
    data = api.create_goal(repo, objective, stop_when, horizon, nonce)  # type: ignore[arg-type]
    return Outcome(data, lines=[goal_line(data["goal"])])


@goal.command("status")
@REPO_OPTION
@click.argument("goal_id", required=False)
@command
def goal_status(repo: Path, goal_id: str | None) -> Outcome:
    """One goal, its ticket counts by state and its tickets, or every goal with its counts."""
    data = api.goal_status(repo, goal_id)
    if goal_id is None:
        return Outcome(data, lines=[goal_line(g) for g in data["goals"]] or ["no goals"])
    head = goal_line({**data["goal"], "counts": data["counts"]})
    lines = [head, *(ticket_line(t) for t in data["tickets"])]
    return Outcome(data, lines=lines)


def goal_line(g: Data) -> str:
    counts = g.get("counts") or {}
    shown = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    tail = f" [{shown}]" if shown else ""
    return f"{g['id']} v{g['version']} {g['state']}: {sanitize(g['objective'], 120)}{tail}"


def ticket_line(t: Data) -> str:
    hold = " (human hold)" if t["human_hold"] else ""
    attempt = f"attempt {t['attempts']}/{t['max_attempts']}"
    return f"{t['id']} v{t['version']} {t['state']}{hold} {attempt}: {sanitize(t['title'], 120)}"
