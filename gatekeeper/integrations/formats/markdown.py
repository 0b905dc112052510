"""A verdict, a scan or a provenance verification as a markdown page ready for a GitHub
job summary.

Decision first, then reasons, the checks table with each failed check's output tails
folded in <details>, the findings table. Every untrusted string is sanitised and escaped
(clean.md, clean.pre); findings show rule, place and fingerprint, never a value or preview.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from gatekeeper.integrations.formats import clean
from gatekeeper.integrations.formats.report import Report

MARK = {"READY_FOR_HUMAN": "✅", "FAILED": "❌", "BLOCKED": "⛔", "UNAVAILABLE": "⚠️"}


def render(report: Report) -> str:
    body = result_page(report) if report.kind == "result" else scan_page(report)
    return "\n".join(body)


def table(head: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def _code(text: object) -> str:
    return f"<code>{clean.html_inline(text)}</code>" if str(text) else ""


def result_page(report: Report) -> list[str]:
    v = report.data
    decision = str(v["decision"])
    shown = decision if decision in MARK else clean.md(decision)
    out = [f"## oms result gate: {MARK.get(decision, '')} {shown}", "",
           f"Commit {_code(str(v['commit'])[:12])} against base {_code(str(v['base'])[:12])}; "
           f"evidence seq {clean.md(v['evidence_seq'])}; exit code {report.code}.", ""]  # fmt: skip
    if v["reasons"]:
        out += ["### Reasons", "", *(f"- {clean.md(r)}" for r in v["reasons"]), ""]
    out += checks_section(v["checks"])
    out += protected_section(v["protected_changes"])
    out += findings_section(v["findings"])
    return out


def _check_result(c: Mapping[str, Any]) -> str:
    if c["timed_out"]:
        return "❌ timed out"
    return "✅ passed" if c["exit_code"] == 0 else f"❌ exit {clean.md(c['exit_code'])}"


def checks_section(checks: Sequence[Mapping[str, Any]]) -> list[str]:
    if not checks:
        return ["### Checks", "", "No check ran.", ""]
    rows = [(clean.md(c["name"]), _check_result(c), f"{c['duration_ms'] / 1000:.1f} s")
            for c in checks]  # fmt: skip
    out = ["### Checks", "", *table(("Check", "Result", "Time"), rows), ""]
    for c in checks:
        if c["exit_code"] != 0 or c["timed_out"]:
            out += tails(c)
    return out


def tails(c: Mapping[str, Any]) -> list[str]:
    """A failed check's output tails, folded: the full output is a blob in the evidence."""
    out = [f"<details><summary>Output of {_code(c['name'])}</summary>", ""]
    for stream in ("stdout", "stderr"):
        text = str(c.get(f"{stream}_tail") or "")
        if text.strip():
            out += [f"{stream} (last {len(text)} characters):", "", "<pre>", clean.pre(text),
                    "</pre>", ""]  # fmt: skip
    return [*out, "</details>", ""]


def protected_section(changes: Sequence[Mapping[str, Any]]) -> list[str]:
    if not changes:
        return []
    rows = [(_code(p["path"]), clean.md(p["status"]), _code(p["pattern"])) for p in changes]
    return ["### Protected paths changed", "", *table(("Path", "Change", "Pattern"), rows), ""]


def findings_section(findings: Sequence[Mapping[str, Any]]) -> list[str]:
    if not findings:
        return ["### Secrets", "", "No finding.", ""]
    rows = [
        (_code(f["file"]), clean.md(f["line"]), clean.md(f["rule"]), clean.md(f["scanner"]),
         _code(str(f["fingerprint"])[:16]), "allowed" if f["allowed"] else "**blocking**")
        for f in sorted(findings, key=lambda f: (str(f["file"]), f["line"], str(f["rule"])))
    ]  # fmt: skip
    head = ("File", "Line", "Rule", "Scanner", "Fingerprint", "Policy")
    return ["### Secrets", "", *table(head, rows), ""]


def scan_page(report: Report) -> list[str]:
    d = report.data
    blocking = int(d["blocking"])
    mark = "⛔" if blocking else "✅"
    scanners = ", ".join(f"{clean.md(s['name'])} {clean.md(s['version'])}" for s in d["scanners"])
    out = [f"## oms scan: {mark} {blocking} finding(s) not allowed by policy", "",
           f"{clean.md(d['scanned_items'])} item(s) scanned by {scanners}; "
           f"exit code {report.code}.", ""]  # fmt: skip
    return out + findings_section(d["findings"])


def verify_summary(raw: str, code: int) -> str:
    """The page for `oms evidence verify --commit … --json` (its stdout `raw`, its exit
    `code`), as the Action's verify mode writes it: what was found, each check. Output
    that is not the verifier's object (a refusal before any check) gets a one-line page."""
    try:
        data = json.loads(raw)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("checks"), list):
        return "\n".join(refused_page(data, code))
    return "\n".join(verify_page(data, code))


def verify_page(v: Mapping[str, Any], code: int) -> list[str]:
    ok = code == 0 and v.get("verified") is True
    head = "✅ verified" if ok else "⛔ not verified"
    signer = f"signer {clean.md(v['signer'])}" if v.get("signer") else "no trusted signer"
    out = [f"## oms provenance: {head}", "",
           f"Commit {clean.md(v.get('commit', ''))}: {signer}; "
           f"{clean.md(v.get('attestations', 0))} attestation(s) in its note; "
           f"exit code {code}.", ""]  # fmt: skip
    rows = [(clean.md(c.get("check", "")), "✅ ok" if c.get("ok") is True else "❌ failed",
             clean.md(c.get("detail", "")))
            for c in v["checks"] if isinstance(c, dict)]  # fmt: skip
    if not rows:
        return [*out, "No check ran.", ""]
    return [*out, "### Checks", "", *table(("Check", "Result", "Detail"), rows), ""]


def refused_page(data: object, code: int) -> list[str]:
    err = data.get("error") if isinstance(data, dict) else None
    why = f": {clean.md(err.get('message', ''))}" if isinstance(err, dict) else ""
    line = f"oms refused before any check (exit {code}){why}; see this step's log."
    return ["## oms provenance: ⛔ not verified", "", line, ""]
