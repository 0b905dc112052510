"""Redaction: what of a secret a finding may show, and text with its findings' lines replaced.

No secret value ever leaves a scan (DESIGN.md, "Secrets never leave"): a finding's
preview shows at most a short prefix of a long secret, and redacted text replaces
every line a finding covers, wider than the secret's span, so nothing of it stays.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gatekeeper.scan.interface import Finding

REDACTION_MARK = "[oms: line redacted: {rule}]"
PREVIEW_PREFIX = 4  # characters shown of a secret of at least PREVIEW_MIN_CHARS
PREVIEW_MIN_CHARS = 20


def preview(secret: str) -> str:
    """A preview that shows at most a 4-character prefix of a long secret."""
    shown = secret[:PREVIEW_PREFIX] if len(secret) >= PREVIEW_MIN_CHARS else ""
    return f"{shown}…[redacted, {len(secret)} chars]"


def covered_lines(findings: Iterable[Finding]) -> dict[str, frozenset[int]]:
    """path -> the line numbers some finding covers (its first through its last line)."""
    lines: dict[str, set[int]] = {}
    for f in findings:
        lines.setdefault(f.file, set()).update(_span(f))
    return {path: frozenset(rows) for path, rows in lines.items()}


def redact_lines(text: str, findings: Sequence[Finding]) -> str:
    """`text` with every line that holds a finding (through its last line) replaced by a
    marker naming the rule of the last finding there."""
    lines = text.split("\n")
    for f in findings:
        for n in _span(f):
            if 0 < n <= len(lines):
                lines[n - 1] = REDACTION_MARK.format(rule=f.rule)
    return "\n".join(lines)


def _span(f: Finding) -> range:
    return range(f.line, max(f.line, f.end_line or f.line) + 1)
