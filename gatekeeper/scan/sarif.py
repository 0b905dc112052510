"""SARIF 2.1.0 for GitHub code scanning: one run per scanner, no secret values.

What GitHub's SARIF support page asks for and this gives: repository-relative
`artifactLocation.uri` under `uriBaseId` %SRCROOT%, rule ids without spaces (detect-secrets'
plugin names have them), a real `informationUri`, a `partialFingerprints` entry that stays
the same across runs (the finding's own fingerprint, a hash, never the value) and a level.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from gatekeeper.scan.interface import Finding, ScannerInfo

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "%SRCROOT%"
FINGERPRINT_KEY = "omsSecretSha256/v1"

# Each scanner's own documentation of its rules.
INFORMATION_URI = {
    "gitleaks": "https://github.com/gitleaks/gitleaks",
    "detect-secrets": "https://github.com/Yelp/detect-secrets",
}
RULE_HELP_URI = {
    "gitleaks": "https://github.com/gitleaks/gitleaks/blob/master/config/gitleaks.toml",
    "detect-secrets": "https://github.com/Yelp/detect-secrets#currently-supported-plugins",
}

_NOT_ID = re.compile(r"[^A-Za-z0-9._/-]+")


def rule_id(rule: str) -> str:
    """A rule id without spaces or other separators: `AWS Access Key` -> `aws-access-key`."""
    return _NOT_ID.sub("-", rule).strip("-").lower() or "unnamed"


def artifact_location(file: str, root: Path | None) -> dict[str, str]:
    """A repository-relative URI under %SRCROOT% where the file is inside `root` (or already
    relative); an absolute `file:` URI for a file outside it; percent-encoded either way."""
    path = Path(file)
    if path.is_absolute() and root is not None:
        try:
            path = path.relative_to(root)
        except ValueError:
            pass
    if path.is_absolute():
        return {"uri": path.as_uri()}
    return {"uri": quote(PurePosixPath(path).as_posix()), "uriBaseId": SRCROOT}


def secret_result(f: Finding, root: Path | None) -> dict[str, Any]:
    """One finding: its rule, where, its fingerprint; an allowed one is a note, not an error."""
    region: dict[str, int] = {"startLine": max(1, f.line)}
    if f.end_line is not None and f.end_line > region["startLine"]:
        region["endLine"] = f.end_line
    allowed = " (allowed by policy)" if f.allowed else ""
    text = f"Possible secret ({f.rule}) found by {f.scanner}{allowed}; fingerprint "
    text += f.fingerprint[:16]
    return {
        "ruleId": rule_id(f.rule),
        "level": "note" if f.allowed else "error",
        "message": {"text": text},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": artifact_location(f.file, root),
                    "region": region,
                }
            }
        ],
        "partialFingerprints": {FINGERPRINT_KEY: f.fingerprint},
    }


def scanner_run(
    name: str, version: str | None, findings: Sequence[Finding], root: Path | None
) -> dict[str, Any]:
    mine = [f for f in findings if f.scanner == name]
    rules = {rule_id(f.rule): f.rule for f in mine}
    driver: dict[str, Any] = {
        "name": name,
        "informationUri": INFORMATION_URI.get(name, INFORMATION_URI["gitleaks"]),
        "rules": [{
            "id": rid,
            "name": rid,
            "shortDescription": {"text": f"Secret: {raw}"},
            "helpUri": RULE_HELP_URI.get(name, RULE_HELP_URI["gitleaks"]),
            "defaultConfiguration": {"level": "error"},
            "properties": {"tags": ["security", "secret"]},
        } for rid, raw in sorted(rules.items())],
    }  # fmt: skip
    if version:
        driver["version"] = version
    return {
        "tool": {"driver": driver},
        "originalUriBaseIds": _base_ids(root),
        "results": [secret_result(f, root) for f in mine],
    }


def _base_ids(root: Path | None) -> dict[str, Any]:
    if root is None:
        return {SRCROOT: {"description": {"text": "The repository's root."}}}
    return {SRCROOT: {"uri": root.as_uri().rstrip("/") + "/"}}


def to_sarif(
    findings: Sequence[Finding], scanners: Sequence[ScannerInfo], root: Path | None = None
) -> dict[str, Any]:
    """A SARIF log with one run per scanner that ran; file names relative to `root`."""
    runs = [scanner_run(i.name, i.version, findings, root) for i in scanners]
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": runs}
