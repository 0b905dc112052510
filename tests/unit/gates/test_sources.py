"""What `oms scan` counts as binary: a NUL early on that no UTF-16/32 guess explains."""

from __future__ import annotations

from gatekeeper.gates.sources import BINARY_SNIFF, Skipped, is_binary


def test_nul_bytes_early_mean_binary_but_utf16_and_utf32_text_is_text() -> None:
    assert is_binary(b"\x7fELF\x02\x01\x01\x00\x00")
    assert not is_binary(b"plain text\n")
    assert not is_binary("K = 'value'\n".encode("utf-16"))
    assert not is_binary("K = 'value'\n".encode("utf-32-le"))
    assert not is_binary(b"x" * BINARY_SNIFF + b"\0")  # only the first 8 KiB are sniffed


def test_skipped_json_is_path_reason_bytes() -> None:
    assert Skipped("a.bin", "binary", 3).to_json() == {"path": "a.bin", "reason": "binary",
                                                        "bytes": 3}  # fmt: skip
