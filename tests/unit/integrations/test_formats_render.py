"""The format renderers: a command's `--json` data in, SARIF / markdown / JUnit / text /
JSON out, for a READY, a FAILED and a BLOCKED verdict and a scan with findings.

The SARIF is validated against the vendored OASIS schema (tests/data/README.md). Every
input carries hostile text (control characters, HTML, a table break) and, as the worst
case, a finding whose preview is the whole fake secret: no format but text and JSON (which
print the preview as the command always has) may show it.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support.secrets import fake_aws_key

from gatekeeper.integrations.formats import FORMATS, Report, markdown, render

DATA = Path(__file__).parents[2] / "data"
SARIF_SCHEMA_SHA256 = "c3b4bb2d6093897483348925aaa73af03b3e3f4bd4ca38cef26dcb4212a2682e"
KEY = fake_aws_key()
HOSTILE = "evil|name<script>\x1b[31m\u202e.py"
COMMIT, BASE = "ab" * 20, "cd" * 20


def finding(scanner: str, rule: str, file: str, line: int, allowed: bool = False) -> dict[str, Any]:
    fp = hashlib.sha256(b"oms-finding-v1\x00" + KEY.encode()).hexdigest()
    return {"scanner": scanner, "rule": rule, "file": file, "line": line, "fingerprint": fp,
            "preview": KEY, "allowed": allowed, "end_line": None}  # fmt: skip


def check(name: str, code: int | None, timed_out: bool = False, tail: str = "") -> dict[str, Any]:
    return {"name": name, "exit_code": code, "timed_out": timed_out, "signal": None,
            "duration_ms": 1250, "stdout_bytes": len(tail), "stderr_bytes": 0,
            "stdout_blob": "sha256:" + "00" * 32, "stderr_blob": "sha256:" + "11" * 32,
            "stdout_tail": tail, "stderr_tail": ""}  # fmt: skip


def verdict(decision: str, **kw: Any) -> dict[str, Any]:
    base = {"decision": decision, "reasons": [], "commit": COMMIT, "base": BASE,
            "evidence_seq": 7, "checks": [], "findings": [], "protected_changes": [],
            "delivered": None, "timings_ms": {}}  # fmt: skip
    return {**base, **kw}


READY = verdict("READY_FOR_HUMAN", checks=[check("unit", 0), check("lint", 0)])
FAILED = verdict(
    "FAILED",
    reasons=["check unit failed (exit 1)"],
    checks=[check("unit", 1, tail="FAIL: test_add\n</pre><b>x</b>\x1b]0;pwn\x07\n"),
            check("lint", None, timed_out=True), check("types", 0)],
)  # fmt: skip
BLOCKED = verdict(
    "BLOCKED",
    reasons=["secret found: aws-access-token at cloud.py:3", "checks not run: the candidate "
             "is blocked", f"protected path changed: {HOSTILE}"],
    findings=[finding("gitleaks", "aws-access-token", "cloud.py", 3),
              finding("detect-secrets", "AWS Access Key", "cloud.py", 3),
              finding("detect-secrets", "Secret Keyword", HOSTILE, 1, allowed=True)],
    protected_changes=[{"path": ".github/workflows/ci.yml", "status": "M", "pattern": ".github/"},
                       {"path": HOSTILE, "status": "A", "pattern": "*.py"}],
)  # fmt: skip
SCAN = {
    "findings": [finding("gitleaks", "aws-access-token", "src/a.py", 2),
                 finding("detect-secrets", "AWS Access Key", "src/a.py", 2),
                 finding("gitleaks", "generic-api-key", "docs/b.md", 9, allowed=True)],
    "blocking": 2,
    "scanners": [{"name": "gitleaks", "version": "8.30.1", "digest": "sha256:" + "22" * 32},
                 {"name": "detect-secrets", "version": "1.5.0", "digest": None}],
    "policy_digest": "sha256:" + "33" * 32,
    "scanned_items": 4,
}  # fmt: skip

CASES = {
    "ready": Report("result", READY, 0, ["READY_FOR_HUMAN: ..."], Path("/work/repo")),
    "failed": Report("result", FAILED, 1, ["FAILED: ..."], Path("/work/repo")),
    "blocked": Report("result", BLOCKED, 3, ["BLOCKED: ..."], Path("/work/repo")),
    "scan": Report("scan", SCAN, 3, ["src/a.py:2: ..."], Path("/work/repo")),
}


@pytest.fixture(scope="module")
def sarif_validator() -> jsonschema.protocols.Validator:
    raw = (DATA / "sarif-schema-2.1.0.json").read_bytes()
    assert hashlib.sha256(raw).hexdigest() == SARIF_SCHEMA_SHA256  # the vendored copy
    schema = json.loads(raw)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def results(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for run in doc["runs"] for r in run["results"]]


@pytest.mark.parametrize("case", sorted(CASES))
def test_sarif_is_valid_2_1_0_and_what_github_code_scanning_asks(
    case: str, sarif_validator: jsonschema.protocols.Validator
) -> None:
    text = render("sarif", CASES[case])
    assert KEY not in text and KEY[4:] not in text
    doc = json.loads(text)
    sarif_validator.validate(doc)
    assert doc["version"] == "2.1.0"
    for run in doc["runs"]:
        driver = run["tool"]["driver"]
        rule_ids = {r["id"] for r in driver["rules"]}
        assert all(" " not in rid for rid in rule_ids)
        if driver["name"] != "oms":
            assert driver["informationUri"].startswith("https://github.com/")
        assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == "file:///work/repo/"
        for r in run["results"]:
            assert r["ruleId"] in rule_ids and r["level"] in ("error", "note")
            assert r["partialFingerprints"] and r["locations"]
            loc = r["locations"][0]["physicalLocation"]["artifactLocation"]
            assert loc["uriBaseId"] == "%SRCROOT%" and not loc["uri"].startswith("/")


def test_sarif_of_each_outcome_holds_what_decided_it() -> None:
    def ids(case: str) -> list[str]:
        return sorted(r["ruleId"] for r in results(json.loads(render("sarif", CASES[case]))))

    assert ids("ready") == []
    assert ids("failed") == ["oms/check-failed", "oms/check-failed"]  # exit 1 and time-out
    assert ids("blocked") == ["aws-access-key", "aws-access-token", "oms/protected-path",
                              "oms/protected-path", "secret-keyword"]  # fmt: skip
    blocked = results(json.loads(render("sarif", CASES["blocked"])))
    levels = {r["ruleId"]: r["level"] for r in blocked}
    assert levels["secret-keyword"] == "note" and levels["aws-access-token"] == "error"
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in blocked}
    assert ".github/workflows/ci.yml" in uris and "cloud.py" in uris
    assert "evil%7Cname%3Cscript%3E%1B%5B31m%E2%80%AE.py" in uris  # percent-encoded, as data
    scan = results(json.loads(render("sarif", CASES["scan"])))
    assert {r["partialFingerprints"]["omsSecretSha256/v1"] for r in scan} == {
        SCAN["findings"][0]["fingerprint"]
    }


def test_sarif_outside_the_repository_is_an_absolute_file_uri() -> None:
    data = {**SCAN, "findings": [finding("gitleaks", "aws-access-token", "/elsewhere/x.py", 1)]}
    doc = json.loads(render("sarif", Report("scan", data, 3, None, Path("/work/repo"))))
    loc = results(doc)[0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert loc == {"uri": "file:///elsewhere/x.py"}


def test_sarif_names_given_relative_to_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.py").write_text("x\n")
    data = {**SCAN, "findings": [finding("gitleaks", "aws-access-token", "x.py", 1)]}
    report = Report("scan", data, 3, None, root=tmp_path, cwd=tmp_path / "sub")
    loc = results(json.loads(render("sarif", report)))[0]["locations"][0]
    assert loc["physicalLocation"]["artifactLocation"]["uri"] == "sub/x.py"


def junit(case: str) -> ET.Element:
    return ET.fromstring(render("junit", CASES[case]).encode())  # our own output


@pytest.mark.parametrize(
    ("case", "tests", "failures"),
    [("ready", 4, 0), ("failed", 5, 2), ("blocked", 2, 2), ("scan", 2, 1)],
)
def test_junit_parses_with_the_right_counts(case: str, tests: int, failures: int) -> None:
    root = junit(case)
    suite = root.find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert len(cases) == tests == int(root.get("tests", "")) == int(suite.get("tests", ""))
    failed = [c for c in cases if c.find("failure") is not None]
    assert len(failed) == failures == int(root.get("failures", ""))


def test_junit_failure_carries_the_check_tail_sanitised() -> None:
    cases = {c.get("name"): c for c in junit("failed").iter("testcase")}
    unit = cases["unit"].find("failure")
    assert unit is not None and unit.get("message") == "exit 1"
    assert "FAIL: test_add" in (unit.text or "") and "\x1b" not in (unit.text or "")
    lint = cases["lint"].find("failure")
    assert lint is not None and lint.get("message") == "timed out"
    assert cases["types"].find("failure") is None
    assert cases["unit"].get("time") == "1.250"


def test_junit_scan_is_one_testcase_per_file() -> None:
    names = {c.get("name"): c.find("failure") is not None for c in junit("scan").iter("testcase")}
    assert names == {"src/a.py": True, "docs/b.md": False}  # b.md's finding is allowed
    empty = {**SCAN, "findings": [], "blocking": 0}
    root = ET.fromstring(render("junit", Report("scan", empty, 0)).encode())
    assert root.get("tests") == "1" and root.get("failures") == "0"


def _raw_controls(text: str) -> list[str]:
    return [c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf")]


@pytest.mark.parametrize("case", sorted(CASES))
def test_markdown_has_no_secret_no_raw_control_and_no_live_html(case: str) -> None:
    text = render("markdown", CASES[case])
    assert KEY not in text and KEY[4:] not in text
    assert _raw_controls(text) == []
    assert "<script>" not in text and "<b>" not in text
    for line in text.splitlines():  # a hostile name cannot add a table column
        if line.startswith("| ") and "evil" in line:
            assert "evil&#124;name" in line and line.count("|") in (4, 7)  # 3 or 6 columns


def test_markdown_verdict_page() -> None:
    failed = render("markdown", CASES["failed"])
    assert failed.startswith("## oms result gate: ❌ FAILED")
    assert "- check unit failed \\(exit 1\\)" in failed
    assert "| unit | ❌ exit 1 | 1.2 s |" in failed and "| lint | ❌ timed out |" in failed
    assert "<details><summary>Output of <code>unit</code></summary>" in failed
    assert "&lt;/pre&gt;&lt;b&gt;x&lt;/b&gt;" in failed  # the tail cannot close its <pre>
    assert failed.count("<details>") == 2  # only the failed checks fold their output
    blocked = render("markdown", CASES["blocked"])
    assert "### Protected paths changed" in blocked and "**blocking**" in blocked
    assert "| <code>cloud.py</code> | 3 | aws-access-token | gitleaks |" in blocked
    ready = render("markdown", CASES["ready"])
    assert ready.startswith("## oms result gate: ✅ READY_FOR_HUMAN") and "No finding." in ready


def test_markdown_scan_page() -> None:
    text = render("markdown", CASES["scan"])
    assert text.startswith("## oms scan: ⛔ 2 finding(s) not allowed by policy")
    assert "4 item(s) scanned by gitleaks 8.30.1, detect-secrets 1.5.0; exit code 3." in text
    assert text.count("| <code>src/a.py</code> | 2 |") == 2


VERIFIED = {"ok": True, "oms_exit_code": 0, "commit": "c" * 40, "verified": True,
            "signer": "laptop", "attestations": 2,
            "checks": [{"check": "signature", "ok": True, "detail": "laptop"},
                       {"check": "note", "ok": True, "detail": "2 line(s)"}]}  # fmt: skip


def test_markdown_verification_page_names_the_commit_the_signer_and_each_check() -> None:
    text = markdown.verify_summary(json.dumps(VERIFIED), 0)
    assert text.startswith("## oms provenance: ✅ verified\n")
    assert f"Commit {'c' * 40}: signer laptop; 2 attestation(s) in its note; exit code 0." in text
    assert "| signature | ✅ ok | laptop |" in text and "| note | ✅ ok | 2 line\\(s\\) |" in text


def test_markdown_verification_page_escapes_what_came_from_the_repository_or_the_note() -> None:
    evil = "[x](https://e.example) <b>evil|name</b>\x1b[2J\u202e"
    data = {**VERIFIED, "verified": False, "signer": None, "commit": evil,
            "checks": [{"check": evil, "ok": False, "detail": evil}]}  # fmt: skip
    text = markdown.verify_summary(json.dumps(data), 3)
    assert text.startswith("## oms provenance: ⛔ not verified") and "no trusted signer" in text
    assert "<b>" not in text and "](" not in text and _raw_controls(text) == []
    [row] = [line for line in text.splitlines() if line.startswith("| ") and "evil" in line]
    assert "❌ failed" in row and row.count("|") - row.count("\\|") == 4  # 3 columns


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "not json",
        '{"ok": false, "oms_exit_code": 2, '
        '"error": {"kind": "usage", "message": "no [such](x) option"}}',
    ],
)
def test_markdown_verification_page_of_a_refusal_is_one_line(raw: str) -> None:
    text = markdown.verify_summary(raw, 2)
    assert text.startswith("## oms provenance: ⛔ not verified\n")
    assert "oms refused before any check (exit 2)" in text and "](" not in text
    assert "verified: " not in text and "### Checks" not in text


def test_text_is_the_command_lines_and_json_the_json_object() -> None:
    for case, report in CASES.items():
        assert render("text", report) == "\n".join(report.text or ()) + "\n", case
        obj = json.loads(render("json", report))
        assert obj == {"ok": report.code == 0, "oms_exit_code": report.code, **report.data}
    assert json.loads(render("text", Report("scan", SCAN, 3))) == SCAN  # no lines: JSON


def test_every_format_renders_every_case() -> None:
    for fmt in FORMATS:
        for report in CASES.values():
            assert render(fmt, report).endswith("\n")
