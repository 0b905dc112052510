"""The protected result gate: `oms process-result`.

An agent-written commit becomes READY_FOR_HUMAN only here, and only if: the
policy and plan come from the trusted base (never the candidate); no protected
path changed; neither scanner found anything the base policy does not allow by
fingerprint; and every check of the plan, run in the sandbox on a scratch copy
of the exact candidate tree, exited 0 within its time-out. It never merges.

One finish path: once the `result.start` entry is written, every decision (a stage's,
or a refusal any stage raised: BLOCKED, UNAVAILABLE, an interruption) ends in exactly
one signed `result` entry, and a refusal exits with its decision's code.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from evidence import Draft, EvidenceStore, state_root
from gatekeeper.errors import (
    Blocked,
    InternalError,
    OmsError,
    Unavailable,
    known_kind,
    refusal,
)
from gatekeeper.gates import sandboxed as sandboxing
from gatekeeper.gates.mark import Mark, trusted_mark
from gatekeeper.gates.result.deliver import (
    Attest,
    DeliveryPlan,
    DeliveryRequest,
    deliver,
    plan_delivery,
)
from gatekeeper.gates.result.payloads import ResultRecord, ResultStart
from gatekeeper.gates.result.stages import STAGES, Stage, run_stage
from gatekeeper.gates.result.state import Clock, GateState
from gatekeeper.gates.result.verdict import Decision, Verdict
from gatekeeper.gates.result.vsa import vsa_for
from gatekeeper.repo.git import GitError, Repo, git, open_repo
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import resolve_commit, trusted_base
from gatekeeper.repo.scratch import ScratchError

MAX_LISTED = 200  # findings/reasons listed in the entry; the full list goes in a blob
DUPLICATE_PATH = "the candidate tree holds a path twice; it cannot be copied exactly"
# Ctrl-C (SIGINT) too: during a gate it is an interruption recorded as UNAVAILABLE (exit 4),
# not the CLI's exit 130 for a command that changes nothing.
INTERRUPT_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class GateInterrupted(Unavailable):
    """SIGTERM, SIGHUP or SIGINT arrived while the gate ran: nothing it was doing counts."""


@dataclass
class GateRun:
    """One gate after its `result.start` entry: the stages' state and its one verdict."""

    state: GateState
    start: ResultStart
    start_seq: int
    subject: list[dict[str, Any]]
    mark: Mark
    verdict: Verdict | None = None  # set once: exactly one `result` entry per gate

    def record(self, decision: Decision) -> ResultRecord:
        s, start = self.state, self.start
        return ResultRecord(
            **start.model_dump(exclude={"v"}),
            start_seq=self.start_seq,
            protected=s.protected,
            changed_files=None if s.change is None else len(s.change.files),
            commits=None if s.change is None else len(s.change.commits),
            scanners=s.scanners,
            profile_digest=None if s.profile is None else s.profile.digest,
            toolchains=None
            if s.toolchains is None
            else tuple(t.used for t in s.toolchains.values()),
            decision=decision,
            reasons=tuple(s.reasons[:MAX_LISTED]),
            checks=tuple(s.checks),
            findings=tuple(s.findings[:MAX_LISTED]),
            runs_later=s.runs_later,
            tests=s.tests,
            vsa=vsa_for(s.repo, start.candidate, decision, s.loaded, start.policy_commit),
        )

    def finish(self, decision: Decision) -> Verdict:
        """The gate's one `result` entry, and the verdict that names it."""
        if self.verdict is not None:
            return self.verdict
        s = self.state
        blobs = sorted({c.stdout_blob for c in s.checks} | {c.stderr_blob for c in s.checks})
        draft = Draft.of(self.record(decision), subject=self.subject, blobs=blobs,
                         policy=s.loaded.digest)  # fmt: skip
        with _signals_deferred():
            entry = s.store.append(draft)
            s.clock.lap("evidence")
            self.verdict = Verdict(decision=decision, reasons=tuple(s.reasons),
                                   commit=s.candidate, base=s.base, evidence_seq=entry.seq,
                                   checks=tuple(s.checks), findings=tuple(s.findings),
                                   protected_changes=s.protected or (),
                                   toolchains=tuple(t.used for t in (s.toolchains or {}).values()),
                                   tests=s.tests, runs_later=s.runs_later or (),
                                   timings_ms=dict(s.clock.laps),
                                   judged=self.judged())  # fmt: skip
        return self.verdict

    def judged(self) -> dict[str, Any]:
        """What range was judged, and by the policy at which trusted mark."""
        s, m = self.state, self.mark
        return {"range": f"{s.base}..{s.candidate}",
                "commits": len(s.change.commits) if s.change is not None
                else 0 if s.base == s.candidate else None,
                "mark": {"ref": m.ref, "commit": m.commit, "seq": m.seq, "by": m.by},
                "first_run": m.note if m.recorded and m.by == "first-run" else None}  # fmt: skip


