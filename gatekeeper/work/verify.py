"""`oms verify TICKET`: the result gate on the receipt's commit, then ONE fresh grade.

A thin caller (DESIGN.md, "Verification"): the result gate decides and its verdict is
final; the grade, from the `[work] grader` role on another engine than the executor's, is
supplemental and recorded beside it. `Work.finish_verify` derives the ticket's next state
from the two: READY -> completed (human hold), FAILED -> retryable with one bounded
reflection (or blocked at the attempt limit), BLOCKED -> blocked, no grade -> parked.
A gate that could judge nothing (UNAVAILABLE) leaves the verification `started`; the next
`oms verify` abandons it and starts a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidence import Draft
from gatekeeper.agent.run import AgentInterrupted
from gatekeeper.agent.workspace import new_run_id
from gatekeeper.digest import Sha256Digest
from gatekeeper.errors import Blocked, OmsError
from gatekeeper.gates.result.pipeline import GateRequest, gate
from gatekeeper.gates.result.verdict import Decision, Verdict
from gatekeeper.work import grade as g
from gatekeeper.work import payloads as p
from gatekeeper.work import roles
from gatekeeper.work.api import opened
from gatekeeper.work.fence import Work, new_nonce
from gatekeeper.work.model import Verification, VerifyOutcome
from gatekeeper.work.providers import adapter
from gatekeeper.work.providers.base import ProviderReceipt, ProviderRequest, Role
from gatekeeper.work.transfers import TransferRefused, approved_transfer

Progress = Callable[[str], None]
EXIT_BY_STATE: Mapping[str, int] = {"completed": 0, "retryable": 1, "blocked": 3, "parked": 4}


@dataclass(frozen=True)
class Graded:
    """The one grade obtained, and the `grade` entry that records it."""

    record: g.GradeRecord
    seq: int

    def to_json(self) -> dict[str, Any]:
        r = self.record
        return {"grade": r.grade, "reasons": list(r.reasons), "engine": r.engine,
                "role": r.role, "seq": self.seq}  # fmt: skip


def verify(repo_dir: Path, ticket: str, nonce: str | None = None, transfer: str | None = None,
           progress: Progress | None = None) -> tuple[dict[str, Any], int]:  # fmt: skip
    """The command's JSON and exit code: 0 completed, 1 retryable, 3 blocked, 4 parked."""
    digest = Sha256Digest.parse(transfer) if transfer is not None else None  # before anything
    with opened(repo_dir) as work:
        v = work.begin_verify(ticket, nonce or new_nonce())
        verdict = judge(work, v, progress)
        title = work.ticket(ticket).title
        graded: Graded | None = None
        problem: str | None = None
        try:
            graded = obtain_grade(work, v, verdict, title, digest)
        except g.GradeProblem as exc:
            problem = str(exc)
        blob = reflect(work, verdict, graded) if verdict.decision == Decision.FAILED else None
        outcome = VerifyOutcome(decision=verdict.decision.value, result_seq=verdict.evidence_seq,
                                grade=graded.record.grade if graded else None,
                                grade_problem=problem, grade_seq=graded.seq if graded else None,
                                reflection_blob=blob)  # fmt: skip
        shown = work.finish_verify(v, outcome)
        data = {
            "ticket": shown.to_json(),
            "verdict": {**verdict.to_json(), "result_seq": verdict.evidence_seq,
                        "reflection_blob": blob},
            "grade": graded.to_json() if graded else None,
            "grade_problem": problem,
        }  # fmt: skip
        return data, EXIT_BY_STATE[shown.state]


# -- the result gate ---------------------------------------------------------------------------


def subjects(v: Verification) -> tuple[dict[str, Any], ...]:
    """Who asked the gate: the ticket, the dispatch and the lease (by digest) of this verify."""
    lease = Sha256Digest.parse(v.lease)
    return (*p.subject(f"oms-ticket:{v.ticket}"), *p.subject(f"oms-dispatch:{v.dispatch}"),
            {"name": "oms-lease", "digest": {"sha256": lease.hex}})  # fmt: skip


def judge(work: Work, v: Verification, progress: Progress | None) -> Verdict:
    """The gate's recorded verdict on the receipt's commit against the dispatch's base. A
    BLOCKED refusal carries its verdict; anything else (UNAVAILABLE: nothing judged) is
    raised and leaves the verification `started`."""
    req = GateRequest(work.repo.top, candidate=v.commit, base=v.base, ticket=v.ticket,
                      attempt=v.attempt, requested_by=subjects(v), progress=progress)  # fmt: skip
    try:
        return gate(req)
    except Blocked as exc:
        if exc.data is None or exc.data.get("decision") != Decision.BLOCKED.value:
            raise
        return Verdict.model_validate(exc.data)


# -- the one grade -------------------------------------------------------------------------


