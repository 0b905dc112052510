"""The orchestration commands as functions: each opens the repository's `Work`, makes one
fenced call (or reads), closes it, and returns what the command prints with `--json`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gatekeeper.errors import UsageError
from gatekeeper.work.db import TICKET_STATES
from gatekeeper.work.fence import Work, new_nonce
from gatekeeper.work.model import MAX_BODY_BYTES, Horizon


@contextmanager
def opened(repo_dir: Path) -> Iterator[Work]:
    work = Work.open(repo_dir)
    try:
        yield work
    finally:
        work.close()


def create_goal(repo_dir: Path, objective: str, stop_when: str, horizon: Horizon,
                nonce: str | None) -> dict[str, Any]:  # fmt: skip
    with opened(repo_dir) as work:
        return {"goal": work.create_goal(objective, stop_when, horizon, nonce or new_nonce())
                .to_json()}  # fmt: skip


def _counts(work: Work, goal: str) -> dict[str, int]:
    found: Counter[str] = Counter(t.state for t in work.tickets(goal=goal))
    return {state: found.get(state, 0) for state in TICKET_STATES}


def goal_status(repo_dir: Path, goal: str | None) -> dict[str, Any]:
    """One goal with its tickets, or every goal with its ticket counts."""
    with opened(repo_dir) as work:
        if goal is not None:
            tickets = [t.to_json() for t in work.tickets(goal=goal)]
            return {"goal": work.goal(goal).to_json(), "tickets": tickets,
                    "counts": _counts(work, goal)}  # fmt: skip
        return {"goals": [{**g.to_json(), "counts": _counts(work, g.id)} for g in work.goals()]}


def read_body(path: Path | None) -> bytes | None:
    """A ticket body from a regular file (or `-`: stdin is not accepted; name a file)."""
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BODY_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"cannot read the body file: {exc.strerror}") from None
    if len(data) > MAX_BODY_BYTES:
        raise UsageError(f"the body file is larger than {MAX_BODY_BYTES} bytes")
    return data


def add_ticket(repo_dir: Path, goal: str, title: str, body_file: Path | None,
               nonce: str | None) -> dict[str, Any]:  # fmt: skip
    body = read_body(body_file)
    with opened(repo_dir) as work:
        return {"ticket": work.add_ticket(goal, title, body, nonce or new_nonce()).to_json()}


def show_ticket(repo_dir: Path, ticket: str) -> dict[str, Any]:
    with opened(repo_dir) as work:
        return {"ticket": work.ticket(ticket).to_json()}


def list_tickets(repo_dir: Path, state: str | None, goal: str | None) -> dict[str, Any]:
    with opened(repo_dir) as work:
        return {"tickets": [t.to_json() for t in work.tickets(state, goal)]}


def deliver(repo_dir: Path, ticket: str, nonce: str | None) -> dict[str, Any]:
    """A completed ticket's delivery, started or resumed from where it stopped."""
    from gatekeeper.work.conductor.deliver import deliver_ticket

    with opened(repo_dir) as work:
        return deliver_ticket(work, ticket, nonce or new_nonce())


def resume(repo_dir: Path, ticket: str, nonce: str | None) -> dict[str, Any]:
    """A human resumes a ticket's parked lane; refused while the trusted policy's budget
    for it is still spent (raise it, commit and trust the policy first)."""
    from gatekeeper.work import budget

    with opened(repo_dir) as work:
        if work.ticket(ticket).health == "parked":
            budget.require_left(budget.snapshot(work, ticket), "nothing changed")
        return {"ticket": work.resume_ticket(ticket, nonce or new_nonce()).to_json()}


def lease(repo_dir: Path, ticket: str, expected_version: int, nonce: str,
          ttl_s: int | None) -> dict[str, Any]:  # fmt: skip
    with opened(repo_dir) as work:
        got, shown = work.lease_ticket(ticket, expected_version, nonce, ttl_s)
        return {"lease": got.to_json(), "ticket": shown.to_json()}
