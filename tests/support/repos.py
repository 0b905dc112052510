"""One builder of real git repositories: `make_repo` for a repository with one commit,
`commit_on` for a commit on a branch from exact bytes, `git` to run git with no system
or global config."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from support.env import clean_env
from support.pty import trust_tip

IDENTITY = (
    ("user.name", "Test User"),
    ("user.email", "test@example.invalid"),
    ("commit.gpgsign", "false"),
)


def git(
    repo: Path, *args: str, env: Mapping[str, str] | None = None, input: bytes | None = None
) -> str:
    """Run git in `repo`; return stdout as text, raise AssertionError on failure.

    Without `env`, git runs isolated with HOME at `repo`, so no test can read the user's
    own git configuration by forgetting to pass one.
    """
    proc = subprocess.run(
        ["git", "-C", str(repo), *args],
        input=input,
        capture_output=True,
        env=dict(env) if env is not None else clean_env(repo),
        check=False,
    )
    if proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip()
        raise AssertionError(f"git {' '.join(args)} failed: {err}")
    return proc.stdout.decode("utf-8", "surrogateescape")


def write_files(root: Path, files: Mapping[str, str | bytes]) -> None:
    """Write `files` (path relative to `root` -> text or bytes), making parent directories."""
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def make_repo(
    root: Path,
    files: Mapping[str, str | bytes] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    symlinks: Mapping[str, str] | None = None,
    readme: str | None = "hello\n",
    message: str = "initial",
) -> Path:
    """A real repository at `root` on branch `main`, configured locally, with one commit
    holding `README.md` (unless `readme` is None), `files` and `symlinks` (name -> target)."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main", env=env)
    for key, value in IDENTITY:
        git(root, "config", key, value, env=env)
    write_files(root, {**({"README.md": readme} if readme is not None else {}), **(files or {})})
    for name, target in (symlinks or {}).items():
        os.symlink(target, root / name)
    git(root, "add", "-A", env=env)
    git(root, "commit", "-q", "--allow-empty", "-m", message, env=env)
    return root


@dataclass(frozen=True)
class Keep:
    """In `commit_on`'s files: keep the parent's blob at this path, with this mode."""

    mode: str


def commit_on(
    repo: Path,
    branch: str,
    files: Mapping[str | bytes, str | bytes | Keep | None],
    *,
    env: Mapping[str, str],
    index: Path,
    parent: str = "main",
    message: str = "agent change",
) -> str:
    """A commit on `parent` with `files` changed (None deletes; paths may be raw bytes),
    written with plumbing through the index file `index` so that the worktree and the
    real index are untouched; branch `branch` points at it."""
    parent_sha = git(repo, "rev-parse", "--verify", "-q", f"{parent}^{{commit}}", env=env).strip()
    with_index = {**env, "GIT_INDEX_FILE": str(index)}
    git(repo, "read-tree", parent_sha, env=with_index)
    records = b""
    for raw_path, value in files.items():
        path = raw_path if isinstance(raw_path, bytes) else raw_path.encode()
        if value is None:
            records += b"0 " + b"0" * 40 + b"\t" + path + b"\0"
            continue
        if isinstance(value, Keep):
            mode = value.mode
            sha = git(repo, "rev-parse", f"{parent_sha}:{path.decode()}", env=env).strip()
        else:
            data = value if isinstance(value, bytes) else value.encode()
            mode = "100644"
            sha = git(repo, "hash-object", "-w", "--stdin", input=data, env=env).strip()
        records += f"{mode} {sha}\t".encode() + path + b"\0"
    if records:
        git(repo, "update-index", "-z", "--index-info", input=records, env=with_index)
    tree = git(repo, "write-tree", env=with_index).strip()
    sha = git(repo, "commit-tree", tree, "-p", parent_sha, "-m", message, env=env).strip()
    git(repo, "update-ref", f"refs/heads/{branch}", sha, env=env)
    return sha


# The smallest policy with a verification plan: `oms doctor` is not ready on an initialised
# repository whose default branch has none (every candidate would be BLOCKED).
PLAN_POLICY = 'version = 1\n\n[[checks]]\nname = "unit"\ncmd = ["true"]\n'


def commit_policy(repo: Path, *, env: Mapping[str, str] | None = None,
                  text: str = PLAN_POLICY) -> str:  # fmt: skip
    """Write `oms.toml` and commit it on the current branch; the new commit. In a repository
    oms already has a trusted mark for, the human then trusts the new tip at a pty (`oms
    policy trust`), as the README's path does: a committed policy is read only once trusted."""
    write_files(repo, {"oms.toml": text})
    git(repo, "add", "oms.toml", env=env)
    git(repo, "commit", "-q", "-m", "oms policy", env=env)
    if env is not None:
        trust_tip(repo, env=env, required=False)
    return git(repo, "rev-parse", "HEAD", env=env).strip()
