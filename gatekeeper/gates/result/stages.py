"""The result gate's stages: small objects with one `run()`, in the order they must hold.

Each stage reads what the ones before it found in the `GateState` and adds its own.
It returns a `Decision` to end the gate, or None to let the next stage run; it refuses
by raising, and the pipeline records that refusal as the gate's one `result` entry.
The checks run only when nothing blocked: a candidate with a secret or a protected
change never reaches the sandbox.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from evidence import state_root
from gatekeeper.gates import sandboxed as sandboxing
from gatekeeper.gates.result import runs_later as runs_later_module
from gatekeeper.gates.result.integrity import judge_tests
from gatekeeper.gates.result.inventory import report_problem
from gatekeeper.gates.result.protected import protected_changes
from gatekeeper.gates.result.reported import run_reported, with_reporter
from gatekeeper.gates.result.state import GateState
from gatekeeper.gates.result.verdict import (
    CheckResult,
    Decision,
    RunsLaterChange,
    ScannerUsed,
    SecretFinding,
)
from gatekeeper.gates.result.versions import read_versions
from gatekeeper.gates.toolchain.bind import (
    BoundToolchain,
    ready_toolchains,
    with_toolchain,
)
from gatekeeper.repo.change import read_change, scan_set
from gatekeeper.repo.git import is_ancestor
from gatekeeper.scan import ScanItem
from gatekeeper.scan.canary import canaries, canaries_in
from gatekeeper.scan.policy import scan_with_policy
from sandbox import Profile

NOTHING_TO_VERIFY = "nothing to verify: the candidate is its base"
AT_MARK = "nothing to verify: {c} is at the trusted mark ({m}); commits after it are judged"
BEFORE_MARK = ("nothing to verify: {c} is already in the default branch's trusted history "
               "(mark {m}); commits after the mark are judged")  # fmt: skip
NOT_RUN = "checks not run: the candidate is blocked"
NO_PLAN = "the base policy has no verification plan ([[checks]] in oms.toml)"


class Stage(Protocol):
    """One step of the gate: a decision ends the gate, None lets the next stage run."""

    def run(self, s: GateState) -> Decision | None: ...


def run_stage(stage: Stage, s: GateState) -> Decision | None:
    """One stage, announced on `s.progress` as it starts and ends (with its wall time) when
    it has a `label`; a refusal it raises ends the gate before the end line."""
    label = getattr(stage, "label", "")
    if not label:
        return stage.run(s)
    say = s.progress or _no_progress
    say(f"{label}: started")
    t = time.perf_counter()
    decision = stage.run(s)
    decided = f", {decision.value}" if decision is not None else ""
    say(f"{label}: done in {time.perf_counter() - t:.1f} s{decided}")
    return decision


class NotItsBase:
    """A candidate that is its own base changes nothing: there is nothing to verify."""

    label = "change"

    def run(self, s: GateState) -> Decision | None:
        if s.candidate == s.base:
            c, m = s.candidate, s.policy_commit
            why = AT_MARK if c == m else BEFORE_MARK if is_ancestor(s.repo, c, m) else None
            s.reasons.append(why.format(c=c[:12], m=m[:12]) if why else NOTHING_TO_VERIFY)
            return Decision.BLOCKED
        return None


class ProtectedPaths:
    """Any change to a protected path blocks (the verdict comes after the scan)."""

    label = "protected paths"

    def run(self, s: GateState) -> Decision | None:
        s.change = read_change(s.repo.top, s.base, s.candidate)
        s.protected = protected_changes(s.change.files, s.loaded.policy.protected.paths)
        s.clock.lap("protected")
        s.reasons.extend(f"protected path changed: {h.path} ({h.status}, {h.pattern})"
                         for h in s.protected)  # fmt: skip
        return None


class Secrets:
    """Both scanners, once each, over everything the candidate would deliver."""

    label = "secrets"

    def run(self, s: GateState) -> Decision | None:
        assert s.change is not None  # ProtectedPaths read it
        scope = scan_set(s.repo.top, s.change)
        s.clock.lap("read_change")
        say = s.progress or _no_progress
        say(f"scan: {len(scope.items)} item(s) with gitleaks and detect-secrets")
        report = scan_with_policy(list(scope.items), s.loaded, s.budget)
        s.clock.lap("scan")
        # the base's path rules, once each finding names every path of its blob
        added = report.only(scope.new_findings).allowing_paths(s.loaded.policy.scanners)
        say(f"scan: {len(added.findings)} finding(s)")
        s.scanners = tuple(ScannerUsed.of(i) for i in report.scanners)
        s.reasons.extend(canary_reasons(scope.items))
        for f in added.findings:
            s.findings.append(SecretFinding.of(f))
            if not f.allowed:
                s.reasons.append(f"secret found: {f.rule} in {f.file}:{f.line} ({f.scanner})")
        if s.reasons:
            s.reasons.append(NOT_RUN)
            return Decision.BLOCKED
        return None


def canary_reasons(items: Sequence[ScanItem]) -> list[str]:
    """A reason per item holding a planted run canary: the agent reached the state root.
    The canary is named by its run, never by its value."""
    planted = canaries()
    if not planted:
        return []
    return [f"canary of agent run {run} found in {item.path}: the agent reached oms' state"
            for item in items for run in canaries_in(_text_of(item), planted)]  # fmt: skip


def _text_of(item: ScanItem) -> str:
    """The item's text as its lines join (a whole text as it is: a change answered from the
    scan-result cache is never split into lines)."""
    return item.text if item.text is not None else "\n".join(t for _, t in item.lines)


class Plan:
    """Without a plan nothing can be verified: a base policy with no checks blocks."""

    label = "plan"

    def run(self, s: GateState) -> Decision | None:
        if not s.loaded.policy.checks:
            s.reasons.append(NO_PLAN)
            return Decision.BLOCKED
        bad = [f"the base policy's check {c.name!r} declares {problem}: fix oms.toml on the "
               "default branch" for c in s.loaded.policy.checks
               if c.report and (problem := report_problem(c.report, c.cmd))]  # fmt: skip
        if bad:
            s.reasons.extend(bad)
            return Decision.BLOCKED
        return None


class Toolchains:
    """Each toolchain the plan names: prepared for the base's inputs, its tree as recorded,
    every path it needs bindable; Unavailable otherwise (nothing runs with a doubtful one)."""

    label = "toolchains"

    def run(self, s: GateState) -> Decision | None:
        assert s.change is not None  # ProtectedPaths read it
        names = [c.toolchain for c in s.loaded.policy.checks if c.toolchain is not None]
        never = [state_root(), s.repo.top, s.repo.common_dir]
        bound = ready_toolchains(s.repo, s.store, s.loaded, s.policy_commit, names, never,
                                 s.progress or _no_progress)  # fmt: skip
        changed = {f.path for f in s.change.files}
        s.toolchains = {
            name: replace(t, used=t.used.model_copy(
                update={"lock_changed": any(p in changed for p in t.inputs)}))
            for name, t in bound.items()
        }  # fmt: skip
        s.clock.lap("toolchains")
        return None


def _no_progress(_line: str) -> None:
    return None


def with_toolchains(profile: Profile, tools: Sequence[BoundToolchain]) -> Profile:
    for tool in tools:
        profile = with_toolchain(profile, tool)
    return profile


class SandboxReady:
    """bwrap found and this very profile probed (every toolchain bound); Unavailable
    otherwise."""

    label = "sandbox probe"

    def run(self, s: GateState) -> Decision | None:
        tools = list((s.toolchains or {}).values())
        s.profile = with_reporter(with_toolchains(sandboxing.profile_for(s.repo, s.loaded), tools),
                                  s.loaded.policy.checks)  # fmt: skip
        s.bwrap = sandboxing.ready(s.repo, s.profile)
        s.clock.lap("probe")
        return None


class RunsLaterStage:
    """Changes that run later on a developer's machine, outside every sandbox, are named;
    those that run without a human action block, unless the base's policy allows their
    kind. The policy may name more paths (`[verify] runs_later`); each of those blocks.
    Not announced on its own: it reads the change as the protected paths stage does."""

    def run(self, s: GateState) -> Decision | None:
        assert s.change is not None  # ProtectedPaths read it
        verify = s.loaded.policy.verify
        s.versions = read_versions(s.repo, s.change.files)
        plan = runs_later_module.plan_targets([c.cmd for c in s.loaded.policy.checks])
        found = runs_later_module.runs_later(s.versions, plan_targets=plan,
                                             extra_globs=verify.runs_later)  # fmt: skip
        s.runs_later = tuple(
            RunsLaterChange(path=r.path, kind=r.kind, what=r.what, automatic=r.automatic,
                            accepted=r.kind in verify.allow_runs_later)
            for r in found)  # fmt: skip
        s.reasons.extend(f"runs later outside the sandbox: {r.path} ({r.kind}: {r.what})"
                         for r in s.runs_later if r.automatic and not r.accepted)  # fmt: skip
        s.clock.lap("runs_later")
        return None


class Checks:
    """The plan from the base, in the sandbox, each on a fresh copy of the candidate tree;
    a check that declares a report has it read back (a report it left unreadable fails)."""

    label = "checks"

    def run(self, s: GateState) -> Decision | None:
        say = s.progress or _no_progress
        for check in s.loaded.policy.checks:
            say(f"check {check.name}: running (time-out {check.timeout_s} s)")
            run = run_reported(s, check, s.candidate)
            r = run.result
            out, err = s.store.blobs.put(r.stdout.kept), s.store.blobs.put(r.stderr.kept)
            s.checks.append(CheckResult.of(check.name, r, out, err))
            status = "timed out" if r.timed_out else f"exit {r.exit_code}"
            say(f"check {check.name}: {status} in {r.duration_s:.1f} s")
            if r.timed_out:
                s.reasons.append(f"check {check.name} timed out after {check.timeout_s} s")
            elif r.exit_code != 0:
                s.reasons.append(f"check {check.name} exited {r.exit_code}")
            elif run.error is not None:
                s.reasons.append(f"check {check.name}: {run.error}")
            s.reported[check.name] = run
        s.clock.lap("checks")
        return Decision.FAILED if s.reasons else None


class Tests:
    """The candidate's checks passed: did it weaken what verified it? (`integrity.py`)"""

    label = "tests"

    def run(self, s: GateState) -> Decision | None:
        s.tests = judge_tests(s, s.versions or ())
        s.clock.lap("tests")
        s.reasons.extend(i.reason() for i in s.tests.issues if i.accepted is None)
        return Decision.FAILED if s.reasons else Decision.READY


STAGES: tuple[Stage, ...] = (
    NotItsBase(), ProtectedPaths(), RunsLaterStage(), Secrets(), Plan(), Toolchains(),
    SandboxReady(), Checks(), Tests(),
)  # fmt: skip
