"""Policy: the `oms.toml` model, loading with one-line errors, and digests."""

from .load import (
    MAX_POLICY_BYTES,
    POLICY_FILE,
    LoadedPolicy,
    PolicyError,
    default_policy,
    load_policy_file,
    parse_policy,
    plan_digest,
    policy_digest,
)
from .model import (
    DEFAULT_GITLEAKS_SHA256,
    DEFAULT_POLICY,
    AutopilotRule,
    Check,
    Policy,
    ProtectedPolicy,
    SandboxPolicy,
    ScannersPolicy,
    TransferPolicy,
)

__all__ = [
    "DEFAULT_GITLEAKS_SHA256",
    "DEFAULT_POLICY",
    "MAX_POLICY_BYTES",
    "POLICY_FILE",
    "AutopilotRule",
    "Check",
    "LoadedPolicy",
    "Policy",
    "PolicyError",
    "ProtectedPolicy",
    "SandboxPolicy",
    "ScannersPolicy",
    "TransferPolicy",
    "default_policy",
    "load_policy_file",
    "parse_policy",
    "plan_digest",
    "policy_digest",
]
