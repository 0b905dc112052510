"""Environments for processes a test starts: nothing that points at the real home, the
real git config or another `$OMS_HOME`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest

DROP_ENV_PREFIXES = ("GIT_", "OMS_", "XDG_")


def clean_env(home: Path, oms_home: Path | None = None) -> dict[str, str]:
    """This process's environment less GIT_*/OMS_*/XDG_*, with HOME at `home`, no system
    or global git config, and `$OMS_HOME` at `oms_home` when given."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(DROP_ENV_PREFIXES)}
    env.update(
        HOME=str(home),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        PYTHONDONTWRITEBYTECODE="1",
        LC_ALL="C",
    )
    if oms_home is not None:
        env["OMS_HOME"] = str(oms_home)
    return env


def use_clean_git_here(env: Mapping[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's own git calls (a gate called in-process) see the clean git environment
    of `env` (from `clean_env`), as its subprocesses do: no GIT_* of the caller's."""
    for k in list(os.environ):
        if k.startswith("GIT_"):
            monkeypatch.delenv(k)
    for k in ("GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL", "GIT_TERMINAL_PROMPT"):
        monkeypatch.setenv(k, env[k])