def _decide(exc: Exception) -> tuple[Decision, str]:
    """(decision, reason) recorded for a refusal raised by a stage."""
    if isinstance(exc, ScratchError | Blocked):
        return Decision.BLOCKED, str(exc)
    if isinstance(exc, FileExistsError):  # the scratch copy met one path twice
        return Decision.BLOCKED, DUPLICATE_PATH
    if isinstance(exc, GitError):
        return Decision.UNAVAILABLE, f"git failed: {exc}"
    if known_kind(exc) is not None:
        return Decision.UNAVAILABLE, str(exc)
    return Decision.UNAVAILABLE, f"internal error: {type(exc).__name__}: {str(exc)[:200]}"


def _raised(decision: Decision, reason: str, exc: Exception, data: dict[str, Any]) -> OmsError:
    """The refusal the caller sees: its exit code is the recorded decision's (3 or 4)."""
    if decision == Decision.BLOCKED:
        return Blocked(reason, data=data)
    if known_kind(exc) is None and not isinstance(exc, OSError):
        return InternalError(reason, data=data)  # a bug: exit 4 too, shown as internal
    return Unavailable(reason, data=data)


def run_stages(gate: GateRun, stages: Sequence[Stage] = STAGES) -> Verdict:
    """The stages in order; any refusal ends in exactly one recorded `result` entry, then
    is raised again as the OmsError of its decision: Blocked (3) or Unavailable (4)."""
    try:
        for stage in stages:
            decision = run_stage(stage, gate.state)
            if decision is not None:
                return gate.finish(decision)
        raise AssertionError("the last stage always decides")  # pragma: no cover
    except Exception as exc:
        if gate.verdict is not None:
            raise  # recorded already (a failure after the entry was written)
        decision, reason = _decide(exc)
        gate.state.reasons.append(reason)
        data = gate.finish(decision).to_json()
        raise _raised(decision, reason, exc, data) from exc


@dataclass
class _Deferral:
    active: bool = False
    pending: list[int] = field(default_factory=list)


_DEFERRED = _Deferral()


