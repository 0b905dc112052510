"""`oms role list|check`: the roster from the default branch's policy; display only."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import Data, Outcome, command
from gatekeeper.errors import EXIT_UNAVAILABLE
from gatekeeper.text import sanitize
from gatekeeper.work.roles import status, statuses

UNATTENDED = click.option(
    "--unattended", is_flag=True, help="Judge eligibility for a run with nobody at a terminal."
)


@click.group()
def role() -> None:
    """Roles from policy: provider:model, eligibility and authority (display only)."""


@role.command("list")
@REPO_OPTION
@UNATTENDED
@command
def role_list(repo: Path, unattended: bool) -> Outcome:
    """Every role of the default branch's policy, sorted by name, with its eligibility."""
    roles = [s.to_json() for s in statuses(repo, unattended=unattended)]
    return Outcome({"roles": roles}, lines=[line for r in roles for line in role_lines(r)])


@role.command("check")
@click.argument("name")
@REPO_OPTION
@UNATTENDED
@command
def role_check(name: str, repo: Path, unattended: bool) -> Outcome:
    """One role: exit 0 when it may run, 4 with every reason when it may not."""
    shown = status(repo, name, unattended=unattended).to_json()
    if shown["eligible"]:
        return Outcome({"role": shown}, lines=role_lines(shown))
    message = f"role {name} cannot run: {'; '.join(shown['reasons'])}"
    data = {"role": shown, "error": {"kind": "unavailable", "message": sanitize(message)}}
    return Outcome(data, code=EXIT_UNAVAILABLE, lines=role_lines(shown))


def role_lines(r: Data) -> list[str]:
    mark = "eligible" if r["eligible"] else "NOT ELIGIBLE"
    head = (f"{r['name']}: {r['provider']}:{r['model']} ({r['transport']}, {r['authority']}, "
            f"auth {r['auth']}, billing {r['billing']}) {mark}")  # fmt: skip
    return [sanitize(x) for x in [head, *(f"  - {why}" for why in r["reasons"])]]
