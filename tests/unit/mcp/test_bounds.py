"""The MCP result bound, paging, path hiding and error cleaning, without a server."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import pydantic_core
import pytest
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent

from gatekeeper.errors import Blocked, Unavailable, UsageError
from gatekeeper.mcp.bounds import (
    CUT_NOTE,
    ERROR_CHARS,
    LINE_CHARS,
    MAX_RESULT_BYTES,
    PAGE_BYTES,
    Result,
    answer,
    bounded,
    clean_error,
    fit,
    hide_paths,
    hide_paths_in,
    json_size,
    page,
    sanitize_lines,
    tool_errors,
)
from policy import PolicyError


def sent(result: Result) -> int:
    """Bytes of the text content that goes out: the compact JSON of the result."""
    return len(pydantic_core.to_json(result))


# -- fit and page ---------------------------------------------------------------------------

FIT_CASES = [
    # (text, offset, budget, expected): the budget counts the JSON form, quotes included
    ("abcdef", 0, 5, "abc"),
    ("abcdef", 4, 100, "ef"),
    ("abc", 5, 10, ""),  # an offset past the end is an empty piece, not an error
    ("abc", 0, 1, ""),  # not even the quotes fit
    ("ééé", 0, 6, "éé"),  # two UTF-8 bytes each
    ("ééé", 0, 7, "éé"),  # half a character never goes out
    ("日本語", 0, 8, "日本"),  # three bytes each
    ("😀😀", 0, 5, ""),  # four bytes, one character
    ("😀😀", 0, 6, "😀"),
    ('a"b', 0, 5, 'a"'),  # a quote is escaped: two bytes
    ("\n\n\n", 0, 6, "\n\n"),
    ("\x01\x01", 0, 8, "\x01"),  # a control character is \u0001: six bytes
    ("\x01\x01", 0, 7, ""),
]


@pytest.mark.parametrize(("text", "offset", "budget", "expected"), FIT_CASES)
def test_fit_takes_the_longest_piece_whose_json_fits(
    text: str, offset: int, budget: int, expected: str
) -> None:
    piece = fit(text, offset, budget)
    assert piece == expected
    assert not piece or json_size(piece) <= budget
    if offset + len(piece) < len(text):  # one more character would not fit
        assert json_size(text[offset : offset + len(piece) + 1]) > budget


PAGE_CASES = [
    ("abcdef", 0, 5, {"text": "abc", "offset": 0, "total_chars": 6, "next_offset": 3,
                      "truncated": True}),
    ("abcdef", 3, 100, {"text": "def", "offset": 3, "total_chars": 6, "next_offset": None,
                        "truncated": False}),
    ("", 0, 100, {"text": "", "offset": 0, "total_chars": 0, "next_offset": None,
                  "truncated": False}),
    ("ééé", 0, 6, {"text": "éé", "offset": 0, "total_chars": 3, "next_offset": 2,
                   "truncated": True}),
]  # fmt: skip


@pytest.mark.parametrize(("text", "offset", "budget", "expected"), PAGE_CASES)
def test_page_says_where_the_next_page_starts(
    text: str, offset: int, budget: int, expected: dict[str, Any]
) -> None:
    assert page(text, offset, "text", budget).to_json() == expected


MIXED = [
    "plain ascii " * 900,
    'é日😀\n"\\\x01' * 700,
    "".join(chr(c) for c in range(32, 3000)) * 3,
]


@pytest.mark.parametrize("text", MIXED, ids=["ascii", "escapes-and-multibyte", "codepoints"])
def test_pages_of_multibyte_text_join_back_to_the_text_and_each_fits(text: str) -> None:
    pieces, offset, pages = [], 0, 0
    while True:
        p = page(text, offset, "diff").to_json()
        assert json_size(p["diff"]) <= PAGE_BYTES
        assert p["truncated"] is (p["next_offset"] is not None)
        pieces.append(p["diff"])
        pages += 1
        if p["next_offset"] is None:
            break
        assert p["next_offset"] > offset
        offset = p["next_offset"]
    assert "".join(pieces) == text
    assert pages > 1


# -- bounded -----------------------------------------------------------------------------

BIG = "x" * (MAX_RESULT_BYTES * 2)

BOUNDED_CASES = [
    # (data, truncated, keys cut)
    ({"a": 1, "b": "short"}, False, set()),
    ({"a": 1, "truncated": True}, True, set()),  # a paged tool's own flag is kept
    ({"a": 1, "big": BIG}, True, {"big"}),
    ({"small": "s", "big": BIG, "bigger": BIG + "y"}, True, {"big", "bigger"}),
    ({"list": ["é" * 100] * 200, "n": 3}, True, {"list"}),
]


@pytest.mark.parametrize(("data", "truncated", "cut"), BOUNDED_CASES)
def test_bounded_cuts_the_largest_fields_until_the_result_fits(
    data: dict[str, Any], truncated: bool, cut: set[str]
) -> None:
    result = bounded(data)
    assert result.ok is True and result.truncated is truncated
    assert sent(result) <= MAX_RESULT_BYTES
    assert {k for k, v in result.data.items() if v == CUT_NOTE} == cut
    assert {k: v for k, v in result.data.items() if k not in cut} == {
        k: v for k, v in data.items() if k not in cut
    }


def test_bounded_leaves_the_callers_data_alone() -> None:
    data = {"big": BIG}
    bounded(data)
    assert data == {"big": BIG}


# -- hidden paths -----------------------------------------------------------------------------


@pytest.fixture
def linked_home(tmp_path: Path, oms_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`$OMS_HOME` spelled through a symlink, so its real path differs from its name."""
    real = tmp_path / "real-state"
    real.mkdir()
    link = tmp_path / "state-link"
    link.symlink_to(real)
    monkeypatch.setenv("OMS_HOME", str(link))
    return link


