"""The `command` toolchain: the policy's own build command, run in the check sandbox.

Never on the host: the same profile, probe and limits as a check (no network, no host
environment), with one difference: the destination is bound read-write at its own
absolute path and named by OMS_TOOLCHAIN_OUT. Its working directory is a scratch copy
holding the base's lock at its basename. (As root the sandbox runner hands the
destination to the sandbox uid for the run and takes it back afterwards.)
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING

from gatekeeper.gates.sandboxed import profile_for, ready
from sandbox import Profile, ProfileError, SandboxUnavailable
from sandbox import run as sandbox_run
from sandbox.profile import resolve_rw_paths

from .kinds import basename
from .tools import last_line
from .tree import ToolchainUnavailable

if TYPE_CHECKING:
    from .build import BuildRequest

OUT_ENV = "OMS_TOOLCHAIN_OUT"


def build_profile(req: BuildRequest) -> Profile:
    """The base's check profile, plus the destination read-write and OMS_TOOLCHAIN_OUT."""
    try:
        profile = profile_for(req.repo, req.loaded)
        never = [req.repo.top, req.repo.common_dir]
        rw = resolve_rw_paths([str(req.dest)], os.environ, never)
    except ProfileError as exc:
        raise ToolchainUnavailable(f"toolchain {req.toolchain.name}: {exc}") from None
    env = tuple(sorted((*profile.env, (OUT_ENV, str(req.dest)))))
    return replace(profile, rw_paths=rw, env=env)


def build_command(req: BuildRequest) -> None:
    tc, name = req.toolchain, req.toolchain.name
    if not tc.cmd:
        raise ToolchainUnavailable(f"toolchain {name}: kind command needs `cmd`")
    scratch = req.work / "scratch"
    scratch.mkdir(mode=0o755)
    (scratch / basename(tc.lock)).write_bytes(req.files[tc.lock])
    profile = build_profile(req)
    bw = ready(req.repo, profile)
    req.progress(f"toolchain {name}: running its build command in the check sandbox")
    try:
        result = sandbox_run(profile, scratch, tc.cmd, bw=bw)
    except SandboxUnavailable as exc:
        raise ToolchainUnavailable(f"toolchain {name}: {exc}") from None
    if result.timed_out:
        raise ToolchainUnavailable(
            f"toolchain {name}: build command timed out after {profile.limits.wall_s} s"
        )
    if result.exit_code != 0:
        text = result.stderr.display() or result.stdout.display()
        status = f"exit {result.exit_code}" if result.exit_code is not None else "killed"
        raise ToolchainUnavailable(
            f"toolchain {name}: build command failed ({status}): {last_line(text)}"
        )
