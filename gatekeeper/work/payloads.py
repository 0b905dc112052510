"""Evidence of orchestration: one `work.*` entry per transition, written by the fence.

Every entry names the object it changed, the state it left and the state it entered, the
version that object has now, the nonce that fenced it and, where a lease fenced it, the
lease's digest (never its token). `detail` carries small typed facts of the transition
(the attempt, the dispatch envelope's digest, the commit, the verdict's evidence seq).
The entry's subject names the ticket (or goal), so `oms evidence show` says what it was.

From payload version 2 (`REPLAYABLE`) an entry also carries what replaying it needs: the
blob `changes` (a `ChangeSet`: every row the transition set, as it was at the commit) and
`after`, the seq of the last committed `work.*` entry before it (None: the first). Committed
entries form a chain through `after`: an entry a later one skips never committed, and the
tail is confirmed by its `transitions` row. Version-1 entries are legacy: no replay.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, ClassVar, Literal

import rfc8785
from pydantic import BaseModel, ConfigDict, Field

from evidence import Payload

Small = str | int | bool | None
Cell = str | int | float | None  # one SQLite value of work.db
Digest = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
REPLAYABLE = 2
# A `seq` column set in a transition to the seq of the entry recording it, which is not known
# until that entry is appended: the change set holds PENDING, the row the real seq.
PENDING = -1


class WorkRecord(Payload):
    object: Literal["goal", "ticket", "dispatch", "verification", "run", "conductor", "intent",
                    "worker", "team", "waiter", "batch", "events", "delivery",
                    "watchdog"]  # fmt: skip
    id: str
    ticket: str | None = None
    goal: str | None = None
    from_state: str | None
    to_state: str
    version: int
    nonce: str
    lease: Digest | None = None
    detail: dict[str, Small] = Field(default_factory=dict)
    after: Annotated[int, Field(ge=0)] | None = None  # v2: the last committed work entry
    changes: Digest | None = None  # v2: the ChangeSet blob

    @property
    def replayable(self) -> bool:
        return self.v >= REPLAYABLE and self.changes is not None


class RowSet(BaseModel):
    """One row as a transition left it (`row` None: deleted)."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    table: Annotated[str, Field(pattern=r"^[a-z_]{1,64}$")]
    key: tuple[Cell, ...]
    row: dict[str, Cell] | None


class ChangeSet(BaseModel):
    """The blob a v2 entry names: what its transition set, in (table, key) order."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    v: int = 1
    rows: tuple[RowSet, ...]

    def encoded(self) -> bytes:
        return bytes(rfc8785.dumps(self.model_dump(mode="json")))


class GoalCreated(WorkRecord):
    KIND: ClassVar[str] = "work.goal.create"


class TicketAdded(WorkRecord):
    KIND: ClassVar[str] = "work.ticket.add"


class TicketMoved(WorkRecord):
    """A ticket attached to another open goal (`detail.from_goal`): the conductor's
    `prepare_dispatch` with `attach_from`, fenced on the ticket's version and goal."""

    KIND: ClassVar[str] = "work.ticket.move"


class TicketResumed(WorkRecord):
    """A human resumed a ticket whose lane was parked by health (`detail.parked`: why)."""

    KIND: ClassVar[str] = "work.ticket.resume"


class TicketLeased(WorkRecord):
    KIND: ClassVar[str] = "work.ticket.lease"


class DispatchStarted(WorkRecord):
    KIND: ClassVar[str] = "work.dispatch.start"


class DispatchRan(WorkRecord):
    KIND: ClassVar[str] = "work.dispatch.run"


class DispatchEnded(WorkRecord):
    """A dispatch that ended without a receipt (no commit, the worker failed)."""

    KIND: ClassVar[str] = "work.dispatch.end"


class ReceiptFiled(WorkRecord):
    KIND: ClassVar[str] = "work.receipt"


class VerifyStarted(WorkRecord):
    KIND: ClassVar[str] = "work.verify.start"


class VerifyFinished(WorkRecord):
    KIND: ClassVar[str] = "work.verify.finish"


class RunCreated(WorkRecord):
    """A run (`gatekeeper.work.runs`) was created; `detail` names its kind, mode and roles."""

    KIND: ClassVar[str] = "work.run.create"


class RunStepped(WorkRecord):
    """One step of a run: its state, step, gate, and the artifacts and events it added (their
    blobs are the entry's blobs)."""

    KIND: ClassVar[str] = "work.run.step"


# -- the conductor (gatekeeper.work.conductor) and events (gatekeeper.work.events) ------------


class ConductorChanged(WorkRecord):
    """The conductor session was created, resumed, or changed state (idle, dead, stalled)."""

    KIND: ClassVar[str] = "work.conductor"


class IntentRecorded(WorkRecord):
    """A dispatch intent was prepared, advised, accepted or refused (conductor bridge);
    `detail` names its digest, and for advice the advisor's verdict."""

    KIND: ClassVar[str] = "work.intent"


class WorkerChanged(WorkRecord):
    """A worker pane started, was observed dead, parked, resumed, stopped or exited."""

    KIND: ClassVar[str] = "work.worker"


class TeamStarted(WorkRecord):
    """A team: a group of accepted dispatches, each started in its own pane."""

    KIND: ClassVar[str] = "work.team"


class WaiterChanged(WorkRecord):
    """A conductor waiter generation was armed, notified, failed or superseded."""

    KIND: ClassVar[str] = "work.waiter"


class EventsProjected(WorkRecord):
    """One projected batch of typed events (GitHub sync or provider hooks): `detail` counts
    them; the batch's canonical JSON is the entry's blob."""

    KIND: ClassVar[str] = "work.events"


class DeliveryRecorded(WorkRecord):
    """A READY_FOR_HUMAN ticket's branch pushed, its draft PR opened, the read-back."""

    KIND: ClassVar[str] = "work.delivery"


class WatchdogPassed(WorkRecord):
    """One `oms reconcile watchdog` pass that recovered or marked something."""

    KIND: ClassVar[str] = "work.watchdog"


KINDS: tuple[type[WorkRecord], ...] = (GoalCreated, TicketAdded, TicketMoved, TicketLeased,
                                       TicketResumed, DispatchStarted,
                                       DispatchRan, DispatchEnded, ReceiptFiled, VerifyStarted,
                                       VerifyFinished, RunCreated, RunStepped, ConductorChanged,
                                       IntentRecorded, WorkerChanged, TeamStarted, WaiterChanged,
                                       EventsProjected, DeliveryRecorded,
                                       WatchdogPassed)  # fmt: skip
WORK_KINDS = frozenset(k.KIND for k in KINDS)
KINDS_BY_KIND: dict[str, type[WorkRecord]] = {k.KIND: k for k in KINDS}


def subject(name: str) -> list[dict[str, Any]]:
    """`oms-ticket:<id>` / `oms-goal:<id>` with the SHA-256 of the id, like an agent run."""
    return [{"name": name, "digest": {"sha256": hashlib.sha256(name.encode()).hexdigest()}}]
