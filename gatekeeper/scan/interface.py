"""What every scanner takes and gives: scan items in, findings out, typed failures.

A finding never carries the secret: only the scanner, rule, file, line, a
fingerprint (SHA-256 of a fixed prefix and the secret) and a redacted preview.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from gatekeeper.errors import Unavailable

FINGERPRINT_PREFIX = b"oms-finding-v1\x00"


class ScannerUnavailable(Unavailable):
    """A scanner is missing, tampered, crashed or timed out: its silence means nothing."""


@dataclass(frozen=True)
class ScanItem:
    """Text to scan: a file's lines (all, or the ones a change adds) with their numbers."""

    path: str
    lines: Sequence[tuple[int, str]]

    @classmethod
    def whole(cls, path: str, text: str) -> ScanItem:
        return cls(path, [(i + 1, line) for i, line in enumerate(text.split("\n"))])


@dataclass(frozen=True)
class Finding:
    scanner: str
    rule: str
    file: str
    line: int
    fingerprint: str
    preview: str
    allowed: bool = field(default=False, compare=False)
    end_line: int | None = field(default=None, compare=False)  # last line of a multi-line secret

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def fingerprint(secret: str) -> str:
    """Hash of the secret (never the secret). Same value, same fingerprint, any scanner."""
    return hashlib.sha256(FINGERPRINT_PREFIX + secret.encode("utf-8", "surrogatepass")).hexdigest()


def redact(secret: str) -> str:
    """A preview that shows at most a 4-character prefix of a long secret."""
    shown = secret[:4] if len(secret) >= 20 else ""
    return f"{shown}…[redacted, {len(secret)} chars]"


REDACTION_MARK = "[oms: line redacted: {rule}]"


def redact_lines(text: str, findings: Sequence[Finding]) -> str:
    """`text` with every line that holds a finding (through its last line) replaced by a
    marker naming the rule: wider than the secret's span, so nothing of it stays."""
    lines = text.split("\n")
    for f in findings:
        for n in range(f.line, (f.end_line or f.line) + 1):
            if 0 < n <= len(lines):
                lines[n - 1] = REDACTION_MARK.format(rule=f.rule)
    return "\n".join(lines)


@dataclass(frozen=True)
class ScannerInfo:
    name: str
    version: str
    digest: str | None  # of the binary, where there is one


class Scanner(ABC):
    @property
    @abstractmethod
    def info(self) -> ScannerInfo: ...

    @abstractmethod
    def scan(self, items: Sequence[ScanItem]) -> list[Finding]:
        """All findings in `items`; ScannerUnavailable on any scanner failure."""
