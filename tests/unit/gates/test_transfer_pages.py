"""The approval prompt's pages: every line on exactly one screen, in order, each screen one
row short of the terminal (for the "more" line); one screen when it fits or the size is
unknown."""

from __future__ import annotations

import pytest

from gatekeeper.gates.transfer.tty import pages

LINES = [f"line {i}" for i in range(30)]


def test_a_prompt_longer_than_the_terminal_is_cut_into_screens_losing_nothing() -> None:
    screens = pages(LINES, rows=12)
    assert [len(s) for s in screens] == [11, 11, 8]
    assert [line for s in screens for line in s] == LINES


@pytest.mark.parametrize("rows", [0, 1, 2, 31, 200])
def test_one_screen_when_it_fits_beside_the_question_or_the_size_is_unknown(rows: int) -> None:
    assert pages(LINES, rows) == [LINES]


def test_a_prompt_that_leaves_no_row_for_the_question_is_paged() -> None:
    assert len(pages(LINES, rows=30)) == 2
