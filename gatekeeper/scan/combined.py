"""Both scanners on the same items at the same time: what the gates run.

Gitleaks is a subprocess, so it runs in a background thread while detect-secrets
runs in this one (it holds the GIL; Gitleaks does not need it). The thread is
always joined. If either scanner fails, its ScannerUnavailable is raised here:
one scanner's silence is never taken for "clean".
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from gatekeeper.scan.detect_secrets import DetectSecrets
from gatekeeper.scan.gitleaks import Gitleaks
from gatekeeper.scan.interface import Finding, ScanItem, ScannerInfo, ScannerUnavailable


def scan_both(
    items: Sequence[ScanItem], pinned_sha256: str, timeout_s: int
) -> tuple[list[Finding], list[ScannerInfo]]:
    """Findings of both scanners, sorted by file and line; [gitleaks info, detect-secrets info]."""
    gl = Gitleaks(pinned_sha256, timeout_s)  # ScannerUnavailable when there is no binary
    ds = DetectSecrets()
    box: dict[str, list[Finding] | BaseException] = {}

    def run_gitleaks() -> None:
        try:
            box["findings"] = gl.scan(items)
        except BaseException as exc:  # handed to the calling thread below
            box["error"] = exc

    thread = threading.Thread(target=run_gitleaks, name="oms-gitleaks", daemon=True)
    thread.start()
    try:
        ds_findings = ds.scan(items)
    finally:
        thread.join()
    error = box.get("error")
    if isinstance(error, BaseException):
        raise error
    gl_findings = box.get("findings")
    if not isinstance(gl_findings, list):  # the thread ended without a result or an error
        raise ScannerUnavailable("gitleaks gave no result")
    findings = sorted(
        [*gl_findings, *ds_findings], key=lambda f: (f.file, f.line, f.scanner, f.rule)
    )
    return findings, [gl.info, ds.info]
