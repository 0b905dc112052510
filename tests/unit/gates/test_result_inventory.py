"""A check's test inventory: report specs, the shaped and narrowed argv, real reports from
pytest, node and unittest read back exactly, hostile reports refused without blocking, and
the base-to-candidate delta."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.env import clean_env

from gatekeeper.gates.result import inventory as inv
from gatekeeper.gates.result.inventory import (
    Limits,
    Outcome,
    ReportError,
    ReportSpec,
    report_problem,
)

P, F, S, E = Outcome.PASSED, Outcome.FAILED, Outcome.SKIPPED, Outcome.ERROR
REPORT = "/workspace/.oms-report/report.xml"
REPORTER = "/oms/unittest_junit.py"
NODE = "/usr/bin/node"


def _spec(kind: str) -> ReportSpec:
    return ReportSpec.parse("junit:out.xml" if kind == "junit" else kind)


def _env(tmp_path: Path) -> dict[str, str]:
    env = clean_env(tmp_path)
    return {k: v for k, v in env.items() if not k.startswith("PYTEST_")}


def _cases(cases: tuple[inv.TestCase, ...]) -> list[tuple[str, str | None, Outcome]]:
    return [(c.id, c.file, c.outcome) for c in cases]


def _read_xml(tmp_path: Path, xml: str | bytes, kind: str = "pytest", **limits: int) -> Any:
    data = xml.encode() if isinstance(xml, str) else xml
    (tmp_path / "r.xml").write_bytes(data)
    return inv.read_report(
        _spec(kind), tmp_path, report_rel="r.xml", stdout=b"", limits=Limits(**limits)
    )


# --- report specs ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "path"),
    [
        ("junit:reports/out.xml", "junit", "reports/out.xml"),
        ("junit:out.xml", "junit", "out.xml"),
        ("pytest", "pytest", None),
        ("node-test", "node-test", None),
        ("go-test", "go-test", None),
        ("unittest", "unittest", None),
    ],
)
def test_a_report_spec_parses_a_junit_path_or_a_runner_shorthand(
    text: str, kind: str, path: str | None
) -> None:
    assert ReportSpec.parse(text) == ReportSpec(kind, path)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text",
    ["", "junit", "junit:", "junit:/abs/out.xml", "junit:../out.xml", "junit:a/../out.xml",
     "junit:a//out.xml", "junit:./out.xml", "junit:a\\out.xml", "junit:a\0.xml", "jest",
     "Pytest", " pytest", "pytest:x"],
)  # fmt: skip
def test_a_report_spec_that_is_not_a_plain_relative_path_or_a_known_runner_is_refused(
    text: str,
) -> None:
    with pytest.raises(ValueError) as caught:
        ReportSpec.parse(text)
    assert "\n" not in str(caught.value)


# --- shaping and narrowing the argv ------------------------------------------------------


def _shape(kind: str, argv: list[str]) -> list[str]:
    spec = _spec(kind)
    return inv.shape_argv(spec, argv, report_inside=REPORT, reporter_inside=REPORTER)


JUNITXML = [f"--junitxml={REPORT}", "-o", "junit_family=xunit1"]
NODE_REPORTERS = ["--test-reporter=spec", "--test-reporter-destination=stdout",
                  "--test-reporter=junit", f"--test-reporter-destination={REPORT}"]  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "argv", "shaped"),
    [
        ("junit", ["make", "test"], ["make", "test"]),
        ("pytest", ["/usr/bin/python3", "-m", "pytest", "-q"],
         ["/usr/bin/python3", "-m", "pytest", "-q", *JUNITXML]),
        ("pytest", ["pytest", "-q", "--", "tests/"], ["pytest", "-q", *JUNITXML, "--", "tests/"]),
        ("pytest", ["uv", "run", "--", "pytest", "-x"],
         ["uv", "run", "--", "pytest", "-x", *JUNITXML]),
        ("node-test", ["/usr/bin/node", "--test", "test/"],
         ["/usr/bin/node", *NODE_REPORTERS, "--test", "test/"]),
        ("go-test", ["/usr/local/go/bin/go", "test", "./..."],
         ["/usr/local/go/bin/go", "test", "-json", "./..."]),
        ("go-test", ["go", "-C", "sub", "test", "-run", "X"],
         ["go", "-C", "sub", "test", "-json", "-run", "X"]),
        ("unittest", ["/usr/bin/python3", "-B", "-m", "unittest", "discover", "-s", "tests"],
         ["/usr/bin/python3", "-B", REPORTER, REPORT, "--", "discover", "-s", "tests"]),
        ("unittest", ["python3", "-m", "unittest"], ["python3", REPORTER, REPORT, "--"]),
    ],
)  # fmt: skip
def test_shape_argv_tells_each_runner_where_to_write_its_report(
    kind: str, argv: list[str], shaped: list[str]
) -> None:
    assert _shape(kind, argv) == shaped


@pytest.mark.parametrize(
    ("kind", "argv"),
    [
        ("pytest", ["python3", "-m", "unittest"]),
        ("node-test", ["npm", "test"]),
        ("go-test", ["go", "vet", "./..."]),
        ("go-test", ["test"]),
        ("unittest", ["python3", "-m", "pytest"]),
        ("unittest", ["python3", "-munittest"]),
    ],
)
def test_shape_argv_refuses_an_argv_that_does_not_run_the_declared_runner(
    kind: str, argv: list[str]
) -> None:
    with pytest.raises(ValueError, match=f"check argv does not run {kind}"):
        _shape(kind, argv)


TREE = ["tests/test_a.py", "tests/unit/test_b.py", "src/app.py", "conftest.py"]


@pytest.mark.parametrize(
    ("kind", "argv", "narrowed"),
    [
        ("pytest", ["python3", "-m", "pytest", "-q", "tests", *JUNITXML],
         ["python3", "-m", "pytest", "-q", *JUNITXML, "tests/test_a.py"]),
        # Node ids and ./ and /workspace spellings name their file; option values are kept.
        ("pytest", ["pytest", "./tests/unit/", "tests/test_a.py::test_x", "/workspace/src",
                    "-k", "tests", "--rootdir", ".", "-p", "conftest", "notapath", "-x"],
         ["pytest", "-k", "tests", "--rootdir", ".", "-p", "conftest", "notapath", "-x",
          "tests/test_a.py"]),
        ("pytest", ["pytest", "-q", "--", "-odd", "tests"],
         ["pytest", "-q", "--", "-odd", "tests/test_a.py"]),
        ("pytest", ["pytest", "../elsewhere", "/tmp/tests"],
         ["pytest", "../elsewhere", "/tmp/tests", "tests/test_a.py"]),
        ("node-test", [NODE, *NODE_REPORTERS, "--test", "--require", "tests/test_a.py", "tests"],
         [NODE, *NODE_REPORTERS, "--test", "--require", "tests/test_a.py", "tests/test_a.py"]),
        ("unittest", ["python3", REPORTER, REPORT, "--", "discover", "-s", "tests"],
         ["python3", REPORTER, REPORT, "--only", "tests/test_a.py", "--", "discover", "-s",
          "tests"]),
        ("junit", ["make", "test"], ["make", "test"]),
        ("go-test", ["go", "test", "-json", "./..."], ["go", "test", "-json", "./..."]),
    ],
)  # fmt: skip
def test_narrow_argv_drops_the_test_paths_the_argv_names_and_runs_the_given_files(
    kind: str, argv: list[str], narrowed: list[str]
) -> None:
    spec = _spec(kind)
    assert inv.narrow_argv(spec, argv, ["tests/test_a.py"], tree_paths=TREE) == narrowed


def test_a_file_named_like_an_option_is_passed_as_a_path() -> None:
    narrowed = inv.narrow_argv(ReportSpec("pytest"), ["pytest"], ["-p evil.py"], tree_paths=TREE)
    assert narrowed == ["pytest", "./-p evil.py"]


@pytest.mark.parametrize(
    ("kind", "argv", "files"),
    [
        ("pytest", ["pytest"], []),
        ("unittest", ["python3", "-m", "unittest"], ["tests/test_a.py"]),
        ("unittest", ["python3", "-m", "unittest", "--", "x"], ["tests/test_a.py"]),
        ("node-test", [NODE, "run.js"], ["tests/test_a.py"]),
    ],
)
def test_narrow_argv_refuses_what_it_cannot_narrow(
    kind: str, argv: list[str], files: list[str]
) -> None:
    with pytest.raises(ValueError):
        inv.narrow_argv(_spec(kind), argv, files, tree_paths=TREE)


# --- real reports ------------------------------------------------------------------------

PYTEST_TESTS = """
import pytest

