"""The sandbox: bubblewrap profiles, a real probe, hard limits, bounded output."""

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
from .probe import ProbeResult, probe
from .profile import WORKDIR, Limits, Profile, build_argv, check_profile, resolve_rw_paths
from .runner import RunResult, Stream, run

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
    "probe",
    "probe_agent",
    "resolve_rw_paths",
    "run",
    "run_agent",
]
