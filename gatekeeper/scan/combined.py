"""Both scanners on the same items at the same time: what the gates run.

Gitleaks is a subprocess: it is started first, and works while detect-secrets runs in
this thread (the binary needs no GIL, and everything Python does for it happens before
it starts); detect-secrets is imported only then. If either scanner fails, its
ScannerUnavailable is raised here: one scanner's silence is never taken for "clean".
Gitleaks is always waited for or killed.

Every item's findings are its own: Gitleaks reads many items joined into a few pieces,
and where one of its matches runs from one item into another, those items are scanned
again by Gitleaks each alone, and that is what counts for them. So an item's findings do
not depend on what it was scanned with, and can be cached by its content.
"""

from __future__ import annotations

from collections.abc import Sequence

from gatekeeper.scan.gitleaks import Gitleaks
from gatekeeper.scan.interface import Finding, ScanItem, ScannerInfo


def scan_both(
    items: Sequence[ScanItem], pinned_sha256: str, timeout_s: int
) -> tuple[list[Finding], list[ScannerInfo]]:
    """Findings of both scanners, sorted by file and line; [gitleaks info, detect-secrets info]."""
    per_item, infos = scan_both_by_item(items, pinned_sha256, timeout_s)
    return merged(per_item), infos


def scan_both_by_item(
    items: Sequence[ScanItem], pinned_sha256: str, timeout_s: int
) -> tuple[list[list[Finding]], list[ScannerInfo]]:
    """Each item's findings (by its index), and [gitleaks info, detect-secrets info]."""
    gl = Gitleaks(pinned_sha256, timeout_s)  # ScannerUnavailable when there is no binary
    running = gl.start(items)
    try:
        # Start-up time: detect-secrets (and the `requests` it pulls in) takes ~0.1-0.2 s to
        # import; imported here, that happens while Gitleaks is already working.
        from gatekeeper.scan.detect_secrets import DetectSecrets

        ds = DetectSecrets()
        ds_found = ds.scan_by_item(items)
    except BaseException:
        running.cancel()
        raise
    gl_found, entangled = running.finish_by_item()
    if entangled:
        again = sorted(entangled)
        alone, _ = gl.start([items[k] for k in again], alone=True).finish_by_item()
        gl_found = [(k, f) for k, f in gl_found if k not in entangled]
        gl_found += [(again[j], f) for j, f in alone]
    per_item: list[list[Finding]] = [[] for _ in items]
    for k, f in [*gl_found, *ds_found]:
        per_item[k].append(f)
    return per_item, [gl.info, ds.info]


def merged(per_item: Sequence[Sequence[Finding]]) -> list[Finding]:
    """All items' findings sorted by file and line; a Gitleaks finding at the same place
    in two items of one path is one finding."""
    seen: set[tuple[str, int, str, str]] = set()
    out = []
    for findings in per_item:
        for f in findings:
            if f.scanner == "gitleaks":
                where = (f.file, f.line, f.rule, f.fingerprint)
                if where in seen:
                    continue
                seen.add(where)
            out.append(f)
    return sorted(out, key=lambda f: (f.file, f.line, f.scanner, f.rule))