def test_pass():
    pass

def test_fail():
    assert "SECRET-IN-MESSAGE" == 2

@pytest.mark.skip(reason="no")
def test_skip():
    pass

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False

@pytest.mark.xfail(strict=False)
def test_xpass():
    pass

class TestK:
    @pytest.mark.parametrize("x", [1, 2])
    def test_p(self, x):
        assert x == 1

@pytest.fixture
def broken():
    raise RuntimeError("x")

def test_err(broken):
    pass
"""


def test_a_real_pytest_junit_report_reads_back_as_classname_name_ids(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_a.py").write_text(PYTEST_TESTS)
    (tmp_path / "tests" / "test_broken.py").write_text("import no_such_module_here\n")
    (tmp_path / inv.REPORT_DIR).mkdir()
    report = tmp_path / inv.REPORT_DIR / "report.xml"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            "--continue-on-collection-errors", "tests"]  # fmt: skip
    shaped = inv.shape_argv(
        ReportSpec("pytest"), argv, report_inside=str(report), reporter_inside=REPORTER
    )
    run = subprocess.run(shaped, cwd=tmp_path, env=_env(tmp_path), capture_output=True)
    assert run.returncode == 1, run.stdout
    cases = inv.read_report(
        ReportSpec("pytest"), tmp_path, report_rel=f"{inv.REPORT_DIR}/report.xml", stdout=b""
    )
    a, broken = "tests/test_a.py", "tests/test_broken.py"
    assert sorted(_cases(cases)) == sorted([
        ("tests.test_broken", broken, E),
        ("tests.test_a::test_pass", a, P),
        ("tests.test_a::test_fail", a, F),
        ("tests.test_a::test_skip", a, S),
        ("tests.test_a::test_xfail", a, S),
        ("tests.test_a::test_xpass", a, P),
        ("tests.test_a.TestK::test_p[1]", a, P),
        ("tests.test_a.TestK::test_p[2]", a, F),
        ("tests.test_a::test_err", a, E),
    ])  # fmt: skip
    assert "SECRET" not in repr(cases)


NODE_TESTS = """
const { describe, it, test } = require('node:test');
const assert = require('node:assert');
describe('math', () => {
  it('adds', () => { assert.equal(1 + 1, 2); });
  it.skip('skipped one', () => {});
  it.todo('todo one');
  describe('inner', () => {
    it('fails', () => { assert.equal('SECRET-IN-MESSAGE', 2); });
  });
});
test('top level', () => {});
test('with subtests', async (t) => {
  await t.test('sub a', () => {});
});
"""


@pytest.mark.skipif(not os.path.exists(NODE), reason="node is not installed")
def test_a_real_node_junit_report_reads_back_as_suite_paths(tmp_path: Path) -> None:
    (tmp_path / "math.test.js").write_text(NODE_TESTS)
    (tmp_path / inv.REPORT_DIR).mkdir()
    report = tmp_path / inv.REPORT_DIR / "report.xml"
    shaped = inv.shape_argv(
        ReportSpec("node-test"),
        [NODE, "--test", "math.test.js"],
        report_inside=str(report),
        reporter_inside=REPORTER,
    )
    run = subprocess.run(shaped, cwd=tmp_path, env=_env(tmp_path), capture_output=True)
    assert run.returncode == 1
    assert b"math" in run.stdout  # the spec reporter still speaks on stdout
    cases = inv.read_report(
        ReportSpec("node-test"), tmp_path, report_rel=f"{inv.REPORT_DIR}/report.xml", stdout=b""
    )
    assert _cases(cases) == [
        ("math > adds", None, P),
        ("math > skipped one", None, S),
        ("math > todo one", None, S),
        ("math > inner > fails", None, F),
        ("top level", None, P),
        ("with subtests > sub a", None, P),
    ]
    assert "SECRET" not in repr(cases)


def test_a_node_file_that_could_not_run_is_named_by_its_path(tmp_path: Path) -> None:
    xml = """<testsuites>
      <testcase name="/workspace/test/broken.test.js" classname="test" failure="test failed">
        <failure type="testCodeFailure" message="test failed">boom</failure>
      </testcase></testsuites>"""
    cases = _read_xml(tmp_path, xml, "node-test")
    assert _cases(cases) == [("test/broken.test.js", "test/broken.test.js", F)]


UNITTEST_TESTS = """
import unittest

