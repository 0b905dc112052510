"""What a toolchain is: its inputs at the trusted base, its runtime, and the digest of both.

The toolchain digest covers the kind, the lock's path, the SHA-256 of every input file as
committed at the policy commit (the default branch's tip; never the candidate or the
worktree), the runtime's real path and version, the build options and the machine. A
change to any of them is another toolchain: the old one is stale, never reused.
"""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Mapping
from dataclasses import dataclass

import rfc8785

from gatekeeper.errors import ConfigError
from gatekeeper.gates.toolchain.build import Runtime, inputs_of, runtime_of
from gatekeeper.repo.git import Repo
from gatekeeper.repo.policy import read_committed_file
from policy import PolicyError, Toolchain

MAX_INPUT_BYTES = 64 << 20
ID_VERSION = 1


@dataclass(frozen=True)
class Spec:
    """One toolchain of the base's policy, resolved on this machine."""

    toolchain: Toolchain
    policy_commit: str
    files: Mapping[str, bytes]  # repo-relative path -> bytes at the policy commit
    inputs: Mapping[str, str]  # repo-relative path -> "sha256:<hex>"
    runtime: Runtime
    id: str  # "sha256:<hex>"

    @property
    def name(self) -> str:
        return self.toolchain.name


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def read_inputs(repo: Repo, commit: str, tc: Toolchain) -> dict[str, bytes]:
    """The toolchain's input files as committed at `commit` (ConfigError when one is
    missing, too large or not a regular file)."""
    files: dict[str, bytes] = {}
    for path in inputs_of(tc):
        try:
            data = read_committed_file(repo, commit, path)
        except PolicyError as exc:
            raise ConfigError(f"toolchain {tc.name}: {exc}") from None
        if data is None:
            raise ConfigError(
                f"toolchain {tc.name}: {path} does not exist at {commit[:12]} "
                "(the default branch's tip, where toolchains are built from)"
            )
        if len(data) > MAX_INPUT_BYTES:
            raise ConfigError(
                f"toolchain {tc.name}: {path} is larger than {MAX_INPUT_BYTES >> 20} MB"
            )
        files[path] = data
    return files


def toolchain_id(tc: Toolchain, inputs: Mapping[str, str], runtime: Runtime) -> str:
    doc = {
        "v": ID_VERSION,
        "kind": tc.kind,
        "lock": tc.lock,
        "inputs": dict(inputs),
        "runtime": {"path": runtime.path, "version": runtime.version, "prefix": runtime.prefix},
        "allow_build": tc.allow_build,
        "cmd": tc.cmd,
        "machine": platform.machine(),
    }
    return _sha256(rfc8785.dumps(doc))


def spec_of(repo: Repo, commit: str, tc: Toolchain) -> Spec:
    """The toolchain `tc` of the policy at `commit`, on this machine."""
    files = read_inputs(repo, commit, tc)
    inputs = {path: _sha256(data) for path, data in files.items()}
    runtime = runtime_of(tc)
    return Spec(tc, commit, files, inputs, runtime, toolchain_id(tc, inputs, runtime))
