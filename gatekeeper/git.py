"""Running git on a repository as data: argv lists, no hooks, no fsmonitor, no pager.

A repository's own config could name programs (core.fsmonitor, hooks); the
agent may have written that config, so oms turns those off for every call.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from evidence import repo_id_for
from policy import POLICY_FILE, LoadedPolicy, PolicyError, default_policy, parse_policy

from .errors import UsageError

_SAFE_CONFIG = (
    "-c", "core.fsmonitor=false",
    "-c", "core.hooksPath=/dev/null",
    "-c", "core.pager=cat",
    "-c", "diff.external=",
    "-c", "protocol.allow=never",
)  # fmt: skip
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


class GitError(UsageError):
    """git refused: not a repository, a ref that does not resolve, and the like."""


def git_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C", GIT_CONFIG_NOSYSTEM="1")
    return env


def git_argv(repo: Path, *args: str) -> list[str]:
    return ["git", *_SAFE_CONFIG, "-C", str(repo), *args]


def git(repo: Path, *args: str, input: bytes | None = None, check: bool = True) -> bytes:
    """Run `git -C repo ARGS`; stdout bytes. GitError with git's first line on failure."""
    proc = subprocess.run(
        git_argv(repo, *args),
        input=input,
        capture_output=True,
        env=git_env(),
        check=False,
    )
    if check and proc.returncode != 0:
        first = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        reason = first[0] if first else f"exit {proc.returncode}"
        raise GitError(f"git {args[0]}: {reason}")
    return proc.stdout


@dataclass(frozen=True)
class Repo:
    top: Path
    common_dir: Path
    repo_id: str


def open_repo(path: Path) -> Repo:
    """The repository containing `path` (its top level and git common dir)."""
    if not path.is_dir():
        raise UsageError(f"{path} is not a directory")
    try:
        out = git(path, "rev-parse", "--show-toplevel", "--git-common-dir").decode()
    except GitError:
        raise UsageError(f"{path} is not inside a git repository") from None
    top_s, common_s = out.strip().split("\n")[:2]
    top = Path(top_s)
    common = Path(common_s)
    if not common.is_absolute():
        common = (path / common).resolve()
    return Repo(top=top, common_dir=common, repo_id=repo_id_for(common))


def resolve_commit(repo: Path, ref: str) -> str:
    """A ref to a full commit SHA. The ref is data: it can never become an option."""
    if not ref or ref.startswith("-") or "\x00" in ref:
        raise UsageError(f"not a valid ref: {ref[:80]!r}")
    out = git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}",
              check=False).strip()  # fmt: skip
    sha = out.decode("ascii", "replace")
    if not _SHA.match(sha):
        raise UsageError(f"ref does not name a commit: {ref[:80]!r}")
    return sha


def worktree_git(repo: Repo, *args: str, input: bytes | None = None, check: bool = True) -> bytes:
    """git reading `repo`'s worktree and index (ls-files and the like), never its config.

    Contract for callers: only commands that read files or the index as data.
    """
    return git(repo.top, *args, input=input, check=check)


def current_branch(repo: Repo) -> str | None:
    """The checked-out branch's short name, or None when HEAD is detached."""
    out = git(repo.top, "symbolic-ref", "-q", "--short", "HEAD", check=False).decode().strip()
    return out or None


def remote_tip(repo: Repo) -> tuple[str, str] | None:
    """(upstream label, commit) of HEAD's upstream branch as confirmed on the remote itself
    (ls-remote through oms' transport rules); None when there is no upstream or it cannot
    be confirmed. A local remote-tracking ref is never taken as proof."""
    return None


def read_policy_at(repo: Path, sha: str) -> LoadedPolicy:
    """The policy committed at `sha` (never the worktree); absent means the defaults.

    A policy path that is not a regular file in that commit (a symlink, a
    submodule, a directory) is refused: it cannot be read as trusted data.
    """
    listing = git(repo, "ls-tree", "-z", "--full-tree", sha, "--", POLICY_FILE)
    if not listing:
        return default_policy()
    meta, _, _ = listing.partition(b"\t")
    mode, kind, obj = meta.decode().split()
    if kind != "blob" or mode not in ("100644", "100755"):
        raise PolicyError(f"{sha[:12]}:{POLICY_FILE} is not a regular file (mode {mode})")
    data = git(repo, "cat-file", "blob", obj)
    return parse_policy(data, f"{sha[:12]}:{POLICY_FILE}")
