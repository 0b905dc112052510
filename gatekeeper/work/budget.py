"""A ticket's and its goal's model budgets (`[conductor.budget]`) and what they have spent.

The egress broker of a worker's run enforces them (`gatekeeper.agent.budget`); it is given
them here, as numbers: the trusted policy's limits, and what every earlier run of the
ticket (each attempt) and of its goal's tickets spent, summed from the runs' recorded
facts (`RunFacts.spend`, written by `record_run`). A dispatch records the same numbers
as its budget snapshot, and is refused when a budget is already spent: nothing retries
into a spent budget.
"""

from __future__ import annotations

from gatekeeper.agent.budget import Bound, Spend, budget_reason
from gatekeeper.errors import Blocked
from gatekeeper.work.fence import Work
from gatekeeper.work.model import BudgetSnapshot, Spent


class BudgetSpent(Blocked):
    """A ticket's or its goal's `[conductor.budget]` is spent: no model request may go."""


# What the runs of one ticket, or of every ticket of one goal, spent (fixed statements).
_SPENT = ("SELECT COALESCE(SUM(json_extract(d.run, '$.spend.requests')), 0) AS requests, "
          "COALESCE(SUM(json_extract(d.run, '$.spend.tokens')), 0) AS tokens "
          "FROM dispatches d JOIN tickets t ON t.id = d.ticket WHERE ")  # fmt: skip
_BY = {"ticket": _SPENT + "d.ticket = ?", "goal": _SPENT + "t.goal = ?"}


def _spent(work: Work, scope: str, ident: str) -> Spent:
    row = work.db.read(_BY[scope], ident)[0]
    return Spent(requests=int(row["requests"]), tokens=int(row["tokens"]))


def snapshot(work: Work, ticket: str) -> BudgetSnapshot | None:
    """The budgets and what the ticket and its goal spent so far; None with no budget."""
    pol = work.loaded.policy.conductor.budget
    if pol == type(pol)():
        return None
    goal = work.ticket(ticket).goal
    return BudgetSnapshot(
        ticket_requests=pol.ticket_requests, ticket_tokens=pol.ticket_tokens,
        goal_requests=pol.goal_requests, goal_tokens=pol.goal_tokens,
        ticket_spent=_spent(work, "ticket", ticket),
        goal_spent=_spent(work, "goal", goal),
    )  # fmt: skip


def bounds(snap: BudgetSnapshot | None) -> tuple[Bound, ...]:
    """The broker's bounds of a snapshot (a scope without a limit is no bound)."""
    if snap is None:
        return ()
    ticket = Bound("ticket", snap.ticket_requests, snap.ticket_tokens, _spend(snap.ticket_spent))
    goal = Bound("goal", snap.goal_requests, snap.goal_tokens, _spend(snap.goal_spent))
    return tuple(b for b in (ticket, goal) if b.requests is not None or b.tokens is not None)


def _spend(spent: Spent) -> Spend:
    return Spend(spent.requests, spent.tokens)


def require_left(snap: BudgetSnapshot | None, then: str = "nothing dispatched") -> None:
    """BudgetSpent when any bound of `snap` is already reached (`then`: what did not happen)."""
    for bound in bounds(snap):
        if (why := bound.reached(Spend())) is not None:
            raise BudgetSpent(f"{budget_reason(bound.scope, *why)}; {then}")