class TestU(unittest.TestCase):
    def test_pass(self):
        pass

    def test_fail(self):
        self.assertEqual("SECRET-IN-MESSAGE", 2)

    def test_error(self):
        raise RuntimeError("x")

    @unittest.skip("no")
    def test_skip(self):
        pass

    @unittest.expectedFailure
    def test_xfail(self):
        self.assertEqual(1, 2)

    @unittest.expectedFailure
    def test_xpass(self):
        pass

    def test_sub(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertLess(i, 2)
"""


def _unittest_project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "tests" / "__init__.py").write_text("")
    (project / "tests" / "test_u.py").write_text(UNITTEST_TESTS)
    (project / "tests" / "test_other.py").write_text(
        "import unittest\n\nclass TestO(unittest.TestCase):\n"
        "    def test_other(self):\n        pass\n"
    )
    (project / "tests" / "test_broken.py").write_text("import no_such_module_here\n")
    (project / inv.REPORT_DIR).mkdir()
    return project


def _run_unittest(
    project: Path, args: list[str], files: list[str] | None = None
) -> tuple[int, tuple[inv.TestCase, ...]]:
    spec = ReportSpec("unittest")
    report = project / inv.REPORT_DIR / "report.xml"
    argv = inv.shape_argv(
        spec,
        [sys.executable, "-m", "unittest", *args],
        report_inside=str(report),
        reporter_inside=str(inv.REPORTER_PATH),
    )
    if files is not None:
        argv = inv.narrow_argv(spec, argv, files, tree_paths=[])
    run = subprocess.run(argv, cwd=project, env=_env(project), capture_output=True)
    rel = f"{inv.REPORT_DIR}/report.xml"
    return run.returncode, inv.read_report(spec, project, report_rel=rel, stdout=b"")


def test_the_unittest_reporter_records_each_outcome_as_junit(tmp_path: Path) -> None:
    code, cases = _run_unittest(_unittest_project(tmp_path), [])
    assert code == 1
    u, o, broken = "tests/test_u.py", "tests/test_other.py", "tests/test_broken.py"
    assert sorted(_cases(cases)) == sorted([
        ("tests.test_broken", broken, E),
        ("tests.test_other.TestO::test_other", o, P),
        ("tests.test_u.TestU::test_pass", u, P),
        ("tests.test_u.TestU::test_fail", u, F),
        ("tests.test_u.TestU::test_error", u, E),
        ("tests.test_u.TestU::test_skip", u, S),
        ("tests.test_u.TestU::test_xfail", u, S),
        ("tests.test_u.TestU::test_xpass", u, F),
        ("tests.test_u.TestU::test_sub", u, F),
    ])  # fmt: skip
    assert "SECRET" not in repr(cases)


def test_the_unittest_reporter_runs_only_the_named_files(tmp_path: Path) -> None:
    project = _unittest_project(tmp_path)
    code, cases = _run_unittest(project, ["-q"], ["tests/test_other.py", "tests/test_broken.py"])
    assert code == 1  # the module that does not import still counts
    assert _cases(cases) == [
        ("tests.test_broken", "tests/test_broken.py", E),
        ("tests.test_other.TestO::test_other", "tests/test_other.py", P),
    ]
    code, cases = _run_unittest(project, ["tests.test_other"], ["tests/test_other.py"])
    assert (code, [c.id for c in cases]) == (0, ["tests.test_other.TestO::test_other"])


UNITTEST_HEAD = "import unittest\nclass T(unittest.TestCase):\n def test_a(self):"


@pytest.mark.parametrize(
    ("files", "args"),
    [
        ({"test_ok.py": f"{UNITTEST_HEAD} pass\n"}, []),
        ({"test_no.py": f"{UNITTEST_HEAD} 1/0\n"}, []),
        ({}, []),
        ({}, ["--no-such-option"]),
    ],
)  # fmt: skip
def test_the_unittest_reporter_exits_as_python_m_unittest_does(
    tmp_path: Path, files: dict[str, str], args: list[str]
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / inv.REPORT_DIR).mkdir()
    plain = subprocess.run([sys.executable, "-m", "unittest", *args], cwd=tmp_path,
                           env=_env(tmp_path), capture_output=True)  # fmt: skip
    report = str(tmp_path / inv.REPORT_DIR / "report.xml")
    shaped = inv.shape_argv(
        ReportSpec("unittest"),
        [sys.executable, "-m", "unittest", *args],
        report_inside=report,
        reporter_inside=str(inv.REPORTER_PATH),
    )
    reported = subprocess.run(shaped, cwd=tmp_path, env=_env(tmp_path), capture_output=True)
    assert reported.returncode == plain.returncode


# --- hostile reports ---------------------------------------------------------------------


def _within(seconds: float, fn: Callable[[], object], fifo: Path) -> dict[str, object]:
    """Run `fn` in a thread; fail the test (after releasing it) if it blocks on `fifo`."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:
            box["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # unblock the reader
        thread.join(5)
        pytest.fail("reading the report blocked on a FIFO")
    return box


def _open(tmp_path: Path, rel: str) -> Callable[[], bytes]:
    return lambda: inv.open_report(tmp_path, rel, 1 << 20)


def test_a_fifo_report_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "report.xml")
    box = _within(5, _open(tmp_path, "report.xml"), tmp_path / "report.xml")
    assert isinstance(box.get("error"), ReportError)
    assert str(box["error"]) == "report is not a regular file"


def test_a_symlinked_report_is_refused_without_reading_its_target(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")  # a target that would block if it were opened
    (tmp_path / "report.xml").symlink_to(tmp_path / "fifo")
    box = _within(5, _open(tmp_path, "report.xml"), tmp_path / "fifo")
    assert str(box["error"]) == "report is not a regular file"


def test_a_report_under_a_symlinked_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "report.xml").write_text("<testsuites/>")
    (tmp_path / "reports").symlink_to(tmp_path / "real")
    with pytest.raises(ReportError, match="symlink"):
        inv.open_report(tmp_path, "reports/report.xml", 1 << 20)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda p: (p / "report.xml").mkdir(), "report is not a regular file"),
        (lambda p: None, "the check declared a report and left none"),
        (lambda p: (p / "report.xml").write_bytes(b"x" * 101), "report larger than 100 bytes"),
    ],
)
def test_a_report_that_is_a_directory_missing_or_too_large_is_refused(
    tmp_path: Path, setup: Callable[[Path], object], message: str
) -> None:
    setup(tmp_path)
    with pytest.raises(ReportError) as caught:
        inv.open_report(tmp_path, "report.xml", 100)
    assert str(caught.value) == message


