"""Both scanners on the same items at the same time: what the gates run.

Gitleaks is a subprocess: it is started first, and works while detect-secrets runs in
this thread (the binary needs no GIL, and everything Python does for it happens before
it starts); detect-secrets is imported only then. If either scanner fails, its
ScannerUnavailable is raised here: one scanner's silence is never taken for "clean".
Gitleaks is always waited for or killed.
"""

from __future__ import annotations

from collections.abc import Sequence

from gatekeeper.scan.gitleaks import Gitleaks
from gatekeeper.scan.interface import Finding, ScanItem, ScannerInfo


def scan_both(
    items: Sequence[ScanItem], pinned_sha256: str, timeout_s: int
) -> tuple[list[Finding], list[ScannerInfo]]:
    """Findings of both scanners, sorted by file and line; [gitleaks info, detect-secrets info]."""
    gl = Gitleaks(pinned_sha256, timeout_s)  # ScannerUnavailable when there is no binary
    running = gl.start(items)
    try:
        # Start-up time: detect-secrets (and the `requests` it pulls in) takes ~0.1-0.2 s to
        # import; imported here, that happens while Gitleaks is already working.
        from gatekeeper.scan.detect_secrets import DetectSecrets

        ds = DetectSecrets()
        ds_findings = ds.scan(items)
    except BaseException:
        running.cancel()
        raise
    gl_findings = running.finish()
    findings = sorted(
        [*gl_findings, *ds_findings], key=lambda f: (f.file, f.line, f.scanner, f.rule)
    )
    return findings, [gl.info, ds.info]
