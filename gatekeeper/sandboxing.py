"""The sandbox as the gates use it: profile from policy, probe before use, run on a scratch copy.

Fail closed: no bwrap, a bwrap too old, or a probe that fails raises Unavailable
(exit 4) before anything from the repository runs. Nothing here can run a
command outside the sandbox.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evidence import state_root
from policy import LoadedPolicy
from sandbox import Bwrap, Profile, RunResult, SandboxUnavailable, check_profile, find_bwrap, probe
from sandbox import run as sandbox_exec

from .errors import Unavailable, UsageError
from .git import Repo, open_repo, read_policy_at, resolve_commit
from .scratch import copy_commit


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


def ready(repo: Repo, profile: Profile) -> Bwrap:
    """Find bwrap and probe this profile for real; Unavailable unless it holds."""
    try:
        bw = find_bwrap()
    except SandboxUnavailable as exc:
        raise Unavailable(f"sandbox unavailable: {exc}") from None
    result = probe(profile, bw, hidden_paths(repo, profile))
    if not result.ok:
        raise Unavailable(f"sandbox probe failed: {'; '.join(result.failures)}")
    return bw


def run_in_scratch(
    repo: Repo, sha: str, profile: Profile, bw: Bwrap, cmd: Sequence[str]
) -> RunResult:
    scratch = copy_commit(repo.top, sha)
    try:
        return sandbox_exec(profile, scratch, cmd, bw=bw)
    finally:
        _remove(scratch)


def _remove(path: Path) -> None:
    # The sandbox uid may own the files now; as root rmtree still removes them.
    shutil.rmtree(path, ignore_errors=True)


def result_json(r: RunResult) -> dict[str, Any]:
    return {
        "exit_code": r.exit_code,
        "timed_out": r.timed_out,
        "signal": r.signal,
        "duration_s": r.duration_s,
        "stdout": r.stdout.display(),
        "stderr": r.stderr.display(),
        "stdout_bytes": r.stdout.total,
        "stderr_bytes": r.stderr.total,
        "profile_digest": r.profile_digest,
    }


def sandbox_run(repo_dir: Path, cmd: Sequence[str], timeout_s: int | None) -> dict[str, Any]:
    """`oms sandbox run`: CMD in the check profile on a scratch copy of HEAD."""
    if not cmd:
        raise UsageError("no command given; use: oms sandbox run --repo DIR -- CMD…")
    repo = open_repo(repo_dir)
    sha = resolve_commit(repo.top, "HEAD")
    loaded = read_policy_at(repo.top, sha)
    profile = profile_for(repo, loaded, timeout_s)
    bw = ready(repo, profile)
    result = run_in_scratch(repo, sha, profile, bw, cmd)
    return {"commit": sha, "policy_digest": loaded.digest, **result_json(result)}
