"""The sandbox as the gates use it: profile from policy, probe before use, run on a scratch copy.

Fail closed: no bwrap, a bwrap too old, or a probe that fails raises Unavailable
(exit 4) before anything from the repository runs. Nothing here can run a
command outside the sandbox. A command the sandbox cannot start (missing inside,
a toolchain symlink into a hidden path) is Unavailable with its cause, never a
failed check. One Deadline bounds the copy, the scanners and every check.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from evidence import state_root
from gatekeeper.errors import Unavailable, UsageError
from gatekeeper.repo.git import Repo, open_repo
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import resolve_commit
from gatekeeper.repo.scratch import add_links, copy_commit, remove_tree, sweep_stale
from policy import LoadedPolicy
from sandbox import (
    Bwrap,
    Deadline,
    Profile,
    RunResult,
    SandboxUnavailable,
    check_profile,
    find_bwrap,
)
from sandbox import cgroup as sandbox_cgroup
from sandbox import run as sandbox_exec
from sandbox.probe import probe
from sandbox.profile import SYSTEM_DIRS

# Time a gate may spend besides the scanners and the checks: copies, probe, evidence.
GATE_SLACK_S = 60
COPY_ALLOWANCE_S = 30  # per check, for its scratch copy


def hidden_paths(repo: Repo, profile: Profile) -> list[str]:
    """Host paths the probe must find absent inside (parents of toolchain binds excepted)."""
    home = os.environ.get("HOME") or os.path.expanduser("~")
    wanted = [str(state_root()), home, os.path.join(home, ".ssh"), "/root", "/run",
              "/etc/shadow", str(repo.top), str(repo.common_dir)]  # fmt: skip
    if os.environ.get("XDG_RUNTIME_DIR"):
        wanted.append(os.environ["XDG_RUNTIME_DIR"])
    inside = [p for _, p in profile.ro_paths]
    return [
        w for w in wanted if not any(b == w or b.startswith(w.rstrip("/") + "/") for b in inside)
    ]


def profile_for(repo: Repo, loaded: LoadedPolicy, timeout_s: int | None = None) -> Profile:
    return check_profile(
        loaded.policy.sandbox,
        never=[state_root(), repo.top, repo.common_dir],
        timeout_s=timeout_s,
    )


def gate_deadline(loaded: LoadedPolicy) -> Deadline:
    """The one budget of a result gate: scanners, every check, and their copies."""
    pol = loaded.policy
    # A check with a report may run three times: on the candidate, on the base (a cold
    # baseline) and with the base's tests over the candidate's code.
    runs = [3 if c.report is not None else 1 for c in pol.checks]
    checks = sum(
        n * min(c.timeout_s, pol.sandbox.wall_s) for n, c in zip(runs, pol.checks, strict=True)
    )
    extra = GATE_SLACK_S + COPY_ALLOWANCE_S * sum(runs)
    return Deadline.after(pol.scanners.timeout_s + checks + extra)


def within(deadline: Deadline, timeout_s: int, what: str) -> int:
    """`min(timeout_s, remaining)`; Unavailable when the budget has run out."""
    try:
        return deadline.clamp(timeout_s, what)
    except SandboxUnavailable as exc:
        raise Unavailable(str(exc)) from None


def ready(repo: Repo, profile: Profile) -> Bwrap:
    """Find bwrap and probe this profile for real; Unavailable unless it holds."""
    try:
        bw = find_bwrap()
    except SandboxUnavailable as exc:
        raise Unavailable(f"sandbox unavailable: {exc}") from None
    _sweep()
    result = probe(profile, bw, hidden_paths(repo, profile))
    if not result.ok:
        raise Unavailable(f"sandbox probe failed: {'; '.join(result.failures)}")
    return bw


def _sweep() -> None:
    """What oms processes that died left behind: scratch copies, run dirs, cgroups."""
    sweep_stale()
    sandbox_cgroup.sweep_stale()


def run_in_scratch(
    repo: Repo,
    sha: str,
    profile: Profile,
    bw: Bwrap,
    cmd: Sequence[str],
    deadline: Deadline | None = None,
    links: Sequence[tuple[str, str]] = (),
    prepare: Callable[[Path], None] | None = None,
    collect: Callable[[Path], None] | None = None,
) -> RunResult:
    """`cmd` on a fresh copy of `sha`, within `deadline` (default: the profile's wall time).
    `links`: symlinks a toolchain needs in the copy (see `scratch.add_links`). `prepare`
    is called with the copy before the run, `collect` after it (a report to read), both
    before the copy is removed.

    Unavailable if the budget runs out (during the copy or the check) or the sandbox
    cannot start the command; the copy is removed, or ScratchCleanupError says why not.
    """
    deadline = deadline or Deadline.after(profile.limits.wall_s + COPY_ALLOWANCE_S)
    try:
        scratch = copy_commit(repo.top, sha, deadline=deadline)
    except SandboxUnavailable as exc:
        raise Unavailable(str(exc)) from None
    try:
        add_links(scratch, links)
        if prepare is not None:
            prepare(scratch)
        wall = within(deadline, profile.limits.wall_s, "before a check could start")
        clamped = wall < profile.limits.wall_s
        if clamped:
            profile = replace(profile, limits=replace(profile.limits, wall_s=wall))
        result = sandbox_exec(profile, scratch, cmd, bw=bw)
        if collect is not None and not (result.timed_out and clamped):
            collect(scratch)
    except SandboxUnavailable as exc:
        raise Unavailable(f"{exc}{_host_hint(profile, cmd)}") from None
    finally:
        remove_tree(scratch)
    if result.timed_out and clamped:
        raise Unavailable(str(deadline.expired(f"during a check ({wall} s were left)")))
    return result


def _host_hint(profile: Profile, cmd: Sequence[str]) -> str:
    """Where the command leads on the host when that place is not bound inside."""
    if not cmd or not os.path.isabs(cmd[0]):
        return ""
    real = os.path.realpath(cmd[0])
    if real == os.path.normpath(cmd[0]):
        return ""
    bound = [*SYSTEM_DIRS, *(p for pair in profile.ro_paths for p in pair)]
    if any(real == b or real.startswith(b.rstrip("/") + "/") for b in bound):
        return ""
    return f" ({cmd[0]} is a symlink to {real}, which is not bound into the sandbox)"


class SandboxRun(BaseModel):
    """`oms sandbox run`'s result: the command's own exit code and bounded output."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    commit: str
    policy_digest: str
    exit_code: int | None  # None when killed at the deadline
    timed_out: bool
    signal: int | None
    duration_s: float
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    profile_digest: str

    @classmethod
    def of(cls, commit: str, policy_digest: str, r: RunResult) -> SandboxRun:
        return cls(commit=commit, policy_digest=policy_digest, exit_code=r.exit_code,
                   timed_out=r.timed_out, signal=r.signal, duration_s=r.duration_s,
                   stdout=r.stdout.display(), stderr=r.stderr.display(),
                   stdout_bytes=r.stdout.total, stderr_bytes=r.stderr.total,
                   profile_digest=r.profile_digest)  # fmt: skip

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def sandbox_run(repo_dir: Path, cmd: Sequence[str], timeout_s: int | None) -> SandboxRun:
    """`oms sandbox run`: CMD in the check profile on a scratch copy of HEAD."""
    if not cmd:
        raise UsageError("no command given; use: oms sandbox run --repo DIR -- CMD…")
    repo = open_repo(repo_dir)
    sha = resolve_commit(repo.top, "HEAD")
    loaded = read_policy_at(repo.top, sha)
    profile = profile_for(repo, loaded, timeout_s)
    bw = ready(repo, profile)
    deadline = Deadline.after(profile.limits.wall_s + COPY_ALLOWANCE_S)
    result = run_in_scratch(repo, sha, profile, bw, cmd, deadline)
    return SandboxRun.of(sha, loaded.digest, result)
