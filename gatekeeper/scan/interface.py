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


@dataclass(frozen=True)
class ScannerInfo:
    name: str
    version: str
    digest: str | None  # of the binary, where there is one

    def to_json(self) -> dict[str, object]:
        return asdict(self)


class Scanner(ABC):
    @property
    @abstractmethod
    def info(self) -> ScannerInfo: ...

    @abstractmethod
    def scan(self, items: Sequence[ScanItem]) -> list[Finding]:
        """All findings in `items`; ScannerUnavailable on any scanner failure."""