def grader_role(work: Work, v: Verification) -> Role:
    """The `[work] grader` role: eligible unattended, read-only, on another engine."""
    name = work.loaded.policy.work.grader
    try:
        role = roles.require(roles.resolve(work.loaded, name), unattended=True)
    except OmsError as exc:
        raise g.GradeProblem(exc.message) from None
    if role.engine == v.engine:
        raise g.GradeProblem(f"the grader role {name} runs on {role.engine}, the executor's "
                             "engine: the grade must come from another engine")  # fmt: skip
    if role.authority != "read-only":
        raise g.GradeProblem(f"the grader role {name} is {role.authority}; a grader is read-only")
    return role


def grading_transfer(work: Work, role: Role, digest: Sha256Digest | None) -> str | None:
    """The transfer the grade is made under (`transfers.approved_transfer`); a refusal is a
    grade problem, so the ticket parks visibly instead of the grade being skipped."""
    try:
        return approved_transfer(work, role, digest)
    except TransferRefused as exc:
        raise g.GradeProblem(exc.message) from None


def run_grader(work: Work, at: str, role: Role, doc: bytes) -> ProviderReceipt:
    """The grader under `oms agent run` on a clone of `at`, read-only, with the role's
    time-out and answer schema (its provider's, from the default branch, else the grade's);
    a refusal of the run is a problem, never a fallback."""
    try:
        schema = roles.schema_of(work.repo.top, role) or g.GRADE_SCHEMA
        req = ProviderRequest(work.repo.top, at, role, new_run_id(), doc, output_schema=schema,
                              loaded=work.loaded)  # fmt: skip
        got = adapter(role)(req)
    except AgentInterrupted:
        raise  # oms itself was stopped: the verify is left `started`, as after a SIGKILL
    except OmsError as exc:
        raise g.GradeProblem(f"the grader could not run: {exc.message}"[:300]) from None
    if got.timed_out:
        raise g.GradeProblem(f"the grader timed out after {role.timeout_s} s")
    if got.exit_code != 0:
        how = f"signal {got.signal}" if got.signal else f"exit {got.exit_code}"
        raise g.GradeProblem(f"the grader failed ({how})")
    return got


def obtain_grade(work: Work, v: Verification, verdict: Verdict, title: str,
                 transfer: Sha256Digest | None) -> Graded:  # fmt: skip
    """Exactly one fresh grade, whatever the verdict, recorded as a `grade` entry."""
    role = grader_role(work, v)
    under = grading_transfer(work, role, transfer)
    doc = g.document(work.repo, v.ticket, title, v.attempt, verdict)
    # A change whose diff is withheld is not in the grader's workspace either: it reads the base.
    got = run_grader(work, v.base if g.withhold_diff(verdict) else v.commit, role, doc)
    answer = g.parse_answer(got.output)
    record = g.GradeRecord(
        ticket=v.ticket, attempt=v.attempt, verification=v.id, commit=v.commit,
        result_seq=verdict.evidence_seq, role=role.name, engine=role.engine,
        grade=answer.grade, reasons=answer.reasons, ignored_keys=answer.ignored_keys,
        document_sha256=g.digest(doc), output_sha256=g.digest(got.output.encode()),
        agent_run_seq=got.evidence_seq, transfer=under,
    )  # fmt: skip
    entry = work.store.append(Draft.of(record, subject=p.subject(f"oms-ticket:{v.ticket}"),
                                       policy=work.loaded.digest))  # fmt: skip
    return Graded(record, entry.seq)


# -- the reflection --------------------------------------------------------------------------


def reflection(verdict: Verdict, graded: Graded | None, limit: int) -> bytes:
    """What the next attempt learns from a failed one, at most `limit` bytes: the failed
    checks with their output tails, the gate's reasons, the grade's reasons."""
    lines = [f"attempt failed the result gate on {verdict.commit}", "gate reasons:"]
    lines += [f"- {r}" for r in verdict.reasons]
    for c in verdict.checks:
        if c.passed:
            continue
        status = "timed out" if c.timed_out else f"exit {c.exit_code}"
        lines += [f"check {c.name}: {status}", "stdout tail:", c.stdout_tail,
                  "stderr tail:", c.stderr_tail]  # fmt: skip
    if graded is not None:
        lines.append(f"supplemental grade: {graded.record.grade}")
        lines += [f"- {r}" for r in graded.record.reasons]
    data = "\n".join(lines).encode("utf-8", "replace")
    return data[:limit].decode("utf-8", "ignore").encode()


def reflect(work: Work, verdict: Verdict, graded: Graded | None) -> str:
    """The bounded reflection stored as an evidence blob; its digest."""
    data = reflection(verdict, graded, work.loaded.policy.work.reflection_bytes)
    return str(Sha256Digest(work.store.blobs.put(data)))