def test_a_missing_report_directory_means_no_report(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="left none"):
        inv.open_report(tmp_path, "reports/report.xml", 100)


def test_a_report_of_exactly_the_limit_is_read(tmp_path: Path) -> None:
    (tmp_path / "report.xml").write_bytes(b"x" * 100)
    assert inv.open_report(tmp_path, "report.xml", 100) == b"x" * 100


LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>
<testsuites><testcase classname="a" name="&lol3;"/></testsuites>"""


@pytest.mark.parametrize(
    ("xml", "message"),
    [
        (LAUGHS, "malformed report: a DTD is not allowed"),
        ('<!DOCTYPE testsuites><testsuites/>', "malformed report: a DTD is not allowed"),
        ('<testsuites><testcase name="&lol;"/></testsuites>', "malformed report: undefined entity"),
        ("<testsuites><testcase", "malformed report: unclosed token"),
        ("<html/>", "malformed report: the root is 'html'"),
        ('<?xml version="1.0" encoding="x-bogus"?><testsuites/>',
         "malformed report: unknown encoding"),
        ("<testsuites>" + "<testsuite>" * 100_000, "report nested deeper than 32 elements"),
        ("<testsuites>" + '<testcase name="t"/>' * 4 + "</testsuites>",
         "report has more than 3 test cases"),
        ('<testsuites><testcase classname="a"/></testsuites>',
         "malformed report: a testcase without a name"),
        ('<testsuites><testcase name="a"><testcase name="b"/></testcase></testsuites>',
         "malformed report: a testcase inside a testcase"),
    ],
)  # fmt: skip
def test_a_hostile_or_malformed_report_is_refused(tmp_path: Path, xml: str, message: str) -> None:
    with pytest.raises(ReportError) as caught:
        _read_xml(tmp_path, xml, max_cases=3)
    assert str(caught.value).startswith(message)


def test_an_external_entity_is_never_fetched(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")  # resolving the entity would block here
    xml = f"""<?xml version="1.0"?>
