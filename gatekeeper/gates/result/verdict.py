"""The result gate's answer: a frozen `Verdict` and the parts it is made of.

The models are the contract between the gate, the CLI, MCP and the `result` evidence
entry; `to_json()` gives exactly the JSON `oms process-result --json` has always shown.
The nested models are persisted inside the entry, so they reject unknown keys too.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from gatekeeper.errors import EXIT_BLOCKED, EXIT_FAILED, EXIT_OK, EXIT_UNAVAILABLE
from gatekeeper.gates.toolchain.bind import ToolchainUsed
from gatekeeper.repo.change import FileChange
from gatekeeper.scan.interface import Finding, ScannerInfo
from sandbox import RunResult

TAIL_CHARS = 2000  # of each stream's output, shown and recorded; the full output is a blob


class Decision(StrEnum):
    READY = "READY_FOR_HUMAN"
    FAILED = "FAILED"
    BLOCKED = "BLOCKED"
    UNAVAILABLE = "UNAVAILABLE"

    @property
    def exit_code(self) -> int:
        """DESIGN.md's table: 0 ready, 1 retryable failure, 3 blocked, 4 unavailable."""
        return _EXIT[self]


_EXIT: Mapping[Decision, int] = {
    Decision.READY: EXIT_OK,
    Decision.FAILED: EXIT_FAILED,
    Decision.BLOCKED: EXIT_BLOCKED,
    Decision.UNAVAILABLE: EXIT_UNAVAILABLE,
}


class _Frozen(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)


class CheckResult(_Frozen):
    """One check of the plan as it ran in the sandbox; full output is in the two blobs."""

    name: str
    exit_code: int | None
    timed_out: bool
    signal: int | None
    duration_ms: int
    stdout_bytes: int
    stderr_bytes: int
    stdout_blob: str
    stderr_blob: str
    stdout_tail: str
    stderr_tail: str

    @classmethod
    def of(cls, name: str, r: RunResult, stdout_blob: str, stderr_blob: str) -> CheckResult:
        return cls(
            name=name,
            exit_code=r.exit_code,
            timed_out=r.timed_out,
            signal=r.signal,
            duration_ms=int(r.duration_s * 1000),
            stdout_bytes=r.stdout.total,
            stderr_bytes=r.stderr.total,
            stdout_blob=stdout_blob,
            stderr_blob=stderr_blob,
            stdout_tail=r.stdout.display()[-TAIL_CHARS:],
            stderr_tail=r.stderr.display()[-TAIL_CHARS:],
        )

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class SecretFinding(_Frozen):
    """A scanner `Finding` as the gate judged it: `allowed` by the base policy or not.
    A rule, a place and a fingerprint; never the secret."""

    scanner: str
    rule: str
    file: str
    line: int
    fingerprint: str
    preview: str
    allowed: bool
    end_line: int | None

    @classmethod
    def of(cls, f: Finding) -> SecretFinding:
        """The persisted, strict copy of a finding `scan_with_policy` marked."""
        return cls.model_validate(f.to_json())


class ProtectedChange(_Frozen):
    """A change to a protected path, and the pattern it falls under."""

    path: str
    status: str
    pattern: str

    @classmethod
    def of(cls, f: FileChange, pattern: str) -> ProtectedChange:
        return cls(path=f.path, status=f.status, pattern=pattern)


class TestIssue(_Frozen):
    """One way the candidate weakened what verifies it: its class (as `[verify] allow`
    names them), where, and what changed; `accepted` when the base's policy allows the
    class or a human acknowledged this verdict's issues at a terminal."""

    __test__: ClassVar[bool] = False  # a model, not a pytest test class

    cls: str
    file: str | None
    test: str | None
    what: str
    accepted: str | None = None  # "policy" | "acknowledged"

    @property
    def key(self) -> tuple[str, str | None, str | None, str]:
        return (self.cls, self.file, self.test, self.what)

    def reason(self) -> str:
        where = " ".join(x for x in (self.file, self.test and f"`{self.test}`") if x)
        return f"tests weakened ({self.cls}): {where}: {self.what}" if where else (
            f"tests weakened ({self.cls}): {self.what}")  # fmt: skip


class TestCounts(_Frozen):
    """A reporting check's tests per outcome, on the base and on the candidate."""

    __test__: ClassVar[bool] = False  # a model, not a pytest test class

    check: str
    report: str
    base: dict[str, int] | None
    candidate: dict[str, int] | None


