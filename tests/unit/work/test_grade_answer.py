"""The supplemental grade's pure parts: the grader's answer, the reflection's bound, and the
diff a blocked change never sends (gatekeeper/work/grade.py, gatekeeper/work/verify.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from gatekeeper.agent.run import AgentInterrupted
from gatekeeper.errors import Blocked, Unavailable
from gatekeeper.gates.result.verdict import CheckResult, Decision, ProtectedChange, Verdict
from gatekeeper.work import verify as verify_module
from gatekeeper.work.grade import (
    MAX_REASON_CHARS,
    MAX_REASONS,
    GradeProblem,
    parse_answer,
    withhold_diff,
)
from gatekeeper.work.providers.base import Role
from gatekeeper.work.verify import EXIT_BY_STATE, reflection
from policy import default_policy

SHA = "a" * 40


def test_one_object_with_a_grade_and_reasons_is_an_answer() -> None:
    got = parse_answer('  {"grade": "fail", "reasons": ["no test"], "score": 3, "why": 1}\n')
    assert (got.grade, got.reasons, got.ignored_keys) == ("fail", ("no test",), ("score", "why"))


def test_reasons_are_optional() -> None:
    assert parse_answer('{"grade": "uncertain"}').reasons == ()


@pytest.mark.parametrize(
    "output",
    [
        "",
        "   \n",
        "looks good to me",
        '{"grade": "pass"} {"grade": "pass"}',
        '["pass"]',
        '"pass"',
        '{"grade": "PASS"}',
        '{"grade": "excellent"}',
        '{"reasons": ["fine"]}',
        '{"grade": "pass", "reasons": "fine"}',
        '{"grade": "pass", "reasons": [1, 2]}',
        'I think: {"grade": "pass"}',
    ],
)
def test_anything_else_is_no_grade(output: str) -> None:
    with pytest.raises(GradeProblem):
        parse_answer(output)


def test_reasons_are_bounded_and_sanitised() -> None:
    many = ["x" * 5000] * 50 + ["\x1b[31mred\u202e"]
    got = parse_answer(json.dumps({"grade": "pass", "reasons": many}))
    assert len(got.reasons) == MAX_REASONS
    assert all(len(r) <= MAX_REASON_CHARS + 1 for r in got.reasons)
    got = parse_answer('{"grade": "pass", "reasons": ["\\u001b[31mred\\u202e"]}')
    assert got.reasons == ("\\u001b[31mred\\u202e",)


def _check(name: str, code: int, tail: str) -> CheckResult:
    return CheckResult(name=name, exit_code=code, timed_out=False, signal=None, duration_ms=1,
                       stdout_bytes=len(tail), stderr_bytes=0, stdout_blob="0" * 64,
                       stderr_blob="0" * 64, stdout_tail=tail, stderr_tail="")  # fmt: skip


def _verdict(decision: Decision, **kw: object) -> Verdict:
    return Verdict(decision=decision, reasons=("check unit exited 1",), commit=SHA, base="b" * 40,
                   evidence_seq=7, **kw)  # type: ignore[arg-type]  # fmt: skip


def test_the_reflection_names_the_failed_checks_and_is_bounded() -> None:
    v = _verdict(Decision.FAILED, checks=(_check("unit", 1, "AssertionError: 2 != 3\n" * 300),
                                          _check("lint", 0, "all fine")))  # fmt: skip
    small = reflection(v, None, 256)
    assert len(small) <= 256
    big = reflection(v, None, 65_536).decode()
    assert "check unit: exit 1" in big and "AssertionError: 2 != 3" in big
    assert "check unit exited 1" in big and "lint" not in big


def test_the_reflection_cuts_on_a_character_boundary() -> None:
    v = _verdict(Decision.FAILED, checks=(_check("unit", 1, "é" * 1000),))
    for limit in range(256, 300):
        reflection(v, None, limit).decode("utf-8")  # never a torn character


def test_a_blocked_change_with_a_secret_or_protected_path_never_sends_its_diff() -> None:
    prot = ProtectedChange(path="oms.toml", status="M", pattern="oms.toml")
    assert withhold_diff(_verdict(Decision.BLOCKED, protected_changes=(prot,)))
    assert not withhold_diff(_verdict(Decision.FAILED))
    assert not withhold_diff(_verdict(Decision.READY))


def test_exit_codes_follow_the_ticket_state() -> None:
    assert dict(EXIT_BY_STATE) == {"completed": 0, "retryable": 1, "blocked": 3, "parked": 4}


def test_a_blocked_refusal_of_the_gate_is_its_recorded_verdict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stage that raised (a scratch copy refused) is recorded as BLOCKED; the refusal
    carries the verdict, which the verify goes on with. Any other refusal is raised."""
    blocked = _verdict(Decision.BLOCKED)
    v = SimpleNamespace(commit=SHA, base="b" * 40, ticket="t-" + "0" * 12, attempt=1,
                        dispatch="d-" + "0" * 12, lease="sha256:" + "c" * 64)  # fmt: skip
    work = SimpleNamespace(repo=SimpleNamespace(top="/nowhere"), loaded=default_policy())

    def raising(exc: Exception) -> None:
        monkeypatch.setattr(verify_module, "gate", lambda _req: (_ for _ in ()).throw(exc))

    raising(Blocked("scratch refused", data=blocked.to_json()))
    assert verify_module.judge(work, v, None) == blocked  # type: ignore[arg-type]
    unavailable = _verdict(Decision.UNAVAILABLE).to_json()
    for exc in (Blocked("refused before the gate started"),
                Unavailable("no scanner", data=unavailable)):  # fmt: skip
        raising(exc)
        with pytest.raises(type(exc)):
            verify_module.judge(work, v, None)  # type: ignore[arg-type]


GRADER = Role(name="grader", provider="command:judge", engine="command:judge", model="m",
              auth="none", billing="none", unattended=True, transport="exec",
              authority="read-only", external=False)  # fmt: skip


def test_a_grader_run_oms_refuses_is_no_grade_but_an_interrupted_oms_is_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No grade parks the ticket; a SIGTERM to oms itself leaves the verify `started`."""
    work = SimpleNamespace(repo=SimpleNamespace(top="/nowhere"), loaded=default_policy())
    cases = ((Unavailable("sandbox unavailable"), GradeProblem),
             (AgentInterrupted("interrupted by SIGTERM"), AgentInterrupted))  # fmt: skip
    for exc, expected in cases:

        def run(_req: object, exc: Exception = exc) -> None:
            raise exc

        monkeypatch.setattr(verify_module, "adapter", lambda _role, run=run: run)
        with pytest.raises(expected):
            verify_module.run_grader(work, SHA, GRADER, b"{}")  # type: ignore[arg-type]
