"""Making untrusted text safe to print on a terminal."""

from __future__ import annotations

import unicodedata

# Bidirectional overrides/isolates and zero-width characters that can make a
# terminal show something other than what the bytes say.
_INVISIBLE = {
    "\u200b", "\u200c", "\u200d", "\u200e", "\u200f", "\u2060", "\ufeff",
    "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
    "\u2066", "\u2067", "\u2068", "\u2069", "\u061c",
}  # fmt: skip


def sanitize(text: str, limit: int = 2000) -> str:
    """One line of printable text: controls, escapes, bidi and zero-width shown as \\uXXXX."""
    out = []
    for ch in text:
        if ch in _INVISIBLE or unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp"):
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    result = "".join(out)
    return result if len(result) <= limit else result[:limit] + "…"


def path_text(raw: bytes | str) -> str:
    """A file name (possibly not UTF-8) as printable text."""
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "backslashreplace")
    return sanitize(raw.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"))
