"""Redaction: previews that show no secret, and lines replaced through a finding's last line."""

from __future__ import annotations

from gatekeeper.scan import Finding
from gatekeeper.scan.redact import REDACTION_MARK, covered_lines, preview, redact_lines


def finding(file: str, line: int, end: int | None = None, rule: str = "r") -> Finding:
    return Finding("gitleaks", rule, file, line, "0" * 64, "", end_line=end)


def test_preview_shows_a_short_prefix_of_a_long_secret_only() -> None:
    assert preview("A" * 4 + "x" * 16) == "AAAA…[redacted, 20 chars]"
    assert preview("short-secret") == "…[redacted, 12 chars]"


def test_redact_lines_replaces_every_line_of_a_multiline_finding() -> None:
    text = "a\nb\nc\nd"
    out = redact_lines(text, [finding("f", 2, 3, rule="pem")])
    mark = REDACTION_MARK.format(rule="pem")
    assert out.split("\n") == ["a", mark, mark, "d"]


def test_redact_lines_ignores_lines_outside_the_text() -> None:
    assert redact_lines("a\nb", [finding("f", 0), finding("f", 9)]) == "a\nb"


def test_covered_lines_per_path_through_each_last_line() -> None:
    got = covered_lines([finding("a", 2, 4), finding("a", 9), finding("b", 1, None)])
    assert got == {"a": frozenset({2, 3, 4, 9}), "b": frozenset({1})}


def test_covered_lines_keeps_a_findings_own_line_whatever_its_end() -> None:
    assert covered_lines([finding("a", 5, 3)]) == {"a": frozenset({5})}
