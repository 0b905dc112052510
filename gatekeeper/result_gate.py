"""The protected result gate: `oms process-result`.

An agent-written commit becomes READY_FOR_HUMAN only here, and only if: the
policy and plan come from the trusted base (never the candidate); no protected
path changed; neither scanner found anything the base policy does not allow by
fingerprint; and every check of the plan, run in the sandbox on a scratch copy
of the exact candidate tree, exited 0 within its time-out. It never merges.
Every decision, including "unavailable", is recorded as a signed evidence entry.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evidence import Draft, EvidenceStore, state_root
from policy import LoadedPolicy
from sandbox import RunResult

from . import sandboxing
from .change import added_items, read_change
from .errors import EXIT_BLOCKED, EXIT_FAILED, EXIT_OK, Unavailable, UsageError
from .git import Repo, git, open_repo, read_policy_at, resolve_commit
from .protected import protected_changes
from .scan import Finding, ScanItem, ScannerInfo, combined

READY = "READY_FOR_HUMAN"
FAILED = "FAILED"
BLOCKED = "BLOCKED"
UNAVAILABLE = "UNAVAILABLE"
MAX_LISTED = 200  # findings/reasons listed in the entry; the full list goes in a blob


class GateUnavailable(Unavailable):
    """Unavailable after the refusal was recorded; carries the JSON to show."""

    def __init__(self, message: str, data: dict[str, Any]) -> None:
        super().__init__(message)
        self.data = data


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


def default_branch(repo: Path) -> str:
    """The tip of the default branch: origin/HEAD, else main, else master."""
    for ref in ("refs/remotes/origin/HEAD", "refs/heads/main", "refs/heads/master"):
        try:
            return resolve_commit(repo, ref)
        except UsageError:
            continue
    raise UsageError("no default branch (origin/HEAD, main or master); pass --base REF")


def default_base(repo: Path, candidate: str) -> str:
    """Merge-base of the candidate with the repository's default branch."""
    out = git(repo, "merge-base", default_branch(repo), candidate, check=False).strip()
    if not out:
        raise UsageError("the candidate shares no history with the default branch; pass --base")
    return out.decode("ascii")


def scan_both(
    items: list[ScanItem], loaded: LoadedPolicy
) -> tuple[list[Finding], list[ScannerInfo]]:
    """Both scanners over `items` with the pin and time-out of this policy."""
    sp = loaded.policy.scanners
    return combined.scan_both(items, sp.gitleaks_sha256, sp.timeout_s)


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


