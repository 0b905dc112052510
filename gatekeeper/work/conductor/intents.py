"""What crosses the conductor bridge: the seven tools' strict inputs, the advisor's answer
schema, and the dispatch intent document (canonical JSON, digested before anything runs).

Every input model forbids unknown fields and bounds every string; freeform text (an
objective, a task) is only ever a JSON field, never argv, a path or a branch name.
"""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any, Literal

import rfc8785
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from gatekeeper.errors import Blocked
from gatekeeper.work.model import MAX_OBJECTIVE_CHARS

# No ':' in a conductor's nonce: oms derives its sub-steps' nonces as `<nonce>:<step>`, so a
# conductor can never name (and so burn or replay) one of them.
Nonce = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{7,95}$")]
GoalId = Annotated[str, StringConstraints(pattern=r"^g-[0-9a-f]{12}$")]
TicketId = Annotated[str, StringConstraints(pattern=r"^t-[0-9a-f]{12}$")]
DispatchId = Annotated[str, StringConstraints(pattern=r"^d-[0-9a-f]{12}$")]
IntentId = Annotated[str, StringConstraints(pattern=r"^i-[0-9a-f]{12}$")]
WorkerId = Annotated[str, StringConstraints(pattern=r"^w-[0-9a-f]{12}$")]
BatchId = Annotated[str, StringConstraints(pattern=r"^n-[0-9a-f]{12}$")]
Digest = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
RoleName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,63}$")]
Objective = Annotated[str, StringConstraints(min_length=1, max_length=MAX_OBJECTIVE_CHARS)]
Task = Annotated[str, StringConstraints(min_length=1, max_length=8192)]
MAX_TEAM = 8
MAX_REASONS = 5
MAX_REASON_CHARS = 200


class _Strict(BaseModel):
    model_config = ConfigDict(
        defer_build=True, extra="forbid", frozen=True, str_strip_whitespace=False
    )


class ProposeGoal(_Strict):
    objective: Objective
    stop_when: Objective
    horizon: Literal["until-empty", "12h", "24h"]
    nonce: Nonce
    notification: BatchId | None = None  # a pending batch the conductor read


class PrepareDispatch(_Strict):
    goal: GoalId
    ticket: TicketId
    role: RoleName
    task: Task
    nonce: Nonce
    notification: BatchId | None = None  # a pending batch the conductor read
    # An external executor sends repo context out: it needs an approved transfer manifest.
    transfer: Digest | None = None
    # The goal the ticket is in now (a GitHub ticket in the standing goal): it is attached
    # to `goal` first, fenced on its version, before it is leased.
    attach_from: GoalId | None = None


class AdviseDispatch(_Strict):
    intent: IntentId
    digest: Digest
    nonce: Nonce
    notification: BatchId | None = None  # a pending batch the conductor read
    transfer: Digest | None = None  # for an external advisor, as for any external role


class ProposeDispatch(_Strict):
    intent: IntentId
    digest: Digest
    nonce: Nonce
    notification: BatchId | None = None  # a pending batch the conductor read


class ManageWorker(_Strict):
    worker: WorkerId
    action: Literal["observe", "park", "resume", "stop"]
    nonce: Nonce


class StartTeam(_Strict):
    dispatches: Annotated[list[DispatchId], Field(min_length=1, max_length=MAX_TEAM)]
    nonce: Nonce


class ProcessResult(_Strict):
    ticket: TicketId
    nonce: Nonce


# -- the advisor's answer -------------------------------------------------------------------

Verdict = Literal["approve", "revise", "reject"]
Reason = Annotated[str, StringConstraints(min_length=1, max_length=MAX_REASON_CHARS)]


class Advice(_Strict):
    verdict: Verdict
    reasons: Annotated[list[Reason], Field(max_length=MAX_REASONS)]


ADVICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["verdict", "reasons"],
    "properties": {
        "verdict": {"type": "string", "enum": ["approve", "revise", "reject"]},
        "reasons": {"type": "array", "maxItems": MAX_REASONS,
                    "items": {"type": "string", "minLength": 1,
                              "maxLength": MAX_REASON_CHARS}},
    },
}  # fmt: skip


class AdviceRefused(Blocked):
    """The advisor's answer is not the schema's: no verdict is recorded."""


def parse_advice(output: str) -> Advice:
    """The advisor's final answer, exactly the schema's (one JSON object, nothing else)."""
    text = output.strip()
    try:
        return Advice.model_validate(json.loads(text))
    except (ValueError, ValidationError):
        raise AdviceRefused("the advisor's answer is not the advice schema's JSON "
                            "({verdict, reasons}); nothing recorded") from None  # fmt: skip


# -- the intent document --------------------------------------------------------------------


def canonical(doc: dict[str, Any]) -> bytes:
    return bytes(rfc8785.dumps(doc))


def digest_of(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def advice_document(intent: str, digest: str, body: dict[str, Any]) -> bytes:
    """What the advisor reads (stdin / $OMS_TASK_FILE): the exact intent and its digest."""
    return canonical({"v": 1, "kind": "advise-dispatch", "intent": intent, "digest": digest,
                      "document": body,
                      "answer": "one JSON object {verdict: approve|revise|reject, "
                                "reasons: [at most 5 short strings]}"})  # fmt: skip
