"""What the bwrap tests share: the interpreters a check can use, a sandbox-only policy,
CLI environments and directories the sandbox uid can reach."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from support.env import clean_env

SH = "/bin/sh"
PY = "/usr/bin/python3"  # Debian's python: the one a check can find inside the sandbox
AS_ROOT = os.geteuid() == 0
NEEDS_BWRAP_AND_PYTHON = pytest.mark.skipif(
    not os.access("/usr/bin/bwrap", os.X_OK) or not os.access(PY, os.X_OK),
    reason="needs /usr/bin/bwrap and /usr/bin/python3",
)


def sandbox_toml(limits: dict[str, int]) -> str:
    """An `oms.toml` holding only these `[sandbox]` limits."""
    body = "".join(f"{k} = {v}\n" for k, v in limits.items())
    return f"version = 1\n\n[sandbox]\n{body}"


def cli_env(state: dict[str, Path], **extra: str) -> dict[str, str]:
    """Environment for an `oms` subprocess: a fake HOME, this test's OMS_HOME, isolated git."""
    return {**clean_env(state["home"], state["oms_home"]), **extra}


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
