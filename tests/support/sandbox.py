"""Shared helpers for the sandbox tests: real git repositories with isolated git config."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

SH = "/bin/sh"
PY = "/usr/bin/python3"  # Debian's python: the one a check can find inside the sandbox
AS_ROOT = os.geteuid() == 0
NEEDS_BWRAP_AND_PYTHON = pytest.mark.skipif(
    not os.access("/usr/bin/bwrap", os.X_OK) or not os.access(PY, os.X_OK),
    reason="needs /usr/bin/bwrap and /usr/bin/python3",
)


def git_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "OMS_", "XDG_"))}
    env.update(
        HOME=str(home),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        LC_ALL="C",
    )
    return env


def git(repo: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        env=git_env(repo),
        check=False,
    )
    assert proc.returncode == 0, f"git {args}: {proc.stderr}"
    return proc.stdout


def make_repo(
    root: Path,
    files: dict[str, str] | None = None,
    symlinks: dict[str, str] | None = None,
    sandbox_policy: dict[str, int] | None = None,
) -> Path:
    """A real git repository at `root` with one commit holding `files` and `symlinks`."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.name", "Sandbox Test")
    git(root, "config", "user.email", "sandbox-test@example.invalid")
    git(root, "config", "commit.gpgsign", "false")
    for name, content in {"README.md": "hello\n", **(files or {})}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)
    for name, target in (symlinks or {}).items():
        os.symlink(target, root / name)
    if sandbox_policy:
        body = "".join(f"{k} = {v}\n" for k, v in sandbox_policy.items())
        (root / "oms.toml").write_text(f"version = 1\n\n[sandbox]\n{body}")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "initial")
    return root


def cli_env(state: dict[str, Path], **extra: str) -> dict[str, str]:
    """Environment for an `oms` subprocess: a fake HOME, this test's OMS_HOME, isolated git."""
    env = git_env(state["home"])
    env.update(OMS_HOME=str(state["oms_home"]), PYTHONDONTWRITEBYTECODE="1", **extra)
    return env


@contextmanager
def traversable_dir(prefix: str, parent: str | None = None) -> Iterator[Path]:
    """A fresh host directory every uid can traverse (the sandbox uid must reach what a
    test binds or plants; pytest's tmp_path is 0700), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
