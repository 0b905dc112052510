"""One builder of real git repositories: `make_repo` for a repository with one commit,
`git` to run git in it with no system or global config."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from support.env import clean_env

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
