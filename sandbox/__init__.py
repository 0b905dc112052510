"""The sandbox: bubblewrap profiles, a real probe, hard limits, bounded output."""

from .bwrap import Bwrap, find_bwrap
from .deadline import BudgetExpired, Deadline
from .errors import ProfileError, SandboxError, SandboxUnavailable
from .probe import ProbeResult, probe
from .profile import WORKDIR, Limits, Profile, build_argv, check_profile
from .runner import RunResult, Stream, run

__all__ = [
    "WORKDIR",
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
    "build_argv",
    "check_profile",
    "find_bwrap",
    "probe",
    "run",
]
