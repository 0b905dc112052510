"""The lines a literal search matches against: only texts that could hold a match are
split into lines, and a text that withholds a line (a finding) is always among them, so
how long a search takes says nothing about what a withheld line holds."""

from __future__ import annotations

from gatekeeper.mcp import gateway

TEXTS = [
    gateway._Text("a.py", b"x = 1\nthe needle here\n"),
    gateway._Text("b.py", b"nothing to see\n"),
    gateway._Text("c.py", b"the withheld needle line\nother\n"),
    gateway._Text("d.py", b"withheld, without it\nmore\n"),
]
WITHHELD = {"a.py": frozenset[int](), "b.py": frozenset[int](), "c.py": frozenset({1}),
            "d.py": frozenset({1})}  # fmt: skip


def test_a_literal_search_leaves_out_clean_texts_without_the_query() -> None:
    files = gateway._clean_lines(TEXTS, WITHHELD, "needle")
    assert [path for path, _ in files] == ["a.py", "c.py", "d.py"]
    assert files[0][1] == [[1, "x = 1"], [2, "the needle here"], [3, ""]]


def test_a_text_that_withholds_a_line_is_kept_whether_or_not_it_holds_the_query() -> None:
    for query in ("needle", "absent everywhere"):
        kept = {path: rows for path, rows in gateway._clean_lines(TEXTS, WITHHELD, query)}
        assert kept["c.py"] == [[2, "other"], [3, ""]] and kept["d.py"] == [[2, "more"], [3, ""]]


def test_without_a_query_every_text_is_given_less_its_withheld_lines() -> None:
    files = gateway._clean_lines(TEXTS, WITHHELD)
    assert [path for path, _ in files] == ["a.py", "b.py", "c.py", "d.py"]
    assert gateway._literal("needle", files, 10) == [["a.py", 2, "the needle here"]]
