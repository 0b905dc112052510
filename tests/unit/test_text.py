"""`text.sanitize` / `path_text`: untrusted text printed as one line that shows what its
bytes say (DESIGN.md: human output neutralises terminal control and bidi characters)."""

from __future__ import annotations

import pytest

from gatekeeper.text import path_text, sanitize

ESCAPED = {
    "\x1b[31m": "\\u001b[31m",  # ANSI escape: no colour, no cursor moves
    "\n": "\\u000a", "\r": "\\u000d", "\t": "\\u0009", "\x00": "\\u0000", "\x7f": "\\u007f",
    "\x85": "\\u0085", "\x9b": "\\u009b",  # C1: NEL, CSI
    "\u202e": "\\u202e", "\u2066": "\\u2066", "\u061c": "\\u061c",  # bidi
    "\u200b": "\\u200b", "\ufeff": "\\ufeff", "\u2060": "\\u2060",  # zero width
    "\u2028": "\\u2028", "\u2029": "\\u2029",  # line and paragraph separators
    "\ud800": "\\ud800",  # a lone surrogate
}  # fmt: skip


@pytest.mark.parametrize("raw", sorted(ESCAPED), ids=lambda r: f"U+{ord(r[0]):04X}")
def test_controls_bidi_and_invisible_characters_are_shown_as_escapes(raw: str) -> None:
    assert sanitize(f"a{raw}b") == f"a{ESCAPED[raw]}b"


def test_printable_text_in_any_script_is_kept() -> None:
    text = "café 漢字 😀 ok-[x] \\u0041"
    assert sanitize(text) == text


def test_long_text_is_cut_with_an_ellipsis() -> None:
    assert sanitize("x" * 10, limit=4) == "xxxx…"
    assert sanitize("x" * 4, limit=4) == "xxxx"
    assert sanitize("\n" * 3, limit=12) == "\\u000a" * 2 + "…"  # escapes count to the limit


def test_a_name_that_is_not_utf8_is_shown_with_byte_escapes() -> None:
    assert path_text(b"a\xff\nb") == "a\\xff\\u000ab"
    assert path_text("a\udcffb") == "a\\xffb"  # os.fsdecode's spelling of the same name
    assert path_text("dir/naïve.txt".encode()) == "dir/naïve.txt"
