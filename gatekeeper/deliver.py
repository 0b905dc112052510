"""Delivery of a READY_FOR_HUMAN commit, only when asked: a local branch, a push, a draft PR.

Never forces, never merges, tags or releases. A branch that points elsewhere
(not an ancestor of the verified commit) is refused; so is the checked-out
branch, whose worktree would silently fall out of step.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from .errors import Blocked, Unavailable, UsageError
from .git import Repo, git, git_argv, git_env


def _branch_ok(repo: Repo, name: str) -> None:
    if not name or name.startswith("-"):
        raise UsageError(f"not a valid branch name: {name[:80]!r}")
    proc = subprocess.run(git_argv(repo.top, "check-ref-format", "--branch", name),
                          capture_output=True, env=git_env(), check=False)  # fmt: skip
    if proc.returncode != 0:
        raise UsageError(f"not a valid branch name: {name[:80]!r}")


def deliver_branch(repo: Repo, sha: str, name: str) -> dict[str, Any]:
    _branch_ok(repo, name)
    ref = f"refs/heads/{name}"
    current = git(repo.top, "symbolic-ref", "-q", "HEAD", check=False).strip().decode()
    if current == ref:
        raise Blocked(f"branch {name} is checked out; oms will not move it under the worktree")
    old = git(repo.top, "rev-parse", "--verify", "-q", ref, check=False).strip().decode()
    if old == sha:
        return {"branch": name, "action": "unchanged", "commit": sha}
    if old:
        ancestor = subprocess.run(
            git_argv(repo.top, "merge-base", "--is-ancestor", old, sha),
            capture_output=True, env=git_env(), check=False,
        )  # fmt: skip
        if ancestor.returncode != 0:
            raise Blocked(f"branch {name} points at {old[:12]}, which {sha[:12]} does not contain; "
                          "oms never forces a branch")  # fmt: skip
        git(repo.top, "update-ref", "-m", "oms: fast-forward to verified commit", ref, sha, old)
        return {"branch": name, "action": "fast-forwarded", "from": old, "commit": sha}
    git(repo.top, "update-ref", "-m", "oms: verified commit", ref, sha, "0" * 40)
    return {"branch": name, "action": "created", "commit": sha}


def deliver(
    repo: Repo, sha: str, branch: str | None, remote: str | None, draft_pr: bool
) -> dict[str, Any]:
    if (remote or draft_pr) and not branch:
        raise UsageError("--push and --draft-pr need --deliver-branch NAME")
    assert branch is not None
    out: dict[str, Any] = {"branch": deliver_branch(repo, sha, branch)}
    if remote:
        if remote.startswith("-"):
            raise UsageError(f"not a valid remote: {remote[:80]!r}")
        # No '+': a non-fast-forward is refused by git itself.
        # oms turns every transport off for its own git calls; this one push is asked for.
        git(repo.top, "-c", "protocol.allow=user", "push", "--no-verify", "--", remote,
            f"{sha}:refs/heads/{branch}")  # fmt: skip
        out["push"] = {"remote": remote, "branch": branch}
    if draft_pr:
        gh = shutil.which("gh")
        if gh is None:
            raise Unavailable("--draft-pr needs the GitHub CLI `gh`, which is not installed")
        proc = subprocess.run(
            [gh, "pr", "create", "--draft", "--head", branch, "--title",
             f"oms: verified {sha[:12]}", "--body", f"READY_FOR_HUMAN by oms for {sha}."],
            cwd=repo.top, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise Unavailable(f"gh pr create failed: {proc.stderr.strip()[:200]}")
        out["draft_pr"] = proc.stdout.strip()
    return out
