"""`oms events sync github`: one-shot GitHub sync into typed, deduplicated events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from gatekeeper.cli.options import FullHelpGroup
from gatekeeper.cli.render import Outcome, command
from gatekeeper.text import sanitize


@click.group(cls=FullHelpGroup)
def events() -> None:
    """Typed events: GitHub sync into deduplicated events, pending tickets and notifications."""


@events.group("sync", cls=FullHelpGroup)
def sync() -> None:
    """One-shot syncs of an event source."""


def sync_lines(data: dict[str, Any]) -> list[str]:
    rate = data["rate"]
    lines = [f"{sanitize(data['repo'])}: {data['events_new']} new events of "
             f"{data['events_seen']} seen; {data['requests']} requests "
             f"({data['not_modified']} not modified); "
             f"rate remaining {rate['remaining']}"]  # fmt: skip
    last = [data["notification"]] if data["notification"] else []
    lines += [f"notification {n}" for n in data.get("notifications", last)]
    lines += [f"ticket {t} (pending)" for t in data["tickets"]]
    return lines


@sync.command("github")
@click.option("--repo", "github_repo", metavar="OWNER/NAME",
              help="The GitHub repository (default: [conductor] github_repo, "
              "else the origin remote's).")  # fmt: skip
@click.option("--dir", "repo_dir", type=click.Path(file_okay=False, path_type=Path),
              default=".", show_default=True, help="The local repository.")  # fmt: skip
@command
def sync_github_cmd(github_repo: str | None, repo_dir: Path) -> Outcome:
    """Read GitHub's issues, labels, comments, PRs, branches, reviews and checks once.

    Each page is written as it arrives; each answer and the whole sync have a deadline
    (`[conductor] github_answer_timeout_s`, `github_sync_timeout_s`); a second sync of the
    same repository while one runs refuses at once (exit 4)."""
    from gatekeeper.work.events.sync import sync_github

    data = sync_github(repo_dir, github_repo)
    return Outcome(data, lines=sync_lines(data))
