"""Slack: ONE request-only outbox row per confirmed delivery, and nothing more.

oms has no Slack transport and holds no Slack credential: the row names opaque ids only
(the ticket, the PR number, the commit) for something outside oms to pick up. Written in
the delivery's own fenced transaction, so it exists exactly when the delivery is confirmed.
"""

from __future__ import annotations

from typing import Any

from gatekeeper.work.events import outbox

KIND = "slack.request"


def delivery_key(ticket: str, commit: str) -> str:
    return f"slack:delivered:{ticket}:{commit}"


def request_delivered(tx: Any, ticket: str, pr_number: int, commit: str) -> bool:
    """The request row for a confirmed delivery; False when it was written before."""
    body = {"what": "delivered", "ticket": ticket, "pr": pr_number, "commit": commit}
    return outbox.request(tx, delivery_key(ticket, commit), KIND, body)
