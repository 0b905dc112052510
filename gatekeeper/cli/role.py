"""`oms role list|check`: the roster from the default branch's policy; display only.
`oms role assign`: which policy role plays a run role, within what the policy defines."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli.options import REPO_OPTION, FullHelpGroup
from gatekeeper.cli.render import Data, Outcome, command
from gatekeeper.errors import EXIT_UNAVAILABLE, UsageError
from gatekeeper.text import sanitize
from gatekeeper.work.roles import status, statuses
from gatekeeper.work.runs.board import assign_roles

UNATTENDED = click.option(
    "--unattended", is_flag=True, help="Judge eligibility for a run with nobody at a terminal."
)


@click.group(cls=FullHelpGroup)
def role() -> None:
    """Roles from policy: provider:model, eligibility, authority; assign one to a run role."""


NO_ROLES = (
    "no roles: the default branch's oms.toml defines none; add a [roles.<name>] "
    "section to it and commit it there (the gates need no role)"
)


@role.command("list")
@REPO_OPTION
@UNATTENDED
@command
def role_list(repo: Path, unattended: bool) -> Outcome:
    """Every role of the default branch's policy, sorted by name, with its eligibility."""
    roles = [s.to_json() for s in statuses(repo, unattended=unattended)]
    lines = [line for r in roles for line in role_lines(r)] or [NO_ROLES]
    return Outcome({"roles": roles}, lines=lines)


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


@role.command("assign")
@click.argument("pairs", nargs=-1, required=True, metavar="RUN_ROLE=ROLE...")
@REPO_OPTION
@command
def role_assign(pairs: tuple[str, ...], repo: Path) -> Outcome:
    """Persist which policy role (a name or its provider:model) plays each run role named;
    merged with earlier assignments, recorded as evidence. It never widens the policy."""
    given: dict[str, str] = {}
    for pair in pairs:
        run_role, sep, value = pair.partition("=")
        if not sep or not run_role or not value:
            raise UsageError(f"expected RUN_ROLE=ROLE, not {pair[:80]!r}")
        if run_role in given:
            raise UsageError(f"{run_role[:40]!r} is assigned twice")
        given[run_role] = value
    data, code = assign_roles(repo, given)
    lines = [sanitize(f"{r}: {n}") for r, n in data["roles"].items()]
    return Outcome(data, code=code, lines=[*lines, sanitize(f"note: {data['note']}")])


def role_lines(r: Data) -> list[str]:
    mark = "eligible" if r["eligible"] else "NOT ELIGIBLE"
    head = (f"{r['name']}: {r['provider']}:{r['model']} ({r['transport']}, {r['authority']}, "
            f"auth {r['auth']}, billing {r['billing']}) {mark}")  # fmt: skip
    return [sanitize(x) for x in [head, *(f"  - {why}" for why in r["reasons"])]]
