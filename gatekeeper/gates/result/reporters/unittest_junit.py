"""`python -m unittest` that also writes a JUnit report: oms' unittest reporter.

Usage: python unittest_junit.py REPORT [--only FILE]... -- [unittest args...]

Runs INSIDE the check's sandbox with the check's own Python: stdlib only, Python 3.8 syntax,
nothing from gatekeeper. The loader, the runner and the exit status are unittest's own
(`unittest.main` with `module=None`, as `python -m unittest` calls it); the one addition is
a result class that records each test's outcome. `--only FILE` keeps the tests whose module
file (relative to the working directory) is one of the FILEs.
"""

from __future__ import annotations

import os
import sys
import unittest

# Only writes XML: it never parses any.
import xml.etree.ElementTree as ET  # nosec B405
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

PASSED, FAILED, SKIPPED, ERROR = "passed", "failed", "skipped", "error"
# A test reported twice (subtests, then the test itself) keeps its worst outcome.
_RANK = {PASSED: 0, SKIPPED: 1, FAILED: 2, ERROR: 3}
_CHILD = {SKIPPED: "skipped", FAILED: "failure", ERROR: "error"}


def _key(test: Any) -> tuple[str, str]:
    """(classname, name): `module.Class` and the method, split from unittest's own id.

    A doctest (`pkg.mod.func`) splits at its last dot; setUpClass/setUpModule errors and
    failed imports keep unittest's description, or the module's name, as the name."""
    if _failed_import(test):
        return ("", str(test._testMethodName))  # the module that did not import
    ident = str(test.id()) if hasattr(test, "id") else str(test)
    if not isinstance(test, unittest.TestCase):
        return ("", ident)
    cls = type(test)
    prefix = f"{cls.__module__}.{cls.__qualname__}."
    if ident.startswith(prefix):
        return (prefix[:-1], ident[len(prefix) :])
    head, _, tail = ident.rpartition(".")
    return (head, tail)


def _failed_import(test: Any) -> bool:
    return type(test).__name__ == "_FailedTest" and type(test).__module__ == "unittest.loader"


def _module_file(test: Any) -> str | None:
    """The test's module file relative to the working directory, or None outside it."""
    if _failed_import(test):
        return _guess_module_file(str(test._testMethodName))
    module = sys.modules.get(type(test).__module__)
    path = getattr(module, "__file__", None)
    if not isinstance(path, str):
        return None
    rel = os.path.relpath(os.path.abspath(path), os.getcwd())
    return None if rel == os.pardir or rel.startswith(os.pardir + os.sep) else rel


def _guess_module_file(module: str) -> str | None:
    """The file a module that failed to import would have been loaded from, if it exists."""
    base = os.path.join(*module.split("."))
    for rel in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(rel):
            return os.path.normpath(rel)
    return None


class RecordingResult(unittest.TextTestResult):
    """unittest's text result, noting each test's outcome and module file as it goes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outcomes: dict[tuple[str, str], str] = {}
        self.files: dict[tuple[str, str], str | None] = {}

    def _note(self, test: Any, outcome: str) -> None:
        key = _key(test)
        if key not in self.files:
            self.files[key] = _module_file(test) if isinstance(test, unittest.TestCase) else None
        old = self.outcomes.get(key)
        if old is None or _RANK[outcome] > _RANK[old]:
            self.outcomes[key] = outcome

    def addSuccess(self, test: unittest.TestCase) -> None:
        super().addSuccess(test)
        self._note(test, PASSED)

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addFailure(test, err)
        self._note(test, FAILED)

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        super().addError(test, err)
        self._note(test, ERROR)

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        super().addSkip(test, reason)
        self._note(test, SKIPPED)

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        super().addExpectedFailure(test, err)
        self._note(test, SKIPPED)

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        super().addUnexpectedSuccess(test)
        self._note(test, FAILED)

    def addSubTest(self, test: unittest.TestCase, subtest: unittest.TestCase, err: Any) -> None:
        super().addSubTest(test, subtest, err)
        if err is not None:
            failure = issubclass(err[0], test.failureException)
            self._note(test, FAILED if failure else ERROR)


class RecordingRunner(unittest.TextTestRunner):
    resultclass = RecordingResult


def _tests(suite: Any) -> Iterator[Any]:
    if isinstance(suite, unittest.TestSuite):
        for item in suite:
            yield from _tests(item)
    else:
        yield suite


def only_files(suite: Any, files: set[str]) -> unittest.TestSuite:
    """A flat suite of the tests in `suite` whose module file is one of `files`."""
    return unittest.TestSuite(t for t in _tests(suite) if _module_file(t) in files)


def write_report(path: str, result: RecordingResult) -> None:
    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", name="unittest", tests=str(len(result.outcomes)))
    for (classname, name), outcome in result.outcomes.items():
        case = ET.SubElement(suite, "testcase", classname=classname, name=name)
        file = result.files.get((classname, name))
        if file is not None:
            case.set("file", file.replace(os.sep, "/"))
        if outcome != PASSED:
            ET.SubElement(case, _CHILD[outcome])
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


class Program(unittest.TestProgram):
    """unittest's own program, narrowed by `--only`, writing the report once the run ends."""

    def __init__(self, report: str, only: set[str] | None, argv: list[str]) -> None:
        self.report = report
        self.only = only
        super().__init__(module=None, argv=argv, testRunner=RecordingRunner)

    def runTests(self) -> None:
        if self.only is not None:
            self.test = only_files(getattr(self, "test"), self.only)  # noqa: B009
        try:
            # unittest computes the exit status (3.12+ exits 5 when no test ran): let it.
            super().runTests()
        finally:
            result = getattr(self, "result", None)
            if isinstance(result, RecordingResult):
                write_report(self.report, result)


def parse(args: Sequence[str]) -> tuple[str, set[str] | None, list[str]]:
    """REPORT [--only FILE]... -- ARGS -> (report, only files or None, unittest args)."""
    cut = list(args).index("--") if "--" in args else 0
    if cut < 1:
        sys.exit("usage: unittest_junit.py REPORT [--only FILE]... -- [unittest args...]")
    head, rest = list(args[1:cut]), list(args[cut + 1 :])
    only: set[str] | None = None
    while head:
        flag = head.pop(0)
        if flag != "--only" or not head:
            sys.exit(f"unittest_junit.py: unexpected argument {flag!r}")
        only = (only or set()) | {os.path.normpath(head.pop(0))}
    return args[0], only, rest


def main() -> None:
    report, only, rest = parse(sys.argv[1:])
    # As `python -m unittest` does: the working directory first on the path (unless -P/-I).
    if not getattr(sys.flags, "safe_path", False):
        sys.path[0] = os.getcwd()
    Program(report, only, ["python -m unittest", *rest])


if __name__ == "__main__":
    main()
