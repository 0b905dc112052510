"""The conductor's waiter: `oms conductor wait-event`, generations CAS-bound to the conductor
session and its process (H5).

STUB (groundwork): the signatures are fixed; the bodies are the events-and-recovery helper's.
"""

from __future__ import annotations

from typing import Any

from gatekeeper.work.fence import Work


def consume(work: Work, conductor: str, batch: str, nonce: str) -> dict[str, Any]:
    """The conductor read `batch` (a pending notification): it becomes `consumed`, once."""
    raise NotImplementedError
