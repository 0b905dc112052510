"""JUnit XML, as CI test reporters read it: for a verdict one testcase per check (the
failure carries the output tails) plus one for secrets and one for protected paths; for a
scan one testcase per file with findings. Text is sanitised: XML 1.0 cannot hold most
control characters, and a terminal showing the report must not obey them."""

from __future__ import annotations

import xml.etree.ElementTree as ET  # builds XML; never parses any
from collections.abc import Mapping, Sequence
from itertools import groupby
from typing import Any

from gatekeeper.integrations.formats import clean
from gatekeeper.integrations.formats.report import Report
from gatekeeper.text import sanitize

Failure = tuple[str, str] | None  # (message, body)
Case = tuple[str, str, float, Failure]  # classname, name, seconds, failure


def render(report: Report) -> str:
    if report.kind == "result":
        name, cases = "oms process-result", result_cases(report.data)
    else:
        name, cases = "oms scan", scan_cases(report.data)
    return document(name, cases)


def document(name: str, cases: Sequence[Case]) -> str:
    failures = sum(1 for c in cases if c[3] is not None)
    seconds = f"{sum(c[2] for c in cases):.3f}"
    counts = {"tests": str(len(cases)), "failures": str(failures), "errors": "0",
              "skipped": "0", "time": seconds}  # fmt: skip
    root = ET.Element("testsuites", {"name": name, **counts})
    suite = ET.SubElement(root, "testsuite", {"name": name, **counts})
    for classname, case_name, secs, failure in cases:
        attrs = {"classname": classname, "name": sanitize(case_name), "time": f"{secs:.3f}"}
        case = ET.SubElement(suite, "testcase", attrs)
        if failure is not None:
            message, body = failure
            el = ET.SubElement(case, "failure", {"message": sanitize(message), "type": classname})
            el.text = body
    xml = ET.tostring(root, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + xml


def _block(*parts: tuple[str, str]) -> str:
    out = []
    for title, text in parts:
        if text.strip():
            out += [f"--- {title} ---", *clean.lines(text)]
    return "\n".join(out)


def check_case(c: Mapping[str, Any]) -> Case:
    secs = int(c["duration_ms"]) / 1000
    if c["exit_code"] == 0 and not c["timed_out"]:
        return ("oms.checks", str(c["name"]), secs, None)
    why = "timed out" if c["timed_out"] else f"exit {c['exit_code']}"
    body = _block(("stdout tail", str(c["stdout_tail"])), ("stderr tail", str(c["stderr_tail"])))
    return ("oms.checks", str(c["name"]), secs, (why, body))


def _finding_line(f: Mapping[str, Any]) -> str:
    allowed = " (allowed)" if f["allowed"] else ""
    return sanitize(f"{f['file']}:{f['line']}: {f['rule']} ({f['scanner']}) "
                    f"fingerprint {str(f['fingerprint'])[:16]}{allowed}")  # fmt: skip


def result_cases(v: Mapping[str, Any]) -> list[Case]:
    cases = [check_case(c) for c in v["checks"]]
    blocking = [f for f in v["findings"] if not f["allowed"]]
    secrets = (f"{len(blocking)} secret finding(s)", "\n".join(map(_finding_line, blocking)))
    cases.append(("oms.gate", "secrets", 0.0, secrets if blocking else None))
    changes = v["protected_changes"]
    lines = "\n".join(sanitize(f"{p['path']} ({p['status']}, {p['pattern']})") for p in changes)
    protected = (f"{len(changes)} protected path(s) changed", lines)
    cases.append(("oms.gate", "protected-paths", 0.0, protected if changes else None))
    return cases


def scan_cases(d: Mapping[str, Any]) -> list[Case]:
    findings = sorted(d["findings"], key=lambda f: (str(f["file"]), f["line"]))
    cases: list[Case] = []
    for file, group in groupby(findings, key=lambda f: str(f["file"])):
        mine = list(group)
        blocking = [f for f in mine if not f["allowed"]]
        failure = (f"{len(blocking)} secret finding(s)", "\n".join(map(_finding_line, mine)))
        cases.append(("oms.scan", file, 0.0, failure if blocking else None))
    return cases or [("oms.scan", "secrets", 0.0, None)]
