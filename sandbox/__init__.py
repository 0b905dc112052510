"""The sandbox: bubblewrap profiles, a real probe, hard limits, bounded output.

The names below are imported on first use (PEP 562): importing one submodule (its errors,
say) runs none of the others, so a command pays only for what it uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .agent import (
        AgentLimits,
        AgentProfile,
        agent_profile,
        build_agent_argv,
        host_secret_paths,
        oms_install_paths,
        prepare_run_dir,
    )
    from .agent_probe import AgentProbe, probe_agent
    from .agent_runner import AgentResult, run_agent
    from .bwrap import Bwrap, find_bwrap
    from .deadline import BudgetExpired, Deadline
    from .errors import ProfileError, SandboxError, SandboxUnavailable
    from .probe import ProbeResult
    from .profile import WORKDIR, Limits, Profile, build_argv, check_profile, resolve_rw_paths
    from .runner import RunResult, Stream, run

_WHERE: dict[str, str] = {
    **dict.fromkeys(
        (
            "AgentLimits",
            "AgentProfile",
            "agent_profile",
            "build_agent_argv",
            "host_secret_paths",
            "oms_install_paths",
            "prepare_run_dir",
        ),
        "agent",
    ),
    **dict.fromkeys(("AgentProbe", "probe_agent"), "agent_probe"),
    **dict.fromkeys(("AgentResult", "run_agent"), "agent_runner"),
    **dict.fromkeys(("Bwrap", "find_bwrap"), "bwrap"),
    **dict.fromkeys(("BudgetExpired", "Deadline"), "deadline"),
    **dict.fromkeys(("ProfileError", "SandboxError", "SandboxUnavailable"), "errors"),
    **dict.fromkeys(("ProbeResult",), "probe"),
    **dict.fromkeys(
        ("Limits", "Profile", "WORKDIR", "build_argv", "check_profile", "resolve_rw_paths"),
        "profile",
    ),
    **dict.fromkeys(("RunResult", "Stream", "run"), "runner"),
}

__all__ = [
    "WORKDIR",
    "AgentLimits",
    "AgentProbe",
    "AgentProfile",
    "AgentResult",
    "BudgetExpired",
    "Bwrap",
    "Deadline",
    "Limits",
    "ProbeResult",
    "Profile",
    "ProfileError",
    "RunResult",
    "SandboxError",
    "SandboxUnavailable",
    "Stream",
    "agent_profile",
    "build_agent_argv",
    "build_argv",
    "check_profile",
    "find_bwrap",
    "host_secret_paths",
    "oms_install_paths",
    "prepare_run_dir",
    "probe_agent",
    "resolve_rw_paths",
    "run",
    "run_agent",
]


def __getattr__(name: str) -> object:
    # A name here must not be a submodule's too: once the submodule is imported, the import
    # system binds the module to that name and this function is no longer asked.
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
