"""SARIF 2.1.0 from `oms scan` or `oms process-result` data, for GitHub code scanning.

A scan gives one run per scanner (gatekeeper.scan.sarif). A verdict gives a run per
scanner for its findings and one `oms` run for what only the gate knows: protected paths
the candidate changes and checks that failed. GitHub wants every result to have a
location: a failed check points at the policy file that holds the plan.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from gatekeeper.integrations.formats.report import Report
from gatekeeper.integrations.formats.text import ascii_json
from gatekeeper.scan.interface import Finding, ScannerInfo
from gatekeeper.scan.sarif import (
    INFORMATION_URI,
    SCHEMA,
    artifact_location,
    scanner_run,
    to_sarif,
)

POLICY_FILE = "oms.toml"
PROTECTED_RULE, CHECK_RULE = "oms/protected-path", "oms/check-failed"
_FINDING_KEYS = ("scanner", "rule", "file", "line", "fingerprint", "preview", "allowed", "end_line")


def render(report: Report) -> str:
    doc = result_sarif(report) if report.kind == "result" else scan_sarif(report)
    return ascii_json(doc, indent=2)


def finding_of(d: Mapping[str, Any]) -> Finding:
    """A finding back from its JSON (the scan's and the verdict's share these keys)."""
    return Finding(**{k: d[k] for k in _FINDING_KEYS if k in d})


def located(f: Finding, report: Report) -> Finding:
    """A name given relative to where the command ran, as an absolute path (then made
    relative to the repository's top); names of a diff are the repository's own."""
    if report.cwd is None or Path(f.file).is_absolute():
        return f
    here = report.cwd / f.file
    if not here.exists():
        return f
    return replace(f, file=str(here))


def scan_sarif(report: Report) -> dict[str, Any]:
    findings = [located(finding_of(d), report) for d in report.data["findings"]]
    scanners = [ScannerInfo(s["name"], s["version"], s.get("digest"))
                for s in report.data["scanners"]]  # fmt: skip
    return to_sarif(findings, scanners, report.root)


def result_sarif(report: Report) -> dict[str, Any]:
    data = report.data
    findings = [finding_of(d) for d in data["findings"]]
    names = [*INFORMATION_URI, *sorted({f.scanner for f in findings} - set(INFORMATION_URI))]
    runs = [scanner_run(n, None, findings, report.root) for n in names]
    runs.append(gate_run(data, report.root))
    return {"$schema": SCHEMA, "version": "2.1.0", "runs": runs}


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def _oms_version() -> str | None:
    try:
        return version("oh-my-super-agent")
    except PackageNotFoundError:
        return None


def gate_run(data: Mapping[str, Any], root: Path | None) -> dict[str, Any]:
    """The gate's own results: protected-path changes and failed checks."""
    driver: dict[str, Any] = {"name": "oms", "rules": [
        {"id": PROTECTED_RULE, "name": "protected-path",
         "shortDescription": {"text": "The candidate changes a protected path"},
         "defaultConfiguration": {"level": "error"}},
        {"id": CHECK_RULE, "name": "check-failed",
         "shortDescription": {"text": "A check of the verification plan failed"},
         "defaultConfiguration": {"level": "error"}},
    ]}  # fmt: skip
    if (v := _oms_version()) is not None:
        driver["version"] = v
    results = [_protected(p, root) for p in data["protected_changes"]]
    results += [_check(c, root) for c in data["checks"] if not _passed(c)]
    props = {"decision": data["decision"], "commit": data["commit"], "base": data["base"]}
    return {
        "tool": {"driver": driver},
        "originalUriBaseIds": scanner_run("oms", None, (), root)["originalUriBaseIds"],
        "properties": props,
        "results": results,
    }


def _passed(check: Mapping[str, Any]) -> bool:
    return check["exit_code"] == 0 and not check["timed_out"]


def _location(path: str, root: Path | None, line: int = 1) -> list[dict[str, Any]]:
    return [{"physicalLocation": {"artifactLocation": artifact_location(path, root),
                                  "region": {"startLine": line}}}]  # fmt: skip


def _protected(p: Mapping[str, Any], root: Path | None) -> dict[str, Any]:
    return {
        "ruleId": PROTECTED_RULE,
        "level": "error",
        "message": {
            "text": f"The candidate changes a protected path ({p['status']}), "
            f"matched by {p['pattern']}: the result gate blocks it"
        },
        "locations": _location(p["path"], root),
        "partialFingerprints": {"omsProtectedPath/v1": _digest(p["path"], p["pattern"])},
    }


def _check(c: Mapping[str, Any], root: Path | None) -> dict[str, Any]:
    why = "timed out" if c["timed_out"] else f"exited {c['exit_code']}"
    return {
        "ruleId": CHECK_RULE,
        "level": "error",
        "message": {"text": f"Check {c['name']} {why}; its output is in the evidence"},
        "locations": _location(POLICY_FILE, root),
        "partialFingerprints": {"omsCheck/v1": _digest(c["name"])},
    }
