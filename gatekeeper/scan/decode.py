"""Bytes to the text views a scanner reads: UTF-8, and UTF-16/UTF-32 decoded first.

A secret written in UTF-16 or UTF-32 has a NUL between its characters, so no
pattern would match its bytes. Such text is recognised by its byte-order mark or,
without one, by where its NUL bytes fall, and decoded. The bytes are always
scanned as well (read as UTF-8), so a guess that is wrong only costs time: it can
never hide what a plain byte scan would find.
"""

from __future__ import annotations

_BOMS = (  # longest first: the UTF-32 LE mark begins with the UTF-16 LE one
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
SAMPLE = 1 << 16


def _zero_share(sample: bytes, step: int) -> list[float]:
    """For each position modulo `step`, the share of NUL bytes there."""
    shares = []
    for r in range(step):
        column = sample[r::step]
        shares.append(column.count(0) / len(column) if column else 0.0)
    return shares


def guess_encoding(data: bytes) -> str | None:
    """A UTF-16/UTF-32 encoding that `data` is written in, or None for bytes read as UTF-8."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            return name
    sample = data[:SAMPLE]
    if b"\0" not in sample or len(sample) < 4:
        return None
    z4 = _zero_share(sample[: len(sample) // 4 * 4], 4)
    if min(z4[2], z4[3]) > 0.9 and z4[0] < 0.5:
        return "utf-32-le"
    if min(z4[0], z4[1]) > 0.9 and z4[3] < 0.5:
        return "utf-32-be"
    even, odd = _zero_share(sample[: len(sample) // 2 * 2], 2)
    if odd > 0.25 and even < 0.1:
        return "utf-16-le"
    if even > 0.25 and odd < 0.1:
        return "utf-16-be"
    return None


def as_utf8(data: bytes) -> str:
    """Bytes as UTF-8; bytes that are not UTF-8 survive as surrogates (surrogateescape)."""
    return data.decode("utf-8", "surrogateescape")


def text_views(data: bytes) -> list[str]:
    """The texts to scan for `data`: its decoded text when it is UTF-16/32, then the bytes."""
    raw = as_utf8(data.removeprefix(b"\xef\xbb\xbf"))
    encoding = guess_encoding(data)
    if encoding is None:
        return [raw]
    decoded = data.decode(encoding, "replace").removeprefix("\ufeff")
    return [decoded, raw] if decoded != raw else [raw]
