"""What one result gate run knows as its stages go: its inputs, then what each stage found."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from evidence import EvidenceStore
from gatekeeper.gates.result.verdict import (
    CheckResult,
    ProtectedChange,
    RunsLaterChange,
    ScannerUsed,
    SecretFinding,
    TestsJudged,
)
from gatekeeper.gates.result.versions import FileVersions
from gatekeeper.gates.toolchain.bind import BoundToolchain
from gatekeeper.gates.toolchain.prepare import Progress
from gatekeeper.repo.change import Change
from gatekeeper.repo.git import Repo
from policy import LoadedPolicy
from sandbox import Bwrap, Deadline, Profile

if TYPE_CHECKING:  # reported.py runs checks with this state: its types only
    from gatekeeper.gates.result.reported import ReportedRun


class Clock:
    """Wall time per gate stage, for the JSON output and the benchmark."""

    def __init__(self) -> None:
        self.laps: dict[str, int] = {}
        self._t = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.laps[stage] = self.laps.get(stage, 0) + int((now - self._t) * 1000)
        self._t = now


@dataclass
class GateState:
    """What one gate run knows: its inputs, then what each stage found (None: not reached)."""

    repo: Repo
    store: EvidenceStore
    loaded: LoadedPolicy
    base: str
    candidate: str
    budget: Deadline
    clock: Clock = field(default_factory=Clock)
    reasons: list[str] = field(default_factory=list)
    checks: list[CheckResult] = field(default_factory=list)
    findings: list[SecretFinding] = field(default_factory=list)
    protected: tuple[ProtectedChange, ...] | None = None
    change: Change | None = None
    scanners: tuple[ScannerUsed, ...] | None = None
    profile: Profile | None = None
    bwrap: Bwrap | None = None
    policy_commit: str = ""
    progress: Progress | None = None
    toolchains: dict[str, BoundToolchain] | None = None
    runs_later: tuple[RunsLaterChange, ...] | None = None
    versions: tuple[FileVersions, ...] | None = None  # both sides of each changed file
    tests: TestsJudged | None = None
    # The reporting checks' runs on the candidate, by check name, for the tests stage.
    reported: dict[str, ReportedRun] = field(default_factory=dict)
