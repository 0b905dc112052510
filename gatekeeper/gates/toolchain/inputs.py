"""Whether a policy's toolchains could be prepared: each input file (the lock and its
companions) on the default branch (or, for a policy not committed yet, in the worktree, to
be committed with it), and a python-venv lock that pins hashes. What `oms policy check`
and `oms doctor` say before `oms toolchain prepare` would refuse; one line each, with the
command that makes the file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gatekeeper.repo.git import Repo
from gatekeeper.repo.policy import read_committed_file
from policy import Policy, PolicyError, Toolchain

from .build import inputs_of

HASH_PIN = b"--hash=sha256:"
_MAKE = {"python-venv": "make it with `oms toolchain lock`", "uv": "make it with `uv lock`",
         "node-npm": "make it with `npm install --package-lock-only`"}  # fmt: skip


@dataclass(frozen=True)
class InputProblem:
    index: int  # the toolchain's place in `[[toolchains]]`
    toolchain: str
    path: str
    message: str  # one line, with its remedy


def _remedy(tc: Toolchain, path: str) -> str:
    return _MAKE.get(tc.kind, "add it") if path == tc.lock else "add it"


def _in_worktree(top: Path, path: str) -> bytes | None:
    p = top / path
    if p.is_symlink() or not p.is_file():
        return None
    try:
        return p.read_bytes()
    except OSError:
        return None


def _one(repo: Repo, branch: str, commit: str | None, tc: Toolchain, path: str,
         worktree: bool) -> str | None:  # fmt: skip
    try:
        committed = read_committed_file(repo, commit, path) if commit else None
    except PolicyError as exc:
        return str(exc)
    here = _in_worktree(repo.top, path) if worktree else None
    if committed is None and here is None:
        where = f"in the worktree nor on {branch}" if worktree else f"on {branch}"
        return f"{path} is missing ({'neither ' if worktree else ''}{where}); " + _remedy(tc, path)
    data = committed if committed is not None else here
    unhashed = data is not None and _pins(data) and HASH_PIN not in data
    if tc.kind == "python-venv" and path == tc.lock and unhashed:
        return (f"{path} pins no --hash=sha256 (python-venv installs hash-checked only); "
                "make one with `oms toolchain lock`")  # fmt: skip
    return None


def _pins(data: bytes | None) -> bool:
    """Whether a requirements lock names anything (a line that is not blank or a comment):
    a lock of comments alone pins nothing, and needs no hash."""
    lines = (line.strip() for line in (data or b"").splitlines())
    return any(line and not line.startswith(b"#") for line in lines)


def input_problems(repo: Repo, policy: Policy, branch: str, commit: str | None,
                   worktree: bool) -> list[InputProblem]:  # fmt: skip
    """Every toolchain input missing at `commit` (the default branch's tip; None when there
    is none yet) — and from the worktree too, when `worktree` — or a lock without hashes."""
    branch = branch.removeprefix("refs/heads/")
    found = []
    for i, tc in enumerate(policy.toolchains):
        for path in inputs_of(tc):
            message = _one(repo, branch, commit, tc, path, worktree)
            if message is not None:
                found.append(InputProblem(i, tc.name, path, f"toolchain {tc.name}: {message}"))
    return found
