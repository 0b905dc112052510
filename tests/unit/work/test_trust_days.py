"""`oms trust report`'s pure parts: closed UTC days only, and the per-role tally."""

from __future__ import annotations

from datetime import date

import pytest

from gatekeeper.errors import UsageError
from gatekeeper.work.trust import COUNTS, closed_day, tally

TODAY = date(2026, 12, 2)


def test_a_day_before_today_is_closed() -> None:
    assert closed_day("2026-12-01", TODAY) == date(2026, 12, 1)


@pytest.mark.parametrize("day", ["2026-12-02", "2026-12-03", "2030-01-01"])
def test_today_and_later_are_refused(day: str) -> None:
    with pytest.raises(UsageError, match="not a closed UTC day"):
        closed_day(day, TODAY)


@pytest.mark.parametrize("day", ["2026-13-01", "2026-2-1", "yesterday", "2026-12-01T00:00", ""])
def test_other_spellings_are_refused(day: str) -> None:
    with pytest.raises(UsageError):
        closed_day(day, TODAY)


def _row(role: str, decision: str, grade: str | None, parked: bool = False) -> dict[str, object]:
    return {"role": role, "decision": decision, "grade": grade, "parked": parked}


def test_the_tally_counts_decisions_grades_and_disagreements_per_role() -> None:
    rows = [
        _row("impl", "READY_FOR_HUMAN", "pass"),
        _row("impl", "READY_FOR_HUMAN", "fail"),  # disagrees
        _row("impl", "FAILED", "pass"),  # disagrees: a pass never turns a failure
        _row("impl", "FAILED", "uncertain"),
        _row("impl", "BLOCKED", None, parked=True),
        _row("other", "BLOCKED", "fail"),
    ]
    got = tally(rows)
    assert got["impl"] == {"ready": 2, "failed": 2, "blocked": 1, "parked": 1, "grade_pass": 2,
                           "grade_fail": 1, "grade_uncertain": 1, "disagreements": 2}  # fmt: skip
    assert got["other"] == {**dict.fromkeys(COUNTS, 0), "blocked": 1, "grade_fail": 1}
