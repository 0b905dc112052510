"""What a run is (thehood's model, DESIGN.md "Orchestration"), as frozen models.

A run has an id, a kind (how it was started: `plan`, `orchestrate`, `consult`,
`reconcile`), a mode (`plan | research | implement | review`), a role mapping (run role ->
a `[roles.<name>]` of the default branch's policy: it can only choose among what policy
defines, never widen it), a state, the step it takes next, at most one open gate, and
artifacts (blobs in the evidence store, indexed in `work.db`) and events. An implement run
owns one goal and one ticket of the orchestration core and goes through its lease,
dispatch, receipt and verify.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from gatekeeper.work.model import Digest

RunKind = Literal["plan", "orchestrate", "consult", "reconcile"]
Mode = Literal["plan", "research", "implement", "review"]
RunState = Literal["created", "planning", "awaiting_approval", "implementing", "verifying",
                   "completed", "failed", "aborted"]  # fmt: skip
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "aborted"})
ArtifactKind = Literal[
    "plan", "diff", "log", "report", "metadata", "status", "agent", "directive", "context",
    "remote_context", "progress", "reconciliation", "critic_trigger", "revision_packet",
    "fanout", "transfer_manifest",
]  # fmt: skip
# The run roles (thehood's); each maps to one `[roles.<name>]` of the policy.
RunRole = Literal["orchestrator", "planner", "researcher", "implementer", "qa", "verifier",
                  "critic"]  # fmt: skip
RUN_ROLES: tuple[str, ...] = ("orchestrator", "planner", "researcher", "implementer", "qa",
                              "verifier", "critic")  # fmt: skip
GUEST_ROLES: tuple[str, ...] = ("orchestrator", "planner", "researcher", "qa", "critic")
SUMMON_ROLES: tuple[str, ...] = (*GUEST_ROLES, "verifier")
SummonKind = Literal["review", "qa", "critique", "research", "plan"]
Approval = Literal["approve", "reject", "revise", "none"]
GateKind = Literal["transfer", "plan"]

RUN_ID_RE = re.compile(r"^r-[0-9a-f]{12}$")
ARTIFACT_REF_RE = re.compile(r"^[a-z_]{2,20}-[0-9]{1,6}$")
FANOUT_HARD_CAP = 8  # policy can lower it, never raise it
MAX_GOAL_CHARS = 4096
MAX_CONSTRAINTS = 20
MAX_CONSTRAINT_CHARS = 500
MAX_MESSAGE_CHARS = 4096
SUMMARY_CHARS = 600  # a provider answer's summary inline; the whole answer is the artifact
MAX_ARTIFACT_BYTES = 1 << 20


class _Frozen(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class Gate(_Frozen):
    """The one open approval gate of a run. `transfer`: the manifest a provider step needs
    (approved by a human with `oms transfer approve` or `oms run continue --approve` at a
    terminal, or an autopilot rule); `plan`: a plan to approve before implementing."""

    kind: GateKind
    step: str  # the step that resumes when the gate is passed
    role: str | None = None  # the run role the gate is for
    policy_role: str | None = None  # its `[roles.<name>]`
    transfer: Digest | None = None  # kind == transfer: the manifest, previewed by this run
    artifact: str | None = None  # kind == plan: the plan's artifact ref
    reason: str


class Artifact(_Frozen):
    ref: str  # "<kind>-<n>", unique in its run
    kind: ArtifactKind
    blob: Digest
    bytes: int
    media_type: str
    role: str | None
    summary: str
    seq: int  # the work.run.* entry that attached it
    created: str


class RunEvent(_Frozen):
    n: int
    kind: str
    data: dict[str, Any]
    seq: int
    created: str


class Run(_Frozen):
    id: str
    kind: RunKind
    mode: Mode
    version: int
    state: RunState
    step: str
    objective: str
    constraints: tuple[str, ...]
    roles: dict[str, str]  # run role -> [roles.<name>]
    gate: Gate | None
    stop_reason: str | None
    goal: str | None
    ticket: str | None
    parent: str | None
    cycles: int
    created: str
    updated: str

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL
