"""The human text of `oms verify` and `oms trust report`, from their JSON (no subprocess)."""

from __future__ import annotations

from typing import Any

from gatekeeper.cli.trust import report_lines
from gatekeeper.cli.verify import verify_lines

TICKET: dict[str, Any] = {"id": "t-0123456789ab", "version": 6, "state": "completed",
                          "human_hold": True, "attempts": 1, "max_attempts": 3,
                          "title": "Add sub\x1b[2J"}  # fmt: skip
VERDICT: dict[str, Any] = {
    "decision": "READY_FOR_HUMAN", "reasons": [], "commit": "a" * 40, "base": "b" * 40,
    "evidence_seq": 12, "checks": [], "findings": [], "protected_changes": [], "delivered": None,
    "timings_ms": {},
}  # fmt: skip


def test_a_graded_verify_shows_verdict_ticket_hold_and_grade() -> None:
    data = {"ticket": TICKET, "verdict": VERDICT, "grade_problem": None,
            "grade": {"grade": "fail", "reasons": ["no test for sub\u202e"], "engine": "command:j",
                      "role": "grader", "seq": 14}}  # fmt: skip
    assert verify_lines(data) == [
        "READY_FOR_HUMAN: aaaaaaaaaaaa (base bbbbbbbbbbbb), evidence seq 12",
        "t-0123456789ab v6 completed (human hold) attempt 1/3: Add sub\\u001b[2J",
        "on human hold: oms never merges",
        "grade fail by grader (command:j), seq 14",
        "  - no test for sub\\u202e",
    ]


def test_a_verify_without_a_grade_says_why_and_that_the_ticket_parked() -> None:
    parked = {**TICKET, "state": "parked", "human_hold": False}
    data = {"ticket": parked, "verdict": VERDICT, "grade": None,
            "grade_problem": "the grader timed out after 2 s"}  # fmt: skip
    assert verify_lines(data)[-1] == "no grade: the grader timed out after 2 s (ticket parked)"


def test_the_trust_report_shows_counts_per_role_and_each_exclusion() -> None:
    counts = {"ready": 1, "failed": 2, "blocked": 0, "parked": 1, "grade_pass": 3,
              "grade_fail": 0, "grade_uncertain": 0, "disagreements": 2}  # fmt: skip
    excluded = [{"verify_seq": 40, "reason": "result 9 is about another ticket"}]
    data = {"day": "2026-11-30", "verdicts": [{}, {}, {}], "by_role": {"impl": counts},
            "excluded": excluded}  # fmt: skip
    assert report_lines(data) == [
        "trust report for 2026-11-30 (UTC, closed): review only, grants nothing",
        "3 protected verdict(s), 1 excluded",
        "impl: ready 1, failed 2, blocked 0, parked 1; grades pass 3, fail 0, uncertain 0; "
        "disagreements 2",
        "excluded seq 40: result 9 is about another ticket",
    ]
