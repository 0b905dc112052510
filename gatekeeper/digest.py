"""One typed SHA-256 digest: parsed once at a boundary, stored and compared in one form.

Its text form is `sha256:` + 64 lowercase hex digits. Any other spelling a user or
a caller may type (bare hex, upper case) is normalised by `parse`, so that two
spellings of one digest can never name two different things.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
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


# A digest typed by a human may be shortened to a prefix this long (48 bits: a chance
# collision among a machine's manifests or blobs is negligible; an ambiguous one is refused).
MIN_PREFIX_HEX = 12
_HEX_PREFIX = re.compile(r"[0-9a-f]{1,64}")


def hex_prefix(text: str) -> str:
    """The lowercase hex of a digest or a prefix of one (`sha256:` optional), at least
    MIN_PREFIX_HEX digits; a UsageError otherwise."""
    raw = text[len(PREFIX) :] if text[: len(PREFIX)].lower() == PREFIX else text
    low = raw.lower()
    if not (raw.isascii() and _HEX_PREFIX.fullmatch(low)):
        shown = text[:80].encode("ascii", "backslashreplace").decode("ascii")
        raise UsageError(f"not a digest or a digest prefix (hex digits): {shown!r}")
    if len(low) < MIN_PREFIX_HEX:
        raise UsageError(f"a digest prefix needs at least {MIN_PREFIX_HEX} hex digits; "
                         f"{text[:80]!r} has {len(low)}")  # fmt: skip
    return low


def resolve_prefix(text: str, known: Iterable[str], what: str) -> Sha256Digest:
    """The one digest among `known` (hex) that `text` names, in full or by a unique prefix.

    A full digest is returned as typed even when it is not known (the caller's lookup
    then says it does not exist); a prefix must match exactly one."""
    prefix = hex_prefix(text)
    if len(prefix) == 64:
        return Sha256Digest(prefix)
    matches = sorted({k for k in known if k.startswith(prefix)})
    if not matches:
        raise UsageError(f"no {what} starts with {prefix}")
    if len(matches) > 1:
        raise UsageError(f"{prefix} is ambiguous: {len(matches)} {what}s start with it; "
                         "give more digits")  # fmt: skip
    return Sha256Digest(matches[0])
