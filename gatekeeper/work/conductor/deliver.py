"""Delivery of a READY_FOR_HUMAN ticket: non-force push and a draft PR over GitHub's REST
API, the body secret-scanned first, a fresh read-back (H2).

STUB (groundwork): the signature is fixed; the body is the delivery helper's.
"""

from __future__ import annotations

from typing import Any

from gatekeeper.work.fence import Work


def deliver_ticket(work: Work, ticket: str, nonce: str) -> dict[str, Any]:
    """Push `<branch_prefix><ticket>` at the ticket's verified commit to `[conductor] remote`
    (never forced), open (or find) its draft PR, read both back; `{"delivery": {...}}`.
    Refuses (exit 3) a ticket that is not completed with a READY_FOR_HUMAN verdict."""
    raise NotImplementedError