def _vsa(repo: Repo, sha: str, decision: str, loaded: LoadedPolicy, base: str) -> dict[str, Any]:
    """A SLSA verification summary (v1) predicate for the verdict."""
    return {
        "verifier": {"id": "https://oms.local/process-result"},
        "timeVerified": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "resourceUri": f"git+file://{repo.top}@{sha}",
        "policy": {
            "uri": f"git+file://{repo.top}@{base}#oms.toml",
            "digest": {"sha256": loaded.digest.removeprefix("sha256:")},
        },
        "verificationResult": "PASSED" if decision == READY else "FAILED",
        "verifiedLevels": [],
    }


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
    clock = _Clock()
    repo = open_repo(repo_dir)
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    store.key  # noqa: B018 -- fail closed before anything runs when the key is unusable
    candidate = resolve_commit(repo.top, candidate_ref)
    base = resolve_commit(repo.top, base_ref) if base_ref else default_base(repo.top, candidate)
    tree = git(repo.top, "rev-parse", f"{candidate}^{{tree}}").decode().strip()
    loaded = read_policy_at(repo.top, base)  # from the base, never the candidate
    policy = loaded.policy
    clock.lap("resolve")
    subject = [{"name": f"git+file://{repo.top}", "digest": {"gitCommit": candidate}}]
    record: dict[str, Any] = {
        "repo_id": repo.repo_id,
        "base": base,
        "candidate": candidate,
        "tree": tree,
        "policy_digest": loaded.digest,
        "plan_digest": loaded.plan_digest,
        "ticket": ticket,
        "attempt": attempt,
    }
    start = store.append(Draft(kind="result.start", subject=subject, data=record,
                               policy=loaded.digest))  # fmt: skip
    record["start_seq"] = start.seq
    clock.lap("evidence")
    reasons: list[str] = []
    verdict_checks: list[dict[str, Any]] = []
    findings_json: list[dict[str, Any]] = []

    def finish(decision: str) -> Verdict:
        data = {**record, "decision": decision, "reasons": reasons[:MAX_LISTED],
                "checks": verdict_checks, "findings": findings_json[:MAX_LISTED],
                "vsa": _vsa(repo, candidate, decision, loaded, base)}  # fmt: skip
        blobs = [c["stdout_blob"] for c in verdict_checks] + [
            c["stderr_blob"] for c in verdict_checks
        ]
        entry = store.append(Draft(kind="result", subject=subject, data=data,
                                   blobs=sorted(set(blobs)),
                                   policy=loaded.digest))  # fmt: skip
        clock.lap("evidence")
        return Verdict(decision, reasons, candidate, base, entry.seq, verdict_checks,
                       findings_json, record.get("protected", []),
                       timings_ms=clock.laps)  # fmt: skip

    def unavailable(message: str) -> GateUnavailable:
        reasons.append(message)
        v = finish(UNAVAILABLE)
        return GateUnavailable(message, {**v.to_json(), "decision": UNAVAILABLE})

    # 1. Protected paths.
    change = read_change(repo.top, base, candidate)
    hits = protected_changes(change.files, policy.protected.paths)
    record["protected"] = hits
    record["changed_files"] = len(change.files)
    clock.lap("protected")
    reasons.extend(f"protected path changed: {h['path']} ({h['status']}, {h['pattern']})"
                   for h in hits)  # fmt: skip
    # 2. Scanners over everything the change adds, once each.
    items = added_items(repo.top, change)
    clock.lap("read_change")
    try:
        findings, infos = scan_both(items, loaded)
    except Unavailable as exc:
        raise unavailable(str(exc)) from None
    clock.lap("scan")
    record["scanners"] = [{"name": i.name, "version": i.version, "digest": i.digest} for i in infos]
    allowed = set(policy.scanners.allow_fingerprints)
    for f in findings:
        ok = f.fingerprint in allowed
        findings_json.append({**f.to_json(), "allowed": ok})
        if not ok:
            reasons.append(f"secret found: {f.rule} in {f.file}:{f.line} ({f.scanner})")
    if reasons:
        reasons.append("checks not run: the candidate is blocked")
        return finish(BLOCKED)
    if not policy.checks:
        reasons.append("the base policy has no verification plan ([[checks]] in oms.toml)")
        return finish(BLOCKED)
    # 3. The plan from the base, in the sandbox, on the exact candidate tree.
    try:
        profile = sandboxing.profile_for(repo, loaded)
        record["profile_digest"] = profile.digest
        bw = sandboxing.ready(repo, profile)
    except Unavailable as exc:
        raise unavailable(str(exc)) from None
    clock.lap("probe")
    for check in policy.checks:
        prof = sandboxing.profile_for(repo, loaded, timeout_s=check.timeout_s)
        try:
            r = sandboxing.run_in_scratch(repo, candidate, prof, bw, check.cmd)
        except Unavailable as exc:
            raise unavailable(str(exc)) from None
        verdict_checks.append(_check_json(check.name, r, store))
        if r.timed_out:
            reasons.append(f"check {check.name} timed out after {check.timeout_s} s")
        elif r.exit_code != 0:
            reasons.append(f"check {check.name} exited {r.exit_code}")
    clock.lap("checks")
    if reasons:
        return finish(FAILED)
    verdict = finish(READY)
    if deliver_branch or push_remote or draft_pr:
        from .deliver import deliver

        try:
            verdict.delivered = deliver(repo, candidate, deliver_branch, push_remote, draft_pr)
        except Exception as exc:
            # The READY verdict stands (it is recorded); the refusal is about delivery.
            exc.data = {**verdict.to_json(), "delivered": {"error": str(exc)}}  # type: ignore[attr-defined]
            raise
    return verdict
