"""Worker panes: one per accepted dispatch, on the conductor's private tmux server (H4).

STUB (groundwork): the signatures are fixed; the bodies are the panes helper's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from gatekeeper.work.fence import Work

Action = Literal["observe", "park", "resume", "stop"]


@dataclass(frozen=True)
class WorkerView:
    id: str  # w-<12 hex>
    dispatch: str
    ticket: str
    team: str | None
    state: str  # db.WORKER_STATES
    version: int
    pane: str | None
    reason: str | None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "dispatch": self.dispatch, "ticket": self.ticket,
                "team": self.team, "state": self.state, "version": self.version,
                "reason": self.reason}  # fmt: skip


def start_worker(work: Work, dispatch_id: str, nonce: str, team: str | None = None) -> WorkerView:
    """Start the pane of an accepted (`started`) dispatch: the record first (fenced), then
    the pane running `oms conductor worker` outside, which runs the executor under `oms agent
    run`. A dispatch that has a worker already is refused (never a duplicate)."""
    raise NotImplementedError


def control(work: Work, worker_id: str, action: Action, nonce: str) -> WorkerView:
    """observe (re-read the pane's liveness, record a change), park, resume, stop."""
    raise NotImplementedError


def get(work: Work, worker_id: str) -> WorkerView:
    raise NotImplementedError


def listed(work: Work, ticket: str | None = None) -> list[WorkerView]:
    raise NotImplementedError
