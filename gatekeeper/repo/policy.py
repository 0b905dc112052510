"""The policy at a commit: the only reader of `oms.toml`, always from history, never the
worktree."""

from __future__ import annotations

import re
from pathlib import Path

from gatekeeper.repo.git import Repo, git
from policy import POLICY_FILE, LoadedPolicy, PolicyError, default_policy, parse_policy


def read_committed_file(top: Path | Repo, sha: str, path: str) -> bytes | None:
    """The bytes of `path` as committed at `sha` (never the worktree); None when absent.

    A path that is not a regular file in that commit (a symlink, a submodule, a
    directory) is refused: it cannot be read as trusted data.
    """
    listing = git(top, "ls-tree", "-z", "--full-tree", sha, "--", path)
    if not listing:
        return None
    meta, _, _ = listing.partition(b"\t")
    mode, kind, obj = meta.decode().split()
    if kind != "blob" or mode not in ("100644", "100755"):
        raise PolicyError(f"{sha[:12]}:{path} is not a regular file (mode {mode})")
    return git(top, "cat-file", "blob", obj)


_FULL_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
# Parsed policies by (object store, commit id): a commit's tree never changes, so a long-lived
# process (`oms mcp`) reads and validates one commit's policy once. Bounded; per process.
_AT: dict[tuple[str, str], LoadedPolicy] = {}
_AT_MAX = 32


def read_policy_at(top: Path | Repo, sha: str) -> LoadedPolicy:
    """The policy committed at `sha` (never the worktree); absent means the defaults."""
    store = str(top.common_dir if isinstance(top, Repo) else top)
    key = (store, sha)
    if key in _AT:
        return _AT[key]
    data = read_committed_file(top, sha, POLICY_FILE)
    loaded = default_policy() if data is None else parse_policy(data, f"{sha[:12]}:{POLICY_FILE}")
    if _FULL_SHA.fullmatch(sha):  # only an exact commit id names the same tree forever
        if len(_AT) >= _AT_MAX:
            _AT.pop(next(iter(_AT)))
        _AT[key] = loaded
    return loaded