class _Pending:
    """A signal that arrived while `result.start` was written interrupts here."""

    def run(self, s: GateState) -> Decision | None:
        if _DEFERRED.pending:
            signum = _DEFERRED.pending.pop()
            raise GateInterrupted(f"interrupted by {signal.Signals(signum).name}")
        return None


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM, SIGHUP and SIGINT raise GateInterrupted in the main thread while the gate runs,
    so that every `finally` (scratch removal, sandbox kill) runs and the gate records
    the interruption; the previous handlers are restored afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals are delivered to the main thread only; its handlers stay
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        if _DEFERRED.active:
            _DEFERRED.pending.append(signum)
            return
        raise GateInterrupted(f"interrupted by {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, handler) for sig in INTERRUPT_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        pending, _DEFERRED.pending[:] = list(_DEFERRED.pending), []
        for signum in pending:  # arrived while the verdict was written: delivered now
            signal.raise_signal(signum)


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """No interruption inside an evidence append: a signal waits until it is written
    (the next stage, or the end of the gate, takes it)."""
    before = _DEFERRED.active
    _DEFERRED.active = True
    try:
        yield
    finally:
        _DEFERRED.active = before


@dataclass(frozen=True)
class GateRequest:
    """What the caller asks the gate to judge, and what to do with a READY verdict."""

    repo_dir: Path
    candidate: str
    base: str | None = None
    ticket: str | None = None
    attempt: int | None = None
    delivery: DeliveryRequest = field(default_factory=DeliveryRequest)
    # Who asked, when it was an agent run's `oms mcp` (its run subject), added to the entries.
    requested_by: tuple[Mapping[str, Any], ...] = ()
    # Lines on what the gate is doing: each stage as it starts and ends, each check and its
    # time, the scan, an auto-prepared toolchain.
    progress: Callable[[str], None] | None = None


def _begin(req: GateRequest) -> tuple[GateRun, DeliveryPlan | None]:
    """Everything checked before the gate runs (refs, policy, key, delivery options),
    then the `result.start` entry: a refusal up to here records nothing."""
    clock = Clock()
    repo = open_repo(req.repo_dir)
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    store.key  # noqa: B018 -- fail closed before anything runs when the key is unusable
    candidate = resolve_commit(repo.top, req.candidate)
    # The policy at the default branch's trusted mark, never at commits no one judged (even
    # the tip), the candidate or a caller's base; the commits after the mark are judged.
    mark = trusted_mark(store, repo)
    policy_commit = mark.commit
    base = trusted_base(repo, candidate, req.base, policy_commit)
    tree = git(repo.top, "rev-parse", f"{candidate}^{{tree}}").decode().strip()
    loaded = read_policy_at(repo.top, policy_commit)
    plan = plan_delivery(repo, req.delivery, candidate) if req.delivery.wanted else None
    budget = sandboxing.gate_deadline(loaded)  # one budget: copies, scanners, checks
    state = GateState(repo, store, loaded, base, candidate, budget, clock=clock,
                      policy_commit=policy_commit, progress=req.progress)  # fmt: skip
    state.clock.lap("resolve")
    start = ResultStart(repo_id=repo.repo_id, base=base, policy_commit=policy_commit,
                        candidate=candidate, tree=tree, policy_digest=loaded.digest,
                        plan_digest=loaded.plan_digest, ticket=req.ticket,
                        attempt=req.attempt)  # fmt: skip
    subject = [{"name": f"git+file://{repo.top}", "digest": {"gitCommit": candidate}},
               *(dict(s) for s in req.requested_by)]  # fmt: skip
    with _signals_deferred():
        entry = store.append(Draft.of(start, subject=subject, policy=loaded.digest))
    state.clock.lap("evidence")
    return GateRun(state, start, entry.seq, subject, mark), plan


def gate(req: GateRequest) -> Verdict:
    """The gate on `req`, then the delivery it asks for, only on READY_FOR_HUMAN."""
    with interruptible():
        run, plan = _begin(req)
        verdict = run_stages(run, (_Pending(), *STAGES))
    if plan is None or verdict.decision != Decision.READY:
        return verdict
    repo: Repo = run.state.repo
    try:
        delivered = deliver(repo, verdict.commit, plan)
    except Exception as exc:
        # The READY verdict stands (it is recorded); the refusal is about delivery.
        shown = {**verdict.to_json(), "delivered": {"error": str(exc)}}
        raise refusal(exc, shown) from exc
    return verdict.model_copy(update={"delivered": delivered})


def process_result(
    repo_dir: Path,
    candidate_ref: str,
    base_ref: str | None = None,
    ticket: str | None = None,
    attempt: int | None = None,
    deliver_branch: str | None = None,
    push_remote: str | None = None,
    draft_pr: bool = False,
    requested_by: Sequence[Mapping[str, Any]] = (),
    progress: Callable[[str], None] | None = None,
    attest: Attest | None = None,
) -> Verdict:
    """`oms process-result` and the MCP tool: the gate, and delivery when asked (with a push
    and `attest`, the commit's provenance note pushed beside the branch)."""
    delivery = DeliveryRequest(deliver_branch, push_remote, draft_pr, attest)
    return gate(GateRequest(repo_dir, candidate_ref, base_ref, ticket, attempt, delivery,
                            tuple(requested_by), progress))  # fmt: skip
