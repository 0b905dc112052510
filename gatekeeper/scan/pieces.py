"""Text cut into the pieces Gitleaks is given: each read whole and matched whole by it.

Gitleaks reads each file in chunks (100,000 bytes, then up to 25,000 more looking for
a blank line) and matches each chunk alone: a secret across a chunk boundary is
missed. oms therefore cuts the text into pieces itself, each a file smaller than
one chunk, consecutive pieces overlapping by OVERLAP_BYTES, and lines longer than
SEGMENT_BYTES into overlapping segments: every match of up to OVERLAP_BYTES lies
wholly inside some piece. Gitleaks also sniffs the first bytes of a file for a
binary type and skips the file on a match (%PDF, MZ, "ustar" at 257, "CD001" at
32,769...): each piece starts with a fixed header deeper than every offset it reads
but the last, and a piece whose bytes hold that last one ("CD001" at 32,769, ISO 9660)
is cut shorter than it. Pieces are large (each file costs Gitleaks ~10 ms of CPU).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gatekeeper.scan.interface import ScanItem

PIECE_BYTES = 90_000
ISO_MAGIC = (32_769, b"CD001")
SNIFF_SAFE_BYTES = 32_000  # a piece this short is never read as an ISO image
OVERLAP_BYTES = 6_000
SEGMENT_BYTES = 12_000
HEADER = b"\n" + b"#" * 298 + b"\n"
HEADER_LINES = HEADER.count(b"\n")


def virtual_lines(items: Sequence[ScanItem]) -> tuple[list[tuple[str, int]], list[bytes]]:
    """(path, line) of each line Gitleaks reads, and its bytes with a newline; a long line
    is several overlapping segments with the same (path, line)."""
    where, lines = indexed_lines(items)
    return [(items[k].path, number) for k, number in where], lines


def indexed_lines(items: Sequence[ScanItem]) -> tuple[list[tuple[int, int]], list[bytes]]:
    """As `virtual_lines`, each line named by (index of its item, line number)."""
    where: list[tuple[int, int]] = []
    lines: list[bytes] = []
    stride = SEGMENT_BYTES - OVERLAP_BYTES
    for k, item in enumerate(items):
        for number, text in item.lines:
            data = _encode(text.replace("\n", " "))
            start = 0
            while True:
                where.append((k, number))
                lines.append(data[start : start + SEGMENT_BYTES] + b"\n")
                if start + SEGMENT_BYTES >= len(data):
                    break
                start += stride
    return where, lines


def item_pieces(
    where: Sequence[tuple[int, int]],
    sizes: Sequence[int],
    sniffed: Callable[[int, int], bool] | None = None,
) -> list[tuple[int, int]]:
    """As `cut_pieces`, but no piece holds lines of two items: each item is matched alone."""
    pieces: list[tuple[int, int]] = []
    start = 0
    while start < len(sizes):
        end = start
        while end < len(sizes) and where[end][0] == where[start][0]:
            end += 1

        def local(a: int, b: int, base: int = start) -> bool:
            return sniffed is not None and sniffed(a + base, b + base)

        pieces += [(a + start, b + start) for a, b in cut_pieces(sizes[start:end], local)]
        start = end
    return pieces


def cut_pieces(
    sizes: Sequence[int], sniffed: Callable[[int, int], bool] | None = None
) -> list[tuple[int, int]]:
    """[start, end) line ranges: each piece fits PIECE_BYTES with the header (or
    SNIFF_SAFE_BYTES where `sniffed(start, end)` says Gitleaks would skip it as binary),
    and the next one starts early enough that the two share at least OVERLAP_BYTES."""
    pieces: list[tuple[int, int]] = []
    start = 0
    while start < len(sizes):
        end = _piece_end(sizes, start, PIECE_BYTES - len(HEADER))
        if sniffed is not None and sniffed(start, end):
            end = _piece_end(sizes, start, SNIFF_SAFE_BYTES - len(HEADER))
        pieces.append((start, end))
        if end >= len(sizes):
            break
        # Lines are at most SEGMENT_BYTES + 1, so the shared part (< OVERLAP_BYTES plus
        # one line) and one new line always fit the next piece: it always moves on.
        nxt, shared = end, 0
        while nxt > start + 1 and shared < OVERLAP_BYTES:
            nxt -= 1
            shared += sizes[nxt]
        start = nxt
    return pieces


def _piece_end(sizes: Sequence[int], start: int, budget: int) -> int:
    end, size = start, 0
    while end < len(sizes) and size + sizes[end] <= budget:
        size += sizes[end]
        end += 1
    return end


def sniffed_as_iso(lines: Sequence[bytes]) -> Callable[[int, int], bool]:
    """Whether the piece of lines [start, end), after the header, holds ISO 9660's magic
    where Gitleaks' file-type sniff looks for it."""
    offset, magic = ISO_MAGIC
    at = offset - len(HEADER)

    def sniffed(start: int, end: int) -> bool:
        data = b"".join(lines[start:end])
        return data[at : at + len(magic)] == magic

    return sniffed


def _encode(text: str) -> bytes:
    """Bytes as read (surrogateescape); a lone surrogate from elsewhere must not crash the gate."""
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")
