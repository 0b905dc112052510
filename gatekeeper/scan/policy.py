"""Scanning under a policy: its Gitleaks pin and time-out, within the gate's budget, and
its allowed fingerprints marked once, here, for every caller."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from gatekeeper.scan.combined import scan_both
from gatekeeper.scan.interface import Finding, ScanItem, ScannerInfo
from policy import LoadedPolicy
from sandbox import Deadline


@dataclass(frozen=True)
class ScanReport:
    """Both scanners' findings, each marked `allowed` by the policy, and the scanners' infos
    ([gitleaks, detect-secrets])."""

    findings: tuple[Finding, ...]
    scanners: tuple[ScannerInfo, ...]

    @property
    def blocking(self) -> tuple[Finding, ...]:
        """The findings the policy does not allow: any one of them blocks."""
        return tuple(f for f in self.findings if not f.allowed)

    def only(self, keep: Callable[[Iterable[Finding]], Iterable[Finding]]) -> ScanReport:
        """The same report with the findings `keep` selects (e.g. those a change adds)."""
        return replace(self, findings=tuple(keep(self.findings)))


def scan_with_policy(
    items: Sequence[ScanItem], loaded: LoadedPolicy, budget: Deadline | None = None
) -> ScanReport:
    """Both scanners over `items` with the pin and time-out of this policy (within `budget`),
    each finding marked allowed iff its fingerprint is in `[scanners] allow_fingerprints`."""
    sp = loaded.policy.scanners
    timeout = sp.timeout_s if budget is None else budget.clamp(sp.timeout_s, "before the scanners")
    findings, infos = scan_both(items, sp.gitleaks_sha256, timeout)
    return ScanReport(mark_allowed(findings, sp.allow_fingerprints), tuple(infos))


def mark_allowed(findings: Iterable[Finding], allowed: Iterable[str]) -> tuple[Finding, ...]:
    """Each finding with `allowed` set from the fingerprints a policy allows."""
    allow = frozenset(allowed)
    return tuple(replace(f, allowed=f.fingerprint in allow) for f in findings)
