"""The repo gateway's typed answers render exactly today's tool JSON (keys, order, values)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gatekeeper.mcp.answers import DiffText, FileText, Hit, Listing, Matches
from gatekeeper.mcp.bounds import Page

CASES: list[tuple[Any, str]] = [
    (Listing(("a.py", "b/c.py"), 5, 0),
     '{"files": ["a.py", "b/c.py"], "total": 5, "offset": 0, "next_offset": 2, '
     '"truncated": true}'),
    (Listing(("c.py",), 3, 2),
     '{"files": ["c.py"], "total": 3, "offset": 2, "next_offset": null, "truncated": false}'),
    (Listing((), 0, 0),
     '{"files": [], "total": 0, "offset": 0, "next_offset": null, "truncated": false}'),
    (FileText("x.py", Page("text", "ab", 0, 4), 1),
     '{"path": "x.py", "text": "ab", "offset": 0, "total_chars": 4, "next_offset": 2, '
     '"truncated": true, "redacted_findings": 1}'),
    (Matches((Hit("a.py", 3, "needle here"),), False, 2),
     '{"results": [{"path": "a.py", "line": 3, "text": "needle here"}], "truncated": false, '
     '"redacted_findings": 2}'),
    (DiffText(Page("diff", "d", 4, 5), 0, 1),
     '{"diff": "d", "offset": 4, "total_chars": 5, "next_offset": null, "truncated": false, '
     '"redacted_findings": 0, "files": 1}'),
]  # fmt: skip


@pytest.mark.parametrize(("answer", "expected"), CASES)
def test_each_answer_renders_todays_json(answer: Any, expected: str) -> None:
    assert json.dumps(answer.to_json()) == expected
