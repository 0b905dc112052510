"""The result gate's evidence payloads: `result.start` before anything runs, `result` after.

Exactly the keys the entries have always had (plus the payload version `v`). A key that
belongs to a stage the gate never reached (a blocked candidate is never probed) is
absent from the entry, not null: `profile_digest` absent means the sandbox step was
never reached.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from evidence import Payload
from gatekeeper.gates.result.verdict import (
    CheckResult,
    Decision,
    ProtectedChange,
    RunsLaterChange,
    ScannerUsed,
    SecretFinding,
    TestsJudged,
)
from gatekeeper.gates.toolchain.bind import ToolchainUsed


class _Judged(Payload):
    """What a gate run judges, and by which policy and plan: the first keys of both entries."""

    repo_id: str
    base: str
    policy_commit: str
    candidate: str
    tree: str
    policy_digest: str
    plan_digest: str
    ticket: str | None
    attempt: int | None


class ResultStart(_Judged):
    """What the gate judges: written before anything runs."""

    KIND: ClassVar[str] = "result.start"


class VsaPolicy(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    uri: str
    digest: dict[str, str]


class VsaVerifier(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    id: str


class Vsa(BaseModel):
    """A SLSA verification summary v1 predicate (its field names are the spec's)."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    verifier: VsaVerifier
    timeVerified: str
    resourceUri: str
    policy: VsaPolicy
    verificationResult: str  # PASSED | FAILED
    verifiedLevels: list[str]


# Recorded only once the stage that finds them has run.
_STAGE_KEYS = (
    "protected", "changed_files", "commits", "scanners", "profile_digest", "toolchains",
    "runs_later", "tests",
)  # fmt: skip


class ResultRecord(_Judged):
    """The gate's one decision after a `result.start` entry (`start_seq` names it)."""

    KIND: ClassVar[str] = "result"
    start_seq: int
    protected: tuple[ProtectedChange, ...] | None = None
    changed_files: int | None = None
    commits: int | None = None
    scanners: tuple[ScannerUsed, ...] | None = None
    profile_digest: str | None = None
    toolchains: tuple[ToolchainUsed, ...] | None = None  # the trees the checks ran with
    decision: Decision
    reasons: tuple[str, ...]
    checks: tuple[CheckResult, ...]
    findings: tuple[SecretFinding, ...]
    vsa: Vsa
    # Only in entries written since the gate compares tests (older entries audit as they were).
    runs_later: tuple[RunsLaterChange, ...] | None = None
    tests: TestsJudged | None = None

    def data(self) -> dict[str, Any]:
        unset = {k for k in _STAGE_KEYS if getattr(self, k) is None}
        return self.model_dump(mode="json", exclude=unset)
