"""One check of the plan run in the sandbox with its test report read back.

The same run serves the candidate, the base (its baseline) and the base's tests placed
over the candidate's code: the argv is the base's, shaped only by the runner's own
reporting flags (`inventory.shape_argv`), and the report is read from the scratch copy
before it is removed, as the candidate's data (`inventory.read_report`). A check
without `report` runs exactly as before and is not inventoried.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from gatekeeper.gates import sandboxed as sandboxing
from gatekeeper.gates.result.inventory import (
    REPORT_DIR,
    REPORTER_PATH,
    ReportError,
    ReportSpec,
    TestCase,
    narrow_argv,
    read_report,
    shape_argv,
)
from gatekeeper.gates.result.state import GateState
from gatekeeper.gates.toolchain.bind import with_toolchain
from gatekeeper.repo.scratch import clear_path, overlay
from policy import Check
from sandbox import Profile, RunResult
from sandbox.profile import WORKDIR

REPORTER_ROOT = "/opt/oms/reporters"


@dataclass(frozen=True)
class ReportedRun:
    """A check's run and what its report said: `cases` None when it declares no report,
    `error` (one line) when it declared one that could not be read."""

    result: RunResult
    cases: tuple[TestCase, ...] | None
    error: str | None = None


@cache
def reporter_bind() -> tuple[str, str]:
    """(host path, path inside) of oms' unittest reporter: the inside path names the
    module's digest, so the profile digest counts its content."""
    digest = hashlib.sha256(REPORTER_PATH.read_bytes()).hexdigest()[:16]
    return str(REPORTER_PATH), f"{REPORTER_ROOT}/{digest}/{REPORTER_PATH.name}"


def with_reporter(profile: Profile, checks: Sequence[Check]) -> Profile:
    """`profile` with the reporter bound read-only when a check reports through it."""
    if not any(c.report == "unittest" for c in checks):
        return profile
    bind = reporter_bind()
    if bind in profile.ro_paths:
        return profile
    return replace(profile, ro_paths=(*profile.ro_paths, bind))


def check_profile(s: GateState, check: Check) -> tuple[Profile, tuple[tuple[str, str], ...]]:
    """The sandbox profile one check runs in (its toolchain, the reporter) and its links."""
    prof = sandboxing.profile_for(s.repo, s.loaded, timeout_s=check.timeout_s)
    tool = (s.toolchains or {}).get(check.toolchain or "")
    links: tuple[tuple[str, str], ...] = ()
    if tool is not None:
        prof, links = with_toolchain(prof, tool), tool.links
    return with_reporter(prof, [check]), links


def run_reported(
    s: GateState,
    check: Check,
    sha: str,
    *,
    placed: Sequence[tuple[str, bytes]] = (),
    only: Sequence[str] = (),
    tree_paths: Sequence[str] = (),
) -> ReportedRun:
    """`check` on a copy of `sha` (with `placed` files put over it), its report read.
    `only`: the test files to run (the argv narrowed to them where the runner allows)."""
    assert s.bwrap is not None  # SandboxReady found it
    prof, links = check_profile(s, check)
    if check.report is None:
        r = sandboxing.run_in_scratch(s.repo, sha, prof, s.bwrap, check.cmd, s.budget, links,
                                      prepare=_placer(placed))  # fmt: skip
        return ReportedRun(r, None)
    spec = ReportSpec.parse(check.report)
    rel = spec.path or f"{REPORT_DIR}-{secrets.token_hex(8)}/report.xml"
    argv = shape_argv(spec, check.cmd, report_inside=f"{WORKDIR}/{rel}",
                      reporter_inside=reporter_bind()[1])  # fmt: skip
    if only:
        argv = narrow_argv(spec, argv, only, tree_paths=set(tree_paths))
    read: list[tuple[TestCase, ...] | str] = []

    def prepare(root: Path) -> None:
        _placer(placed)(root)
        clear_path(root, rel)  # a report the candidate committed is never read as this run's

    def collect(root: Path) -> None:
        read.append(_read(spec, root, rel, b""))

    # `go test -json` reports on standard output (the part the output cap kept).
    on_stdout = spec.kind == "go-test"
    after = None if on_stdout else collect
    r = sandboxing.run_in_scratch(s.repo, sha, prof, s.bwrap, argv, s.budget, links,
                                  prepare=prepare, collect=after)  # fmt: skip
    if on_stdout:
        read.append(_read(spec, None, None, r.stdout.kept))
    got = read[0] if read else "the check timed out before it wrote its report"
    if isinstance(got, str):
        return ReportedRun(r, None, got)
    return ReportedRun(r, got)


def _read(spec: ReportSpec, root: Path | None, rel: str | None,
          stdout: bytes) -> tuple[TestCase, ...] | str:  # fmt: skip
    """The report's cases, or why it could not be read (one line)."""
    try:
        return read_report(spec, root or Path("/nonexistent"), report_rel=rel, stdout=stdout)
    except ReportError as exc:
        return str(exc)


def _placer(placed: Sequence[tuple[str, bytes]]) -> Callable[[Path], None]:
    def place(root: Path) -> None:
        if placed:
            overlay(root, placed)

    return place
