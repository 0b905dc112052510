"""One typed SHA-256 digest: parsed once at a boundary, stored and compared in one form.

Its text form is `sha256:` + 64 lowercase hex digits. Any other spelling a user or
a caller may type (bare hex, upper case) is normalised by `parse`, so that two
spellings of one digest can never name two different things.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from gatekeeper.errors import UsageError

PREFIX = "sha256:"
_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Sha256Digest:
    hex: str  # 64 lowercase hex digits, checked in __post_init__

    def __post_init__(self) -> None:
        if not _HEX.fullmatch(self.hex):
            raise UsageError(f"not a SHA-256 digest: {self.hex[:80]!r}")

    @classmethod
    def parse(cls, text: str | Sha256Digest) -> Sha256Digest:
        """`sha256:HEX` or bare `HEX`, in any case; anything else is a UsageError."""
        if isinstance(text, Sha256Digest):
            return text
        raw = text
        if raw[: len(PREFIX)].lower() == PREFIX:
            raw = raw[len(PREFIX) :]
        low = raw.lower()
        if not (raw.isascii() and _HEX.fullmatch(low)):
            shown = text[:80].encode("ascii", "backslashreplace").decode("ascii")
            raise UsageError(f"not a digest (want sha256: and 64 hex digits): {shown!r}")
        return cls(low)

    @classmethod
    def of(cls, data: bytes) -> Sha256Digest:
        return cls(hashlib.sha256(data).hexdigest())

    def __str__(self) -> str:
        return PREFIX + self.hex
