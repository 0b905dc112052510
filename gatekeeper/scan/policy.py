"""Scanning under a policy: its Gitleaks pin and time-out, within the gate's budget."""

from __future__ import annotations

from collections.abc import Sequence

from gatekeeper.scan.combined import scan_both
from gatekeeper.scan.interface import Finding, ScanItem, ScannerInfo
from policy import LoadedPolicy
from sandbox import Deadline


def scan_with_policy(
    items: Sequence[ScanItem], loaded: LoadedPolicy, budget: Deadline | None = None
) -> tuple[list[Finding], list[ScannerInfo]]:
    """Both scanners over `items` with the pin and time-out of this policy (within `budget`)."""
    sp = loaded.policy.scanners
    timeout = sp.timeout_s if budget is None else budget.clamp(sp.timeout_s, "before the scanners")
    return scan_both(items, sp.gitleaks_sha256, timeout)
