"""What the orchestration state holds, as frozen models: goals, tickets, leases, dispatches.

These are what `oms goal|ticket|dispatch|worker|verify --json` print (`to_json`). A lease's
token is shown once, to whoever took the lease; the database keeps only its SHA-256, and
every other view names the lease by that digest.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TicketState = Literal["pending", "leased", "running", "verifying", "completed", "retryable",
                      "parked", "blocked"]  # fmt: skip
Activity = Literal["idle", "working", "blocked", "done"]
Health = Literal["healthy", "parked", "stalled", "stopped"]
Horizon = Literal["until-empty", "12h", "24h"]
DispatchState = Literal["started", "ran", "received", "ended", "abandoned"]
VerificationState = Literal["started", "finished", "abandoned"]

NONCE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{7,127}$")
GOAL_ID_RE = re.compile(r"^g-[0-9a-f]{12}$")
TICKET_ID_RE = re.compile(r"^t-[0-9a-f]{12}$")
DISPATCH_ID_RE = re.compile(r"^d-[0-9a-f]{12}$")
VERIFY_ID_RE = re.compile(r"^v-[0-9a-f]{12}$")
LEASE_TOKEN_RE = re.compile(r"^lease-[0-9a-f]{48}$")

MAX_OBJECTIVE_CHARS = 4096
MAX_TITLE_CHARS = 200
MAX_BODY_BYTES = 256 << 10
Digest = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
Sha = Annotated[str, Field(pattern=r"^[0-9a-f]{40}([0-9a-f]{24})?$")]


class _Frozen(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class Goal(_Frozen):
    id: str
    version: int
    objective: str
    stop_when: str
    horizon: Horizon
    state: Literal["open", "done", "abandoned"]
    created: str
    updated: str


class Body(_Frozen):
    """A ticket's body: an immutable evidence blob, named by digest, never argv or shell."""

    blob: Digest | None
    bytes: int


class LeaseView(_Frozen):
    lease: Digest  # sha256 of the token
    state: Literal["active", "released", "expired"]
    expires: str
    expired: bool  # an active lease past its expiry: a new lease may take the ticket


class DispatchView(_Frozen):
    id: str
    attempt: int
    state: DispatchState
    role: str
    run_id: str
    reason: str | None


class VerificationView(_Frozen):
    id: str
    state: VerificationState
    decision: str | None


class LastTransition(_Frozen):
    kind: str
    seq: int
    time: str


class Ticket(_Frozen):
    id: str
    goal: str
    version: int
    state: TicketState
    activity: Activity
    health: Health
    title: str
    body: Body
    attempts: int
    max_attempts: int
    human_hold: bool
    reason: str | None
    lease: LeaseView | None
    dispatch: DispatchView | None
    verification: VerificationView | None
    last: LastTransition | None
    created: str
    updated: str


class Lease(_Frozen):
    """`oms ticket lease`: the token (shown only here) and when it expires."""

    token: str
    expires: str


class Spent(_Frozen):
    """Model requests and provider-reported tokens, as a run's egress broker counted them."""

    requests: int = Field(default=0, ge=0)
    tokens: int = Field(default=0, ge=0)


class BudgetSnapshot(_Frozen):
    """The seed's "budget snapshot" of a dispatch: `[conductor.budget]` as the trusted policy
    set it when the dispatch was made (None: no bound), and what the ticket's earlier
    attempts and its goal's tickets had spent by then."""

    ticket_requests: int | None
    ticket_tokens: int | None
    goal_requests: int | None
    goal_tokens: int | None
    ticket_spent: Spent
    goal_spent: Spent


class DispatchPlan(_Frozen):
    """What the caller of `begin_dispatch` decided: the role, where and on what it runs.
    The fence adds what only it may fill in: goal, ticket, lease, attempt, nonce."""

    role: str
    provider: str
    engine: str
    model: str
    authority: Literal["read-only", "worktree-write"]
    base: Sha
    run_id: str
    workspace: str | None
    capabilities: tuple[str, ...]
    acceptance: tuple[str, ...]
    transfer: Digest | None = None
    budget: BudgetSnapshot | None = None  # when the policy sets `[conductor.budget]`

    def to_json(self) -> dict[str, Any]:
        doc = super().to_json()
        if self.budget is None:  # an envelope without one keeps the shape (and digest) it had
            del doc["budget"]
        return doc


class DispatchEnvelope(DispatchPlan):
    """The persisted dispatch: validated and stored before the adapter delivers it."""

    v: Literal[1] = 1
    id: str
    goal: str
    ticket: str
    lease: Digest
    attempt: int
    nonce: str


class RunFacts(_Frozen):
    """What the adapter's `oms agent run` came back with (`record_run`)."""

    exit_code: int | None
    signal: int | None
    timed_out: bool
    candidate: Sha | None
    candidate_ref: str | None
    workspace: str
    evidence_seq: int
    output_sha256: Digest | None = None
    usage: dict[str, int] | None = None
    spend: Spent | None = None  # an `api` run's, as its broker counted (the budget's)

    def to_json(self) -> dict[str, Any]:
        doc = super().to_json()
        if self.spend is None:
            del doc["spend"]
        return doc


class Dispatch(_Frozen):
    id: str
    ticket: str
    attempt: int
    version: int
    state: DispatchState
    run_id: str
    envelope: DispatchEnvelope
    envelope_digest: Digest
    run: RunFacts | None
    reason: str | None


class Receipt(_Frozen):
    """`oms worker result`: the typed receipt that moves a ticket to `verifying`."""

    id: str
    dispatch: str
    ticket: str
    commit: Sha
    exit_code: int | None
    created: str


class Verification(_Frozen):
    """A verify in progress: what `begin_verify` bound it to."""

    id: str
    ticket: str
    ticket_version: int
    dispatch: str
    receipt: str
    attempt: int
    lease: Digest
    commit: Sha
    base: Sha
    role: str
    engine: str
    run_id: str


class VerifyOutcome(_Frozen):
    """What `finish_verify` is given: the gate's decision and the grade's, and the result.
    The fence derives the ticket's next state from these; nobody names it directly."""

    decision: Literal["READY_FOR_HUMAN", "FAILED", "BLOCKED"]
    result_seq: int
    grade: Literal["pass", "fail", "uncertain"] | None  # None: no grade was obtained
    grade_problem: str | None = None  # why there is no grade (parks the ticket)
    grade_seq: int | None = None
    reflection_blob: Digest | None = None
