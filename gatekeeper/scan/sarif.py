"""SARIF 2.1.0 for GitHub code scanning: one run per scanner, no secret values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gatekeeper.scan.interface import Finding, ScannerInfo

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def to_sarif(findings: Sequence[Finding], scanners: Sequence[ScannerInfo]) -> dict[str, Any]:
    runs = []
    for info in scanners:
        mine = [f for f in findings if f.scanner == info.name]
        rules = sorted({f.rule for f in mine})
        runs.append({
            "tool": {"driver": {
                "name": info.name,
                "version": info.version,
                "informationUri": "https://oms.local/scanners",
                "rules": [{"id": r, "shortDescription": {"text": f"Secret: {r}"}} for r in rules],
            }},
            "results": [{
                "ruleId": f.rule,
                "level": "note" if f.allowed else "error",
                "message": {"text": f"Possible secret ({f.rule}): {f.preview}"},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": f.file},
                    "region": {"startLine": max(1, f.line)},
                }}],
                "partialFingerprints": {"omsSecretSha256/v1": f.fingerprint},
            } for f in mine],
        })  # fmt: skip
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": runs}
