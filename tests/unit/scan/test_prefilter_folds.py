"""The prefilter searches ASCII literals ignoring case in a folded copy of the text
(scan/prefilter.py): that copy must map every character a case-insensitive regex matches
with an ASCII letter to that letter, or a line could be dropped."""

from __future__ import annotations

import re
import sys

from gatekeeper.scan.prefilter import _ASCII_FOLDS, _ASCII_FOLDS_TABLE, _Joined


def test_the_folds_are_every_non_ascii_character_matching_an_ascii_letter() -> None:
    chars = "".join(chr(c) for c in range(128, sys.maxunicode + 1) if not 0xD800 <= c < 0xE000)
    assert "".join(re.findall("[a-z]", chars, re.IGNORECASE)) == _ASCII_FOLDS
    for c in _ASCII_FOLDS:
        assert re.fullmatch(c.translate(_ASCII_FOLDS_TABLE), c, re.IGNORECASE)


def test_folded_keeps_offsets_and_finds_what_the_regex_finds() -> None:
    texts = ["plain API_KEY", "\u0130D_TOKEN s\u0131gned pa\u017fs \u212aey", "caf\u00e9 \udcff x",
             "\U0001f511 contrase\u00f1a PASS"]  # fmt: skip
    group = _Joined(texts, range(len(texts)))
    assert len(group.folded) == len(group.text)
    for word in ("api_key", "id_token", "signed", "pass", "key", "x"):
        assert group.holding(word, ignore_case=True) == group.holding(re.compile(word, re.I))
