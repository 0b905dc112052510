"""Delivery of a READY_FOR_HUMAN commit, only when asked: a local branch, a push, a draft PR.

Never forces, never merges, tags or releases. A branch that points elsewhere
(not an ancestor of the verified commit) is refused; so is a branch checked out
in any worktree of the repository, whose files would silently fall out of step.
The branch is written by oms itself and the push runs from oms' own repository
with oms' transport rules: no hook or config of the user's repository runs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Any

from gatekeeper.errors import Blocked, Unavailable, UsageError
from gatekeeper.repo.git import Repo, git_env, is_ancestor
from gatekeeper.repo.refs import checked_out_branches, read_ref, valid_refname, write_ref
from gatekeeper.repo.remote import push


def _branch_ref(name: str) -> str:
    ref = f"refs/heads/{name}"
    if not name or name.startswith("-") or not valid_refname(ref) or name == "HEAD":
        raise UsageError(f"not a valid branch name: {name[:80]!r}")
    return ref


def deliver_branch(repo: Repo, sha: str, name: str) -> dict[str, Any]:
    ref = _branch_ref(name)
    if ref in checked_out_branches(repo):
        raise Blocked(f"branch {name} is checked out in a worktree; oms will not move it "
                      "under that worktree")  # fmt: skip
    old = read_ref(repo, ref)
    if old == sha:
        return {"branch": name, "action": "unchanged", "commit": sha}
    if old:
        if not is_ancestor(repo, old, sha):
            raise Blocked(f"branch {name} points at {old[:12]}, which {sha[:12]} does not contain; "
                          "oms never forces a branch")  # fmt: skip
        write_ref(repo, ref, sha, old, "oms: fast-forward to verified commit")
        return {"branch": name, "action": "fast-forwarded", "from": old, "commit": sha}
    write_ref(repo, ref, sha, None, "oms: verified commit")
    return {"branch": name, "action": "created", "commit": sha}


def deliver(
    repo: Repo, sha: str, branch: str | None, remote: str | None, draft_pr: bool
) -> dict[str, Any]:
    if (remote or draft_pr) and not branch:
        raise UsageError("--push and --draft-pr need --deliver-branch NAME")
    assert branch is not None
    gh = shutil.which("gh") if draft_pr else None
    if draft_pr and gh is None:
        raise Unavailable("--draft-pr needs the GitHub CLI `gh`, which is not installed")
    if draft_pr and not remote:
        raise UsageError("--draft-pr needs --push REMOTE (the branch must be on GitHub)")
    out: dict[str, Any] = {"branch": deliver_branch(repo, sha, branch)}
    if remote:
        # No '+': a non-fast-forward is refused by the remote.
        url = push(repo, remote, sha, branch)
        out["push"] = {"remote": remote, "branch": branch}
    if gh is not None:
        # gh is told the repository, and runs outside the user's one: it must not run git
        # under that repository's configuration either.
        proc = subprocess.run(
            [gh, "pr", "create", "--draft", "--repo", _github_repo(url), "--head", branch,
             "--title", f"oms: verified {sha[:12]}",
             "--body", f"READY_FOR_HUMAN by oms for {sha}."],
            cwd=repo.mirror, env=git_env(repo), capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise Unavailable(f"gh pr create failed: {proc.stderr.strip()[:200]}")
        out["draft_pr"] = proc.stdout.strip()
    return out


def _github_repo(url: str) -> str:
    m = re.fullmatch(r"(?:https://github\.com/|ssh://git@github\.com/|git@github\.com:)"
                     r"([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+?)(?:\.git)?/?", url)  # fmt: skip
    if m is None:
        raise UsageError("--draft-pr needs a GitHub remote (github.com over https or ssh)")
    return m.group(1)
