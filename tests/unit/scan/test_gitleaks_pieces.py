"""scan/pieces.py: large, and cut short where Gitleaks would sniff one as an ISO image."""

from __future__ import annotations

import random

import corpus

from gatekeeper.scan import ScanItem
from gatekeeper.scan.gitleaks import Gitleaks
from gatekeeper.scan.pieces import (
    HEADER,
    ISO_MAGIC,
    PIECE_BYTES,
    SNIFF_SAFE_BYTES,
    cut_pieces,
    sniffed_as_iso,
    virtual_lines,
)
from policy import DEFAULT_GITLEAKS_SHA256


def iso_trap(key: str) -> list[str]:
    """Lines whose first piece would hold "CD001" at the sniffed offset, and a key that
    lies in that piece only, unless the piece is cut short."""
    offset, magic = ISO_MAGIC
    lines = ["a" * 99] * ((offset - len(HEADER)) // 100)  # 100 bytes a line with its newline
    pad = offset - len(HEADER) - len(lines) * 100
    lines.append("b" * pad + magic.decode() + "c" * 20)
    lines += ["d" * 99] * 60
    lines.append(f'AWS_KEY = "{key}"')
    lines += ["e" * 99] * 400
    return lines


def test_a_piece_that_would_be_sniffed_as_an_iso_image_is_cut_short() -> None:
    key = corpus.aws_access_key_id(random.Random(5))
    _where, vlines = virtual_lines([ScanItem("trap.txt", list(enumerate(iso_trap(key), 1)))])
    sniffed = sniffed_as_iso(vlines)
    sizes = [len(v) for v in vlines]
    assert sniffed(*cut_pieces(sizes)[0])  # without the check the first piece is a trap
    pieces = cut_pieces(sizes, sniffed)
    assert not any(sniffed(a, b) for a, b in pieces)
    assert sum(sizes[pieces[0][0] : pieces[0][1]]) <= SNIFF_SAFE_BYTES - len(HEADER)
    assert all(sum(sizes[a:b]) <= PIECE_BYTES - len(HEADER) for a, b in pieces)


def test_gitleaks_finds_a_key_in_a_piece_that_held_the_iso_magic() -> None:
    key = corpus.aws_access_key_id(random.Random(5))
    lines = iso_trap(key)
    found = Gitleaks(DEFAULT_GITLEAKS_SHA256, 60).scan(
        [ScanItem("trap.txt", list(enumerate(lines, 1)))]
    )
    key_line = next(n for n, t in enumerate(lines, 1) if key in t)
    assert any(f.line == key_line for f in found)


def test_pieces_are_large_so_gitleaks_reads_few_files() -> None:
    sizes = [100] * 10_000  # 1 MB of 100-byte lines
    assert len(cut_pieces(sizes)) <= 1_000_000 // (PIECE_BYTES - 6_000 - len(HEADER)) + 1
