"""Scanning under a policy: its Gitleaks pin and time-out, within the gate's budget, and
its allowed fingerprints marked once, here, for every caller.

Items whose findings the scan-result cache holds (`scan/cache.py`) are answered from it;
the others are scanned together, in one run of each scanner, and stored. A scan answered
wholly from the cache still checks that the pinned Gitleaks binary is there and intact,
and that detect-secrets is installed, so a broken scanner blocks whether or not it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING

from gatekeeper.dists import dist_version
from gatekeeper.scan.cache import Identity, ScanCache, scanner_config_digest
from gatekeeper.scan.combined import merged, scan_both, scan_both_by_item
from gatekeeper.scan.gitleaks import verify_binary
from gatekeeper.scan.interface import Finding, ScanItem, ScannerInfo, ScannerUnavailable
from gatekeeper.scan.redact import redact_lines
from policy.paths import matches

if TYPE_CHECKING:
    from policy import LoadedPolicy, ScannersPolicy
    from sandbox import Deadline


@dataclass(frozen=True)
class ScanReport:
    """Both scanners' findings, each marked `allowed` by the policy, and the scanners' infos
    ([gitleaks, detect-secrets])."""

    findings: tuple[Finding, ...]
    scanners: tuple[ScannerInfo, ...]
    cached: int = 0  # items answered from the scan-result cache

    @property
    def blocking(self) -> tuple[Finding, ...]:
        """The findings the policy does not allow: any one of them blocks."""
        return tuple(f for f in self.findings if not f.allowed)

    def only(self, keep: Callable[[Iterable[Finding]], Iterable[Finding]]) -> ScanReport:
        """The same report with the findings `keep` selects (e.g. those a change adds)."""
        return replace(self, findings=tuple(keep(self.findings)))

    def allowing_paths(self, sp: ScannersPolicy) -> ScanReport:
        """The same report with the findings the policy's path rules allow marked (see
        `allow_by_path`); call it once findings name their repository paths."""
        return replace(self, findings=allow_by_path(self.findings, sp))


@dataclass(frozen=True)
class ScanPin:
    """What a scan takes of a policy's `[scanners]`: the Gitleaks pin, the time-out and the
    allowed fingerprints. A hook passes its cached copy (integrations/hooks/policy_cache.py),
    so a scan answered from the cache builds no policy model."""

    gitleaks_sha256: str
    timeout_s: int
    allow_fingerprints: tuple[str, ...]

    @classmethod
    def of(cls, loaded: LoadedPolicy) -> ScanPin:
        sp = loaded.policy.scanners
        return cls(sp.gitleaks_sha256, sp.timeout_s, tuple(sp.allow_fingerprints))


def scan_with_policy(
    items: Sequence[ScanItem], loaded: LoadedPolicy | ScanPin, budget: Deadline | None = None
) -> ScanReport:
    """Both scanners over `items` with the pin and time-out of this policy (within `budget`),
    each finding marked allowed iff its fingerprint is in `[scanners] allow_fingerprints`;
    items the scan-result cache holds are not scanned again."""
    sp = loaded if isinstance(loaded, ScanPin) else ScanPin.of(loaded)
    cache = ScanCache.open() if items else None
    if cache is None:
        findings, infos = scan_both(items, sp.gitleaks_sha256, _timeout(sp, budget))
        return ScanReport(mark_allowed(findings, sp.allow_fingerprints), tuple(infos))
    ident = Identity(sp.gitleaks_sha256, scanner_config_digest(), _detect_secrets_version())
    keys = [ident.key(item.key) for item in items]
    stored = cache.get(keys)
    per_item: list[list[Finding]] = [
        [s.at(item.path) for s in stored[k]] if k in stored else []
        for item, k in zip(items, keys, strict=True)
    ]
    todo = [i for i, k in enumerate(keys) if k not in stored]
    if not todo:  # no scanner runs: still, a missing or tampered one blocks
        gitleaks = verify_binary(sp.gitleaks_sha256)
        infos = [gitleaks, ScannerInfo("detect-secrets", ident.detect_secrets, None)]
    else:  # Gitleaks.start verifies the binary through the descriptor it runs
        found, infos = scan_both_by_item([items[i] for i in todo], sp.gitleaks_sha256,
                                         _timeout(sp, budget))  # fmt: skip
        fresh: dict[str, list[Finding]] = {}
        for i, findings in zip(todo, found, strict=True):
            per_item[i] = findings
            fresh[keys[i]] = findings
        cache.put(fresh)
    findings = merged(per_item)
    return ScanReport(mark_allowed(findings, sp.allow_fingerprints), tuple(infos),
                      cached=len(items) - len(todo))  # fmt: skip


def redacted(item: ScanItem, loaded: LoadedPolicy) -> tuple[str, int]:
    """The item's whole text with every line a finding covers replaced, and how many findings
    there were: what the repo gateway serves and what a provider answered, before oms stores
    or shows it ("Secrets never leave"). A finding the policy allows is redacted too: it is
    allowed to pass a gate, not to be shown."""
    text = item.text or ""
    findings = scan_with_policy([item], loaded).findings
    if not findings:
        return text, 0
    return redact_lines(text, findings), len(findings)


def _timeout(sp: ScanPin, budget: Deadline | None) -> int:
    return sp.timeout_s if budget is None else budget.clamp(sp.timeout_s, "before the scanners")


@cache
def _detect_secrets_version() -> str:
    """The installed detect-secrets, without importing it (an import takes ~0.15 s)."""
    found = dist_version("detect-secrets")
    if found is None:
        raise ScannerUnavailable("detect-secrets is not installed")
    return found


def mark_allowed(findings: Iterable[Finding], allowed: Iterable[str]) -> tuple[Finding, ...]:
    """Each finding with `allowed` set from the fingerprints a policy allows."""
    allow = frozenset(allowed)
    return tuple(replace(f, allowed=f.fingerprint in allow) for f in findings)


AS_BYTES = " (as bytes)"  # the label suffix of a file's other decoding (gates/sources.py)


def allow_by_path(findings: Iterable[Finding], sp: ScannersPolicy) -> tuple[Finding, ...]:
    """Each finding also marked allowed when its path falls under `[scanners] exclude_paths`,
    or under the `paths` of an `[[scanners.allow]]` entry naming its rule (patterns: see
    `policy/paths.py`). Only a path decides, never the file's content: the finding is still
    reported, and redacted where oms redacts. The findings must name repository paths
    (a change's findings spread to every path of their blob first)."""
    if not sp.exclude_paths and not sp.allow:
        return tuple(findings)
    return tuple(replace(f, allowed=True) if not f.allowed and _path_allows(f, sp) else f
                 for f in findings)  # fmt: skip


def _path_allows(f: Finding, sp: ScannersPolicy) -> bool:
    path = f.file.removesuffix(AS_BYTES)
    if matches(path, sp.exclude_paths) is not None:
        return True
    return any(a.rule == f.rule and matches(path, a.paths) is not None for a in sp.allow)
