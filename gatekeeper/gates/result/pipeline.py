"""The protected result gate: `oms process-result`.

An agent-written commit becomes READY_FOR_HUMAN only here, and only if: the
policy and plan come from the trusted base (never the candidate); no protected
path changed; neither scanner found anything the base policy does not allow by
fingerprint; and every check of the plan, run in the sandbox on a scratch copy
of the exact candidate tree, exited 0 within its time-out. It never merges.
Every decision, including "unavailable", is recorded as a signed evidence entry.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from evidence import Draft, EvidenceStore, state_root
from gatekeeper.errors import (
    EXIT_BLOCKED,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    Blocked,
    Unavailable,
    classify,
    refusal,
)
from gatekeeper.gates import sandboxed as sandboxing
from gatekeeper.gates.result.protected import protected_changes
from gatekeeper.repo.change import Change, read_change, scan_set
from gatekeeper.repo.git import GitError, Repo, git, open_repo
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import resolve_commit, trusted_base
from gatekeeper.repo.scratch import ScratchError
from gatekeeper.scan.policy import scan_with_policy
from policy import LoadedPolicy
from sandbox import Bwrap, Deadline, Profile, RunResult

READY = "READY_FOR_HUMAN"
FAILED = "FAILED"
BLOCKED = "BLOCKED"
UNAVAILABLE = "UNAVAILABLE"
MAX_LISTED = 200  # findings/reasons listed in the entry; the full list goes in a blob


NOTHING_TO_VERIFY = "nothing to verify: the candidate is its base"
INTERRUPT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class GateInterrupted(Unavailable):
    """SIGTERM or SIGHUP arrived while the gate ran: nothing it was doing counts."""


@dataclass
class Verdict:
    decision: str
    reasons: list[str]
    commit: str
    base: str
    evidence_seq: int
    checks: list[dict[str, Any]] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    protected: list[dict[str, str]] = field(default_factory=list)
    delivered: dict[str, Any] | None = None
    timings_ms: dict[str, int] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return {READY: EXIT_OK, FAILED: EXIT_FAILED}.get(self.decision, EXIT_BLOCKED)

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": self.decision,
            "reasons": self.reasons,
            "commit": self.commit,
            "base": self.base,
            "evidence_seq": self.evidence_seq,
            "checks": self.checks,
            "findings": self.findings,
            "protected_changes": self.protected,
            "delivered": self.delivered,
            "timings_ms": self.timings_ms,
        }


class _Clock:
    """Wall time per gate stage, for the JSON output and the benchmark."""

    def __init__(self) -> None:
        self.laps: dict[str, int] = {}
        self._t = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.laps[stage] = self.laps.get(stage, 0) + int((now - self._t) * 1000)
        self._t = now


def _check_json(name: str, r: RunResult, store: EvidenceStore) -> dict[str, Any]:
    return {
        "name": name,
        "exit_code": r.exit_code,
        "timed_out": r.timed_out,
        "signal": r.signal,
        "duration_ms": int(r.duration_s * 1000),
        "stdout_bytes": r.stdout.total,
        "stderr_bytes": r.stderr.total,
        "stdout_blob": store.blobs.put(r.stdout.kept),
        "stderr_blob": store.blobs.put(r.stderr.kept),
        "stdout_tail": r.stdout.display()[-2000:],
        "stderr_tail": r.stderr.display()[-2000:],
    }


def _vsa(
    repo: Repo, sha: str, decision: str, loaded: LoadedPolicy, policy_at: str
) -> dict[str, Any]:
    """A SLSA verification summary (v1) predicate for the verdict."""
    return {
        "verifier": {"id": "https://oms.local/process-result"},
        "timeVerified": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "resourceUri": f"git+file://{repo.top}@{sha}",
        "policy": {
            "uri": f"git+file://{repo.top}@{policy_at}#oms.toml",
            "digest": {"sha256": loaded.digest.removeprefix("sha256:")},
        },
        "verificationResult": "PASSED" if decision == READY else "FAILED",
        "verifiedLevels": [],
    }


@dataclass
class GateRun:
    """One gate after its `result.start` entry: what the stages read and add to."""

    repo: Repo
    store: EvidenceStore
    loaded: LoadedPolicy
    base: str
    candidate: str
    subject: list[dict[str, Any]]
    record: dict[str, Any]
    clock: _Clock
    policy_commit: str
    budget: Deadline
    reasons: list[str] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    change: Change | None = None
    profile: Profile | None = None
    bwrap: Bwrap | None = None
    verdict: Verdict | None = None  # set once: exactly one `result` entry per gate

    def finish(self, decision: str) -> Verdict:
        if self.verdict is not None:
            return self.verdict
        vsa = _vsa(self.repo, self.candidate, decision, self.loaded, self.policy_commit)
        data = {**self.record, "decision": decision, "reasons": self.reasons[:MAX_LISTED],
                "checks": self.checks, "findings": self.findings[:MAX_LISTED],
                "vsa": vsa}  # fmt: skip
        blobs = {c["stdout_blob"] for c in self.checks} | {c["stderr_blob"] for c in self.checks}
        with _signals_deferred():
            entry = self.store.append(Draft(kind="result", subject=self.subject, data=data,
                                            blobs=sorted(blobs),
                                            policy=self.loaded.digest))  # fmt: skip
            self.clock.lap("evidence")
            self.verdict = Verdict(decision, self.reasons, self.candidate, self.base, entry.seq,
                                   self.checks, self.findings, self.record.get("protected", []),
                                   timings_ms=self.clock.laps)  # fmt: skip
        return self.verdict


class Stage(Protocol):
    """One step of the gate: a decision ends the gate, None lets the next stage run.

    A stage refuses by raising; `run_stages` records that refusal as the gate's one
    `result` entry (BLOCKED for policy, UNAVAILABLE for anything oms could not do).
    """

    def run(self, gate: GateRun) -> str | None: ...


class _Pending:
    """A signal that arrived while `result.start` was written interrupts here."""

    def run(self, gate: GateRun) -> str | None:
        if _DEFERRED.pending:
            signum = _DEFERRED.pending.pop()
            raise GateInterrupted(f"interrupted by {signal.Signals(signum).name}")
        return None


class NotItsBase:
    def run(self, gate: GateRun) -> str | None:
        if gate.candidate == gate.base:
            gate.reasons.append(NOTHING_TO_VERIFY)
            return BLOCKED
        return None


class ProtectedPaths:
    def run(self, gate: GateRun) -> str | None:
        gate.change = read_change(gate.repo.top, gate.base, gate.candidate)
        hits = protected_changes(gate.change.files, gate.loaded.policy.protected.paths)
        gate.record["protected"] = hits
        gate.record["changed_files"] = len(gate.change.files)
        gate.record["commits"] = len(gate.change.commits)
        gate.clock.lap("protected")
        gate.reasons.extend(f"protected path changed: {h['path']} ({h['status']}, "
                            f"{h['pattern']})" for h in hits)  # fmt: skip
        return None


class Secrets:
    """Both scanners, once each, over everything the candidate would deliver."""

    def run(self, gate: GateRun) -> str | None:
        assert gate.change is not None  # ProtectedPaths read it
        scope = scan_set(gate.repo.top, gate.change)
        gate.clock.lap("read_change")
        report = scan_with_policy(list(scope.items), gate.loaded, gate.budget)
        gate.clock.lap("scan")
        gate.record["scanners"] = [i.to_json() for i in report.scanners]
        for f in report.only(scope.new_findings).findings:
            gate.findings.append(f.to_json())
            if not f.allowed:
                gate.reasons.append(f"secret found: {f.rule} in {f.file}:{f.line} ({f.scanner})")
        if gate.reasons:
            gate.reasons.append("checks not run: the candidate is blocked")
            return BLOCKED
        return None


class Plan:
    def run(self, gate: GateRun) -> str | None:
        if not gate.loaded.policy.checks:
            gate.reasons.append("the base policy has no verification plan ([[checks]] in oms.toml)")
            return BLOCKED
        return None


class SandboxReady:
    def run(self, gate: GateRun) -> str | None:
        gate.profile = sandboxing.profile_for(gate.repo, gate.loaded)
        gate.record["profile_digest"] = gate.profile.digest
        gate.bwrap = sandboxing.ready(gate.repo, gate.profile)
        gate.clock.lap("probe")
        return None


class Checks:
    """The plan from the base, in the sandbox, each on a fresh copy of the candidate tree."""

    def run(self, gate: GateRun) -> str | None:
        assert gate.bwrap is not None  # SandboxReady found it
        for check in gate.loaded.policy.checks:
            prof = sandboxing.profile_for(gate.repo, gate.loaded, timeout_s=check.timeout_s)
            r = sandboxing.run_in_scratch(gate.repo, gate.candidate, prof, gate.bwrap, check.cmd,
                                          gate.budget)  # fmt: skip
            gate.checks.append(_check_json(check.name, r, gate.store))
            if r.timed_out:
                gate.reasons.append(f"check {check.name} timed out after {check.timeout_s} s")
            elif r.exit_code != 0:
                gate.reasons.append(f"check {check.name} exited {r.exit_code}")
        gate.clock.lap("checks")
        return FAILED if gate.reasons else READY


STAGES: tuple[Stage, ...] = (
    NotItsBase(), ProtectedPaths(), Secrets(), Plan(), SandboxReady(), Checks(),
)  # fmt: skip


def _refusal(exc: Exception) -> tuple[str, str]:
    """(decision, reason) recorded for a refusal raised by a stage."""
    if isinstance(exc, ScratchError | Blocked):
        return BLOCKED, str(exc)
    if isinstance(exc, FileExistsError):  # the scratch copy met one path twice
        return BLOCKED, "the candidate tree holds a path twice; it cannot be copied exactly"
    if isinstance(exc, GitError):
        return UNAVAILABLE, f"git failed: {exc}"
    if classify(exc) is not None:
        return UNAVAILABLE, str(exc)
    return UNAVAILABLE, f"internal error: {type(exc).__name__}: {str(exc)[:200]}"


def run_stages(gate: GateRun, stages: Sequence[Stage] = STAGES) -> Verdict:
    """The stages in order; any refusal ends in exactly one recorded `result` entry,
    then is raised again: BLOCKED as GateBlocked (exit 3), what oms could not do as
    Unavailable (exit 4), anything else (a bug, a bad sandbox profile) as itself."""
    try:
        for stage in stages:
            decision = stage.run(gate)
            if decision is not None:
                return gate.finish(decision)
        raise AssertionError("the last stage always decides")  # pragma: no cover
    except Exception as exc:
        if gate.verdict is not None:
            raise  # recorded already (a failure after the entry was written)
        decision, reason = _refusal(exc)
        gate.reasons.append(reason)
        data = {**gate.finish(decision).to_json(), "decision": decision}
        known = classify(exc)
        if decision == BLOCKED:
            raise Blocked(reason, data=data) from exc
        if isinstance(exc, GitError | OSError) or (known and known[0] == EXIT_UNAVAILABLE):
            raise Unavailable(reason, data=data) from exc
        raise refusal(exc, data) from exc  # shown with the recorded decision


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM and SIGHUP raise GateInterrupted in the main thread while the gate runs,
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


@dataclass
class _Deferral:
    active: bool = False
    pending: list[int] = field(default_factory=list)


_DEFERRED = _Deferral()


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


def _gate(
    repo_dir: Path,
    candidate_ref: str,
    base_ref: str | None,
    ticket: str | None,
    attempt: int | None,
) -> tuple[Verdict, Repo]:
    clock = _Clock()
    repo = open_repo(repo_dir)
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    store.key  # noqa: B018 -- fail closed before anything runs when the key is unusable
    candidate = resolve_commit(repo.top, candidate_ref)
    # The policy from the default branch's tip, never the candidate or a caller's base.
    base, policy_commit = trusted_base(repo, candidate, base_ref)
    tree = git(repo.top, "rev-parse", f"{candidate}^{{tree}}").decode().strip()
    loaded = read_policy_at(repo.top, policy_commit)
    budget = sandboxing.gate_deadline(loaded)  # one budget: copies, scanners, checks
    clock.lap("resolve")
    subject = [{"name": f"git+file://{repo.top}", "digest": {"gitCommit": candidate}}]
    record: dict[str, Any] = {
        "repo_id": repo.repo_id,
        "base": base,
        "policy_commit": policy_commit,
        "candidate": candidate,
        "tree": tree,
        "policy_digest": loaded.digest,
        "plan_digest": loaded.plan_digest,
        "ticket": ticket,
        "attempt": attempt,
    }
    with _signals_deferred():
        start = store.append(Draft(kind="result.start", subject=subject, data=record,
                                   policy=loaded.digest))  # fmt: skip
    record["start_seq"] = start.seq
    clock.lap("evidence")
    gate = GateRun(
        repo, store, loaded, base, candidate, subject, record, clock, policy_commit, budget
    )
    return run_stages(gate, (_Pending(), *STAGES)), repo


def process_result(
    repo_dir: Path,
    candidate_ref: str,
    base_ref: str | None = None,
    ticket: str | None = None,
    attempt: int | None = None,
    deliver_branch: str | None = None,
    push_remote: str | None = None,
    draft_pr: bool = False,
) -> Verdict:
    with interruptible():
        verdict, repo = _gate(repo_dir, candidate_ref, base_ref, ticket, attempt)
    candidate = verdict.commit
    if verdict.decision == READY and (deliver_branch or push_remote or draft_pr):
        from gatekeeper.gates.result.deliver import deliver

        try:
            verdict.delivered = deliver(repo, candidate, deliver_branch, push_remote, draft_pr)
        except Exception as exc:
            # The READY verdict stands (it is recorded); the refusal is about delivery.
            shown = {**verdict.to_json(), "delivered": {"error": str(exc)}}
            raise refusal(exc, shown) from exc
    return verdict
