"""Policy: the `oms.toml` model, loading with one-line errors, and digests.

The names below are imported on first use (PEP 562): importing one submodule (its errors,
say) runs none of the others, so a command pays only for what it uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .errors import PolicyError
    from .load import (
        MAX_DIGITS,
        MAX_KEY_PARTS,
        MAX_LINE_CHARS,
        MAX_NESTING,
        MAX_POLICY_BYTES,
        POLICY_FILE,
        LoadedPolicy,
        check_limits,
        default_policy,
        load_policy_file,
        parse_policy,
        plan_digest,
        policy_digest,
        policy_json,
    )
    from .model import (
        DEFAULT_COSIGN_GRACE,
        DEFAULT_POLICY,
        AgentPolicy,
        AuthKind,
        AutopilotRule,
        BillingKind,
        Check,
        Cosigner,
        EgressPolicy,
        EvidencePolicy,
        McpPolicy,
        Policy,
        ProtectedPolicy,
        ProviderPolicy,
        RolePolicy,
        RunsPolicy,
        SandboxPolicy,
        ScannerAllow,
        ScannersPolicy,
        Signer,
        Toolchain,
        ToolchainKind,
        TransferPolicy,
        TrustPolicy,
        VerifyPolicy,
        WeakeningClass,
        WorkPolicy,
        signer_key_bytes,
        signer_key_text,
    )
    from .pins import DEFAULT_GITLEAKS_SHA256

_WHERE: dict[str, str] = {
    "PolicyError": "errors",
    "DEFAULT_GITLEAKS_SHA256": "pins",
    **dict.fromkeys(
        (
            "LoadedPolicy",
            "MAX_DIGITS",
            "MAX_KEY_PARTS",
            "MAX_LINE_CHARS",
            "MAX_NESTING",
            "MAX_POLICY_BYTES",
            "POLICY_FILE",
            "check_limits",
            "default_policy",
            "load_policy_file",
            "parse_policy",
            "plan_digest",
            "policy_digest",
            "policy_json",
        ),
        "load",
    ),
    **dict.fromkeys(
        (
            "AgentPolicy",
            "AuthKind",
            "AutopilotRule",
            "BillingKind",
            "Check",
            "Cosigner",
            "DEFAULT_COSIGN_GRACE",
            "DEFAULT_POLICY",
            "EgressPolicy",
            "EvidencePolicy",
            "McpPolicy",
            "Policy",
            "ProtectedPolicy",
            "ProviderPolicy",
            "RolePolicy",
            "RunsPolicy",
            "SandboxPolicy",
            "ScannerAllow",
            "ScannersPolicy",
            "Signer",
            "Toolchain",
            "ToolchainKind",
            "TransferPolicy",
            "TrustPolicy",
            "VerifyPolicy",
            "WeakeningClass",
            "WorkPolicy",
            "signer_key_bytes",
            "signer_key_text",
        ),
        "model",
    ),
}

__all__ = [
    "DEFAULT_COSIGN_GRACE",
    "DEFAULT_GITLEAKS_SHA256",
    "DEFAULT_POLICY",
    "MAX_DIGITS",
    "MAX_KEY_PARTS",
    "MAX_LINE_CHARS",
    "MAX_NESTING",
    "MAX_POLICY_BYTES",
    "POLICY_FILE",
    "AgentPolicy",
    "AuthKind",
    "AutopilotRule",
    "BillingKind",
    "Check",
    "Cosigner",
    "EgressPolicy",
    "EvidencePolicy",
    "LoadedPolicy",
    "McpPolicy",
    "Policy",
    "PolicyError",
    "ProtectedPolicy",
    "ProviderPolicy",
    "RolePolicy",
    "RunsPolicy",
    "SandboxPolicy",
    "ScannerAllow",
    "ScannersPolicy",
    "Signer",
    "Toolchain",
    "ToolchainKind",
    "TransferPolicy",
    "TrustPolicy",
    "VerifyPolicy",
    "WeakeningClass",
    "WorkPolicy",
    "check_limits",
    "default_policy",
    "load_policy_file",
    "parse_policy",
    "plan_digest",
    "policy_digest",
    "policy_json",
    "signer_key_bytes",
    "signer_key_text",
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
