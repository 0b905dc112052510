"""The tests stage's pure parts: where a reported case lives, a test's bare name, and the
`moved-tests` class accepting a removed test whose name the candidate added elsewhere."""

from __future__ import annotations

import pytest

from gatekeeper.gates.result import integrity
from gatekeeper.gates.result.inventory import Outcome, TestCase
from gatekeeper.gates.result.verdict import TestIssue


@pytest.mark.parametrize(("case", "where"), [
    (TestCase("tests.test_a::test_x", "tests/test_a.py", Outcome.PASSED),
     ("tests/test_a.py", "test_x")),
    (TestCase("tests.test_a.TestK::test_x[1-2]", "tests/test_a.py", Outcome.PASSED),
     ("tests/test_a.py", "TestK.test_x")),
    (TestCase("ut.test_b.TestCalc::test_sub", "ut/test_b.py", Outcome.SKIPPED),
     ("ut/test_b.py", "TestCalc.test_sub")),
    (TestCase("math > adds", "test/a.test.js", Outcome.PASSED), ("test/a.test.js", "math > adds")),
    (TestCase("math > adds", None, Outcome.PASSED), None),
])  # fmt: skip
def test_a_reported_case_is_located_as_the_static_reading_names_tests(
    case: TestCase, where: tuple[str, str] | None
) -> None:
    assert integrity.locate(case) == where


@pytest.mark.parametrize(("test", "name"), [
    ("tests.test_a::test_x[1]", "test_x"), ("TestK.test_x", "test_x"),
    ("suite > inner > adds one", "adds one"), ("test_y", "test_y"),
])  # fmt: skip
def test_a_bare_name_drops_module_class_suite_and_parameters(test: str, name: str) -> None:
    assert integrity.bare_name(test) == name


def test_moved_tests_accepts_a_removed_test_only_when_its_name_was_added() -> None:
    removed = TestIssue(cls="removed-tests", file=None, test="tests.test_a::test_x", what="w")
    other = TestIssue(cls="disabled-tests", file=None, test="tests.test_a::test_x", what="w")
    assert integrity._moved_elsewhere(removed, {"test_x"})
    assert not integrity._moved_elsewhere(removed, {"test_y"})
    assert not integrity._moved_elsewhere(other, {"test_x"})
    nameless = TestIssue(cls="removed-tests", file="t.py", test=None, what="w")
    assert not integrity._moved_elsewhere(nameless, {""})
