"""One read-only provider call of a run: the role's CLI under `oms agent run`, read-only.

The role comes from the run's mapping (or a one-call override) and must be eligible for an
unattended run; whatever its policy authority, the call is made read-only (the workspace
bound read-only, never collected: narrowing, never widening). The brief reaches the CLI as
a canonical JSON document on stdin and as `$OMS_TASK_FILE`, never argv. Its answer (stdout,
redacted by the receipt, bounded) becomes the step's markdown artifact, with a bounded
summary inline. An external
role first passes the transfer gate (`gates.transfer_gate`): `ask` returns the `Gate` to
stop at instead of calling anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import rfc8785

from gatekeeper.agent.workspace import new_run_id as new_agent_run_id
from gatekeeper.text import sanitize
from gatekeeper.work import roles
from gatekeeper.work.fence import Work
from gatekeeper.work.providers import adapter
from gatekeeper.work.providers.base import ProviderReceipt, ProviderRequest, Role
from gatekeeper.work.runs import gates, mapping
from gatekeeper.work.runs.model import SUMMARY_CHARS, ArtifactKind, Gate, Run
from gatekeeper.work.runs.store import NewArtifact


@dataclass(frozen=True)
class Brief:
    """What one provider call is asked: the run role, the kind of answer, the text."""

    run_role: str
    kind: str  # plan | research | review | qa | critique | reconcile | summon kind
    text: str
    step: str  # the run step this call belongs to (a transfer gate resumes it)
    agent: str | None = None  # one-call override: a policy role or its provider:model
    persona: str | None = None
    constraints: Sequence[str] = ()
    evidence: Sequence[Mapping[str, Any]] = ()  # {"ref", "kind", "text"} of run artifacts
    schema: Mapping[str, Any] | None = None  # an answer schema ($OMS_SCHEMA_FILE)


@dataclass(frozen=True)
class Answer:
    """A provider call that ran (whatever its exit): facts, and the artifact to attach."""

    role: Role
    receipt: ProviderReceipt
    cleared: gates.Cleared
    artifact: NewArtifact

    @property
    def ok(self) -> bool:
        r = self.receipt
        return r.exit_code == 0 and not r.timed_out and r.signal is None and bool(r.output.strip())

    @property
    def problem(self) -> str | None:
        r = self.receipt
        if r.timed_out:
            return "the provider timed out"
        if r.signal is not None:
            return f"the provider was killed by signal {r.signal}"
        if r.exit_code != 0:
            return f"the provider exited {r.exit_code}"
        if not r.output.strip():
            return "the provider answered nothing"
        return None

    def summary(self) -> dict[str, Any]:
        """The normalised provider response, bounded, as tools show it."""
        r = self.receipt
        return {"role": self.role.name, "engine": self.role.engine, "model": self.role.model,
                "exit_code": r.exit_code, "timed_out": r.timed_out, "ok": self.ok,
                "problem": self.problem, "summary": self.artifact.summary,
                "agent_run": r.run_id, "agent_evidence_seq": r.evidence_seq,
                "redacted": r.redacted, "transfer": self.cleared.transfer}  # fmt: skip


def summarise(text: str, limit: int = SUMMARY_CHARS) -> str:
    """A one-paragraph, terminal-safe summary of an answer: its first lines, bounded."""
    flat = " ".join(line.strip() for line in text.strip().splitlines() if line.strip())
    return sanitize(flat, limit=limit)


def document(run: Run, b: Brief, role: Role) -> bytes:
    """The brief as canonical JSON (RFC 8785): data for the CLI, never argv or shell."""
    doc: dict[str, Any] = {
        "v": 1, "run": run.id, "mode": run.mode, "goal": run.objective,
        "constraints": [*run.constraints, *b.constraints], "role": b.run_role,
        "policy_role": role.name, "kind": b.kind, "brief": b.text, "persona": b.persona,
        "evidence": [dict(e) for e in b.evidence], "read_only": True,
        "answer": "markdown on stdout",
    }  # fmt: skip
    return bytes(rfc8785.dumps(doc))


def resolve(work: Work, run: Run, b: Brief) -> Role:
    """The eligible role for `b`, made read-only for this call."""
    role = mapping.role_of(work.loaded, run.roles, b.run_role, b.agent)
    roles.require(role, unattended=True)
    return dataclasses.replace(role, authority="read-only")


def purpose(run: Run, b: Brief) -> str:
    """The transfer manifest's purpose: what the external model is asked (scanned too)."""
    return f"oms run {run.id} ({run.mode}), {b.run_role} {b.kind}: {run.objective}\n\n{b.text}"


def ask(work: Work, run: Run, b: Brief, kind: ArtifactKind = "report") -> Answer | Gate:
    """Run the call, or return the transfer gate it must stop at first. A refused role
    (RoleUnavailable), a blocked manifest (TransferBlocked) or the agent run's own refusal
    raises before anything is sent."""
    role = resolve(work, run, b)
    cleared = gates.transfer_gate(work, run, role, b.run_role, b.step, purpose(run, b))
    if isinstance(cleared, Gate):
        return cleared
    return call(work, role, b, document(run, b, role), cleared, kind)


def call(work: Work, role: Role, b: Brief, doc: bytes, cleared: gates.Cleared,
         kind: ArtifactKind) -> Answer:  # fmt: skip
    """The provider call itself, past whichever gate cleared it (a run's own, or a summon's
    side gate): the approval is spent as the context leaves, then the CLI runs read-only."""
    base = work.base()  # the commit the policy was read at
    run_provider = adapter(role)
    gates.use_up(work, cleared)  # the approval is spent as the context leaves, not after
    got = run_provider(ProviderRequest(work.repo.top, base, role, new_agent_run_id(), doc,
                                       output_schema=b.schema, loaded=work.loaded))  # fmt: skip
    artifact = NewArtifact(kind=kind, data=got.output.encode(), summary=summarise(got.output),
                           role=b.run_role)  # fmt: skip
    return Answer(role, got, cleared, artifact)
