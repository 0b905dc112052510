"""`oms ticket add|show|list|lease|resume|deliver`: tickets, their immutable bodies, fenced
leases, a parked lane resumed by a human, and the delivery of a verified one."""

from __future__ import annotations

from pathlib import Path

import click

from gatekeeper.cli.goal import NONCE_OPTION, ticket_line
from gatekeeper.cli.options import REPO_OPTION, FullHelpGroup
from gatekeeper.cli.render import Data, Outcome, command
from gatekeeper.text import sanitize
from gatekeeper.work import api
from gatekeeper.work.db import TICKET_STATES


@click.group(cls=FullHelpGroup)
def ticket() -> None:
    """Tickets: work items of a goal, leased, dispatched, verified, held for a human."""


@ticket.command("add")
@REPO_OPTION
@click.option("--goal", "goal_id", required=True, help="The goal it serves.")
@click.option("--title", required=True, help="One line.")
@click.option("--body-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The body, stored as an immutable blob (never argv or shell text).")  # fmt: skip
@NONCE_OPTION
@command
def ticket_add(repo: Path, goal_id: str, title: str, body_file: Path | None,
               nonce: str | None) -> Outcome:  # fmt: skip
    """Add a pending ticket to a goal."""
    data = api.add_ticket(repo, goal_id, title, body_file, nonce)
    return Outcome(data, lines=[ticket_line(data["ticket"])])


@ticket.command("show")
@REPO_OPTION
@click.argument("ticket_id")
@command
def ticket_show(repo: Path, ticket_id: str) -> Outcome:
    """A ticket: its state, lease, last dispatch and verify, and its last transition."""
    data = api.show_ticket(repo, ticket_id)
    return Outcome(data, lines=show_lines(data["ticket"]))


@ticket.command("list")
@REPO_OPTION
@click.option("--state", type=click.Choice(TICKET_STATES), default=None)
@click.option("--goal", "goal_id", default=None)
@command
def ticket_list(repo: Path, state: str | None, goal_id: str | None) -> Outcome:
    """Tickets, oldest first, optionally of one state or goal."""
    data = api.list_tickets(repo, state, goal_id)
    return Outcome(data, lines=[ticket_line(t) for t in data["tickets"]] or ["no tickets"])


@ticket.command("lease")
@REPO_OPTION
@click.argument("ticket_id")
@click.option("--expected-version", "expected_version", type=int, required=True,
              help="The ticket version you read; any other refuses (exit 3).")  # fmt: skip
@click.option("--nonce", required=True, help="A fresh nonce; a replayed one refuses (exit 3).")
@click.option("--ttl-s", "ttl_s", type=click.IntRange(1, 86_400), default=None,
              help="Lease length (default: [work] lease_ttl_s).")  # fmt: skip
@command
def ticket_lease(repo: Path, ticket_id: str, expected_version: int, nonce: str,
                 ttl_s: int | None) -> Outcome:  # fmt: skip
    """Take the ticket's lease: its token fences the dispatch, the receipt and the verify."""
    data = api.lease(repo, ticket_id, expected_version, nonce, ttl_s)
    lease = data["lease"]
    return Outcome(data, lines=[ticket_line(data["ticket"]),
                                f"lease {lease['token']} until {lease['expires']}"])  # fmt: skip


@ticket.command("resume")
@REPO_OPTION
@click.argument("ticket_id")
@NONCE_OPTION
@command
def ticket_resume(repo: Path, ticket_id: str, nonce: str | None) -> Outcome:
    """Resume a lane parked for budget or login, once you dealt with its reason."""
    data = api.resume(repo, ticket_id, nonce)
    return Outcome(data, lines=[ticket_line(data["ticket"]), "resumed: the conductor may "
                                "dispatch it again"])  # fmt: skip


@ticket.command("deliver")
@REPO_OPTION
@click.argument("ticket_id")
@NONCE_OPTION
@command
def ticket_deliver(repo: Path, ticket_id: str, nonce: str | None) -> Outcome:
    """Deliver a READY ticket as a draft PR, or resume its delivery from where it stopped."""
    d = api.deliver(repo, ticket_id, nonce)["delivery"]
    pr = f"draft PR #{d['pr']} {sanitize(d['pr_url'] or '')}".rstrip() if d["pr"] else "no PR"
    return Outcome({"delivery": d},
                   lines=[f"delivery {d['ticket']} {d['state']} ({d['action']}): "
                          f"{sanitize(d['branch'])} at {d['commit']}, {pr}"])  # fmt: skip


def show_lines(t: Data) -> list[str]:
    lines = [ticket_line(t), f"goal {t['goal']}, activity {t['activity']}, health {t['health']}"]
    if t["reason"]:
        lines.append(f"reason: {sanitize(t['reason'])}")
    if t["lease"]:
        lease = t["lease"]
        late = " (expired: a new lease recovers the ticket)" if lease["expired"] else ""
        lines.append(
            f"lease {lease['lease'][:19]}… {lease['state']} until {lease['expires']}{late}"
        )
    if t["dispatch"]:
        d = t["dispatch"]
        why = f": {sanitize(d['reason'])}" if d["reason"] else ""
        lines.append(f"dispatch {d['id']} attempt {d['attempt']} {d['state']} "
                     f"(role {d['role']}, run {d['run_id']}){why}")  # fmt: skip
    if t["verification"]:
        v = t["verification"]
        lines.append(f"verify {v['id']} {v['state']} {v['decision'] or ''}".rstrip())
    if t["last"]:
        last = t["last"]
        lines.append(f"last: {last['kind']} (evidence seq {last['seq']}) at {last['time']}")
    return lines