def test_hide_paths_replaces_the_state_root_its_real_path_and_home(
    linked_home: Path, fake_home: Path
) -> None:
    real = os.path.realpath(linked_home)
    text = f"a {linked_home}/keys/k b {real}/repos c {fake_home}/.ssh/id d /usr/bin/git"
    shown = hide_paths(text)
    assert shown == "a $OMS_HOME/keys/k b $OMS_HOME/repos c ~/.ssh/id d /usr/bin/git"


def test_hide_paths_in_walks_dicts_and_lists_and_keeps_other_values(
    oms_home: Path, fake_home: Path
) -> None:
    value = {
        "path": f"{oms_home}/x",
        "nested": [{"home": f"{fake_home}/y", "n": 3, "ok": True, "none": None}],
    }
    assert hide_paths_in(value) == {
        "path": "$OMS_HOME/x",
        "nested": [{"home": "~/y", "n": 3, "ok": True, "none": None}],
    }


# -- error cleaning ----------------------------------------------------------------------------

ERROR_CASES = [
    (UsageError("path is not served\nsecond line"), "usage: path is not served"),
    (Blocked("protected path changed"), "blocked: protected path changed"),
    (Unavailable("bwrap is missing"), "unavailable: bwrap is missing"),
    (PolicyError("unknown key 'x'"), "policy: unknown key 'x'"),
    (ValueError("a bug"), "internal: a bug"),
    (RuntimeError(), "internal: RuntimeError"),
    (UsageError("red \x1b[31mtext\u202e"), "usage: red \\u001b[31mtext\\u202e"),
]


@pytest.mark.parametrize(("exc", "expected"), ERROR_CASES)
def test_clean_error_is_one_line_with_its_kind(
    oms_home: Path, exc: BaseException, expected: str
) -> None:
    assert clean_error(exc) == expected


def test_clean_error_hides_paths_and_is_bounded(oms_home: Path, fake_home: Path) -> None:
    assert clean_error(UsageError(f"cannot read {oms_home}/keys")) == (
        "usage: cannot read $OMS_HOME/keys"
    )
    long = clean_error(ValueError("y" * 5000))
    assert len(long) == ERROR_CHARS + 1 and long.endswith("…")


def test_sanitize_lines_neutralises_and_bounds_each_line() -> None:
    assert sanitize_lines("a\x07\n" + "z" * 1000) == ["a\\u0007", "z" * LINE_CHARS + "…"]


async def _ok() -> Result:
    return bounded({"a": 1})


async def _fails() -> Result:
    raise UsageError(f"bad input under {os.environ['OMS_HOME']}\ntraceback follows")


async def _tool_error() -> Result:
    raise ToolError("not_found: that entry does not reference that blob")


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (_fails, "usage: bad input under $OMS_HOME"),
        (_tool_error, "not_found: that entry does not reference that blob"),
    ],
)
def test_tool_errors_turns_every_failure_into_one_clean_tool_error(
    oms_home: Path, fn: Any, message: str
) -> None:
    with pytest.raises(ToolError) as caught:
        anyio.run(tool_errors(fn))
    assert str(caught.value) == message
    assert caught.value.__cause__ is None  # no traceback chain reaches the client


def test_tool_errors_passes_a_result_through_as_compact_json() -> None:
    got = anyio.run(tool_errors(_ok))
    assert got == answer(bounded({"a": 1}))
    assert not got.is_error
    assert got.structured_content == {"ok": True, "truncated": False, "data": {"a": 1}}
    (text,) = got.content
    assert isinstance(text, TextContent)
    assert text.text == '{"ok":true,"truncated":false,"data":{"a":1}}'  # no indent, no spaces


def test_bounded_keeps_ok_false_and_cuts_next_actions_last() -> None:
    actions = [{"action": "fix_and_rerun", "description": "d" * 3000}]
    result = bounded({"big": BIG, "next_actions": actions}, ok=False)
    assert result.ok is False and result.truncated is True
    assert result.data == {"big": CUT_NOTE, "next_actions": actions}
    assert sent(result) <= MAX_RESULT_BYTES


async def _unavailable_with_actions() -> Result:
    data = {"decision": "UNAVAILABLE", "next_actions": [{"action": "x"}]}
    raise Unavailable(f"toolchain py is not prepared under {os.environ['OMS_HOME']}", data=data)


def test_a_refusal_with_next_actions_is_an_error_result_that_carries_them(
    oms_home: Path,
) -> None:
    got = anyio.run(tool_errors(_unavailable_with_actions))
    assert isinstance(got, CallToolResult) and got.is_error
    line = "unavailable: toolchain py is not prepared under $OMS_HOME"
    assert [c.text for c in got.content if isinstance(c, TextContent)] == [line]
    assert got.structured_content == {
        "ok": False, "truncated": False,
        "data": {"error": line, "decision": "UNAVAILABLE", "next_actions": [{"action": "x"}]},
    }  # fmt: skip


def test_json_size_counts_utf8_bytes_of_the_json_text() -> None:
    assert json_size("é") == len(json.dumps("é", ensure_ascii=False).encode()) == 4
