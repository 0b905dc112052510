"""The policy at a commit: the only reader of `oms.toml`, always from history, never the
worktree."""

from __future__ import annotations

from pathlib import Path

from gatekeeper.repo.git import Repo, git
from policy import POLICY_FILE, LoadedPolicy, PolicyError, default_policy, parse_policy


def read_policy_at(top: Path | Repo, sha: str) -> LoadedPolicy:
    """The policy committed at `sha` (never the worktree); absent means the defaults.

    A policy path that is not a regular file in that commit (a symlink, a
    submodule, a directory) is refused: it cannot be read as trusted data.
    """
    listing = git(top, "ls-tree", "-z", "--full-tree", sha, "--", POLICY_FILE)
    if not listing:
        return default_policy()
    meta, _, _ = listing.partition(b"\t")
    mode, kind, obj = meta.decode().split()
    if kind != "blob" or mode not in ("100644", "100755"):
        raise PolicyError(f"{sha[:12]}:{POLICY_FILE} is not a regular file (mode {mode})")
    data = git(top, "cat-file", "blob", obj)
    return parse_policy(data, f"{sha[:12]}:{POLICY_FILE}")