class TestsJudged(_Frozen):
    """What the gate compared of the tests: the inventories (base and candidate, per
    reporting check), the static reading of the change, and the base's tests run against
    the candidate's code. Lists are cut at MAX_TEST_LIST (`truncated`)."""

    __test__: ClassVar[bool] = False  # a model, not a pytest test class

    not_inventoried: tuple[str, ...] = ()
    counts: tuple[TestCounts, ...] = ()
    baseline_seq: int | None = None
    baseline_cached: bool | None = None
    removed: tuple[str, ...] = ()
    disabled: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    moved: tuple[tuple[str, str], ...] = ()
    changed_to_pass: tuple[str, ...] = ()
    trusted_run: tuple[str, ...] = ()  # base test files run against the candidate's code
    issues: tuple[TestIssue, ...] = ()
    acknowledged: int | None = None  # the `result.ack` entry used
    truncated: bool = False


class RunsLaterChange(_Frozen):
    """A change that runs later on a developer's machine, outside every sandbox."""

    path: str
    kind: str
    what: str
    automatic: bool
    accepted: bool = False  # `[verify] allow_runs_later` names its kind


class ScannerUsed(_Frozen):
    name: str
    version: str
    digest: str | None

    @classmethod
    def of(cls, info: ScannerInfo) -> ScannerUsed:
        return cls(name=info.name, version=info.version, digest=info.digest)


class BranchDelivery(_Frozen):
    branch: str
    action: str  # created | fast-forwarded | unchanged
    commit: str
    previous: str | None = None  # `from` in the JSON, for a fast-forward

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"branch": self.branch, "action": self.action}
        if self.previous is not None:
            out["from"] = self.previous
        return {**out, "commit": self.commit}


class PushDelivery(_Frozen):
    remote: str
    branch: str


class ProvenanceDelivery(_Frozen):
    """The commit's provenance attestation, in its note under `ref`, pushed beside the branch."""

    ref: str
    pushed: bool


class Delivery(_Frozen):
    """What was delivered after READY_FOR_HUMAN, only what was asked for."""

    branch: BranchDelivery
    push: PushDelivery | None = None
    draft_pr: str | None = None
    provenance: ProvenanceDelivery | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"branch": self.branch.to_json()}
        if self.push is not None:
            out["push"] = self.push.model_dump(mode="json")
        if self.provenance is not None:
            out["provenance"] = self.provenance.model_dump(mode="json")
        if self.draft_pr is not None:
            out["draft_pr"] = self.draft_pr
        return out


class Verdict(_Frozen):
    """The gate's decision on one candidate, and the evidence entry that records it."""

    decision: Decision
    reasons: tuple[str, ...]
    commit: str
    base: str
    evidence_seq: int
    checks: tuple[CheckResult, ...] = ()
    findings: tuple[SecretFinding, ...] = ()
    protected_changes: tuple[ProtectedChange, ...] = ()
    delivered: Delivery | None = None
    timings_ms: Mapping[str, int] = {}
    toolchains: tuple[ToolchainUsed, ...] = ()
    tests: TestsJudged | None = None
    runs_later: tuple[RunsLaterChange, ...] = ()
    # The range judged and the trusted mark whose policy judged it (absent: not recorded).
    judged: Mapping[str, Any] | None = None

    @property
    def exit_code(self) -> int:
        return self.decision.exit_code

    def to_json(self) -> dict[str, Any]:
        return {
            "decision": self.decision.value,
            "reasons": list(self.reasons),
            "commit": self.commit,
            "base": self.base,
            "evidence_seq": self.evidence_seq,
            "checks": [c.model_dump(mode="json") for c in self.checks],
            "findings": [f.model_dump(mode="json") for f in self.findings],
            "protected_changes": [p.model_dump(mode="json") for p in self.protected_changes],
            "delivered": None if self.delivered is None else self.delivered.to_json(),
            "timings_ms": dict(self.timings_ms),
            # Only when the plan uses toolchains: a verdict without them keeps its shape.
            **({"toolchains": [t.model_dump(mode="json") for t in self.toolchains]}
               if self.toolchains else {}),
            # Only when the gate compared tests or found changes that run later: a verdict
            # without either keeps the shape it had.
            **({"tests": self.tests.model_dump(mode="json")} if self.tests is not None else {}),
            **({"runs_later": [r.model_dump(mode="json") for r in self.runs_later]}
               if self.runs_later else {}),
            **({"judged": dict(self.judged)} if self.judged is not None else {}),
        }  # fmt: skip