<!DOCTYPE t [<!ENTITY x SYSTEM "file://{tmp_path}/fifo">]>
<testsuites><testcase name="&x;"/></testsuites>"""
    box = _within(5, lambda: _read_xml(tmp_path, xml), tmp_path / "fifo")
    assert str(box["error"]) == "malformed report: a DTD is not allowed"


def test_control_and_bidi_characters_in_names_are_shown_escaped(tmp_path: Path) -> None:
    xml = ('<testsuites><testcase classname="k" name="a&#x202E;b&#x85;c&#x9;d&#x200B;"'
           ' file="/workspace/t/&#x202E;x.py"/></testsuites>')  # fmt: skip
    (case,) = _read_xml(tmp_path, xml)
    assert case.id == "k::a\\u202eb\\u0085c\\u0009d\\u200b"
    assert case.file == "t/\\u202ex.py"


def test_a_long_id_is_capped(tmp_path: Path) -> None:
    xml = f'<testsuites><testcase classname="k" name="{"x" * 5000}"/></testsuites>'
    (case,) = _read_xml(tmp_path, xml, max_id_chars=64)
    assert len(case.id) == 64
    assert case.id == "k::" + "x" * 60 + "…"


@pytest.mark.parametrize(
    ("file", "kept"),
    [("/workspace/t/a.py", "t/a.py"), ("t/a.py", "t/a.py"), ("./t/a.py", "t/a.py"),
     ("/etc/passwd", None), ("../x.py", None), ("t/../../x.py", None), ("", None)],
)  # fmt: skip
def test_a_report_file_attribute_is_kept_only_as_a_repo_relative_path(
    tmp_path: Path, file: str, kept: str | None
) -> None:
    (case,) = _read_xml(tmp_path, f'<testsuite><testcase name="a" file="{file}"/></testsuite>')
    assert case.file == kept


def test_a_duplicate_id_keeps_a_failure_over_a_pass_and_a_pass_over_a_skip(tmp_path: Path) -> None:
    xml = """<testsuites><testsuite name="one">
      <testcase classname="k" name="a"/><testcase classname="k" name="b"><skipped/></testcase>
      </testsuite><testsuite name="two">
      <testcase classname="k" name="a"><failure message="m">text</failure></testcase>
      <testcase classname="k" name="b"/>
      <testcase classname="k" name="c"><skipped/><error/></testcase>
      <testcase classname="k" name="d"><system-out><failure/></system-out></testcase>
    </testsuite></testsuites>"""
    assert _cases(_read_xml(tmp_path, xml)) == [
        ("k::a", None, F), ("k::b", None, P), ("k::c", None, E), ("k::d", None, P)
    ]  # fmt: skip


GO_JSON = (
    b"""{"Time":"2026-01-01T00:00:00Z","Action":"start","Package":"example.com/m"}
{"Action":"run","Package":"example.com/m","Test":"TestA"}
{"Action":"output","Package":"example.com/m","Test":"TestA","Output":"=== RUN   TestA\\n"}
{"Action":"pass","Package":"example.com/m","Test":"TestA","Elapsed":0}
{"Action":"run","Package":"example.com/m","Test":"TestB"}
{"Action":"run","Package":"example.com/m","Test":"TestB/sub_one"}
{"Action":"fail","Package":"example.com/m","Test":"TestB/sub_one","Elapsed":0}
{"Action":"fail","Package":"example.com/m","Test":"TestB","Elapsed":0}
{"Action":"skip","Package":"example.com/m/sub","Test":"TestC","Elapsed":0}
{"Action":"pass","Package":"example.com/m","Test":"TestA","Elapsed":0}
{"Action":"fail","Package":"example.com/m","Test":"TestA","Elapsed":0}
# example.com/m/broken
not json at all
{"Action":"pass","Package":"example.com/m","Test":7}
["Action","pass"]
"""
    + b"[" * 100_000
    + b"""
{"Action":"fail","Package":"example.com/m","Elapsed":0.1}
{"Action":"skip","Package":"example.com/m/empty"}
"""
)


def test_go_test_json_reads_as_package_and_test_ids(tmp_path: Path) -> None:
    cases = inv.read_report(ReportSpec("go-test"), tmp_path, report_rel=None, stdout=GO_JSON)
    assert _cases(cases) == [
        ("example.com/m::TestA", None, F),  # run again (-count=2) and failed: not hidden
        ("example.com/m::TestB/sub_one", None, F),
        ("example.com/m::TestB", None, F),
        ("example.com/m/sub::TestC", None, S),
    ]


def test_go_test_json_is_bounded(tmp_path: Path) -> None:
    spec = ReportSpec("go-test")
    with pytest.raises(ReportError, match="more than 2 test cases"):
        inv.read_report(spec, tmp_path, report_rel=None, stdout=GO_JSON, limits=Limits(max_cases=2))
    with pytest.raises(ReportError, match="larger than 100 bytes"):
        inv.read_report(
            spec, tmp_path, report_rel=None, stdout=GO_JSON, limits=Limits(max_bytes=100)
        )


# --- the delta -----------------------------------------------------------------------------


def _tc(ident: str, outcome: Outcome = P, file: str | None = "t.py") -> inv.TestCase:
    return inv.TestCase(ident, file, outcome)


def test_compare_finds_removed_disabled_added_and_moved_tests() -> None:
    base = [_tc("a"), _tc("b"), _tc("c"), _tc("d"), _tc("e", F), _tc("f"), _tc("g"), _tc("m1"),
            _tc("m2")]  # fmt: skip
    cand = [_tc("a"), _tc("b", S), _tc("c", F), _tc("new"), _tc("x::d"), _tc("x::m", S),
            _tc("y::m1"), _tc("y::m2")]  # fmt: skip
    digests = {("base", "d"): "D", ("candidate", "x::d"): "D",
               ("base", "m1"): "M", ("base", "m2"): "M", ("candidate", "y::m1"): "M",
               ("candidate", "y::m2"): "M", ("base", "f"): "SKIPPED-MOVE",
               ("candidate", "x::m"): "SKIPPED-MOVE"}  # fmt: skip
    asked: list[tuple[str, str]] = []

    def body_of(case: inv.TestCase, side: str) -> str | None:
        asked.append((side, case.id))
        return digests.get((side, case.id))

    delta = inv.compare(base, cand, body_of=body_of)
    assert delta.removed == ("f", "g")  # f moved and was skipped: still removed
    assert delta.disabled == ("b",)
    assert delta.added == ("new", "x::m")
    assert delta.moved == (("d", "x::d"), ("m1", "y::m1"), ("m2", "y::m2"))
    assert delta.base_counts == {"passed": 8, "failed": 1, "skipped": 0, "error": 0}
    assert delta.candidate_counts == {"passed": 5, "failed": 1, "skipped": 2, "error": 0}
    assert ("base", "a") not in asked and ("base", "e") not in asked  # only gone and new


def test_compare_pairs_moves_one_to_one() -> None:
    delta = inv.compare([_tc("a"), _tc("b")], [_tc("z")], body_of=lambda c, side: "same")
    assert delta.moved == (("a", "z"),)
    assert delta.removed == ("b",)
    assert delta.added == ()


def test_a_test_with_no_digest_is_never_taken_as_moved() -> None:
    delta = inv.compare([_tc("a")], [_tc("b")], body_of=lambda c, side: None)
    assert (delta.removed, delta.added, delta.moved) == (("a",), ("b",), ())


@pytest.mark.parametrize(
    ("report", "argv", "said"),
    [
        ("pytest", ["python", "-m", "unittest", "-q"], "does not run pytest"),
        ("unittest", ["python", "-m", "pytest"], "does not run unittest"),
        ("nonsense", ["python", "-m", "pytest"], "unknown report"),
        ("junit:../out.xml", ["make", "test"], "report path"),
    ],
)
def test_a_report_its_argv_cannot_give_is_named_before_anything_runs(
    report: str, argv: list[str], said: str
) -> None:
    problem = report_problem(report, argv)
    assert problem is not None and said in problem and problem.startswith(f"report = {report!r}")


def test_a_report_its_argv_gives_is_no_problem() -> None:
    assert report_problem("pytest", ["python", "-m", "pytest", "-q"]) is None
    assert report_problem("unittest", ["python", "-m", "unittest", "-q"]) is None
    assert report_problem("junit:out/report.xml", ["make", "test"]) is None
