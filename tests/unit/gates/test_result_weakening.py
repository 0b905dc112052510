"""The static reading of test weakening: each way a candidate can weaken tests, Python, JS/TS
and configuration, is named with its file and test; legitimate changes to tests name nothing."""

from __future__ import annotations

from textwrap import dedent
from typing import Any

import pytest

# The module, not its names: pytest would collect an imported `test_bodies` as a test.
from gatekeeper.gates.result import weakening
from gatekeeper.gates.result.versions import MAX_READ_BYTES, FileVersions

PY = "tests/test_math.py"
JS = "web/adds.test.js"

BASE_PY = dedent("""\
    import unittest

    import pytest


    @pytest.fixture
    def numbers():
        return [1, 2]


    def test_add(numbers):
        assert add(1, 2) == 3
        assert add(0, 0) == 0


    @pytest.mark.skip(reason="flaky upstream")
    def test_old():
        assert old() == 1


    class TestMod:
        def test_mod(self):
            assert mod(5, 3) == 2


    class MathCase(unittest.TestCase):
        def test_sub(self):
            self.assertEqual(sub(3, 1), 2)
    """)

BASE_JS = dedent("""\
    describe("adds", () => {
      it("one", () => {
        expect(add(1, 0)).toBe(1);
        expect(add(1, 1)).toBe(2);
      });
      test("two", (t) => {
        assert.equal(add(1, 1), 2);
      });
      it.skip("later", () => {
        expect(later()).toBe(true);
      });
    });
    """)

CONFTEST = dedent("""\
    import pytest

    # fixtures shared by the suite
    @pytest.fixture
    def db():
        return {}


    def pytest_configure(config):
        config.addinivalue_line("markers", "slow: slow tests")
    """)


def _fv(path: str, base: str | None, cand: str | None) -> FileVersions:
    return FileVersions(
        path,
        None if base is None else base.encode(),
        None if cand is None else cand.encode(),
    )


def _py(old: str, new: str) -> str:
    assert old in BASE_PY, old
    return BASE_PY.replace(old, new, 1)


def _js(old: str, new: str) -> str:
    assert old in BASE_JS, old
    return BASE_JS.replace(old, new, 1)


def _found(*files: FileVersions) -> set[tuple[str, str, str | None]]:
    return {(w.kind, w.file, w.test) for w in weakening.read_weakening(files)}


def _whats(*files: FileVersions) -> list[tuple[str, str | None, str]]:
    return [(w.kind, w.test, w.what) for w in weakening.read_weakening(files)]


ADD_1 = "    assert add(1, 2) == 3\n"
ADD_0 = "    assert add(0, 0) == 0\n"
SUB = "        self.assertEqual"
TEST_MOD = "class TestMod:\n    def test_mod(self):\n        assert mod(5, 3) == 2\n"
TEST_TWO = '  test("two", (t) => {\n    assert.equal(add(1, 1), 2);\n  });\n'


def _py_row(name: str, old: str, new: str, *expected: tuple[str, str | None]) -> Any:
    """A change to BASE_PY and the (kind, test) pairs it must name in PY."""
    files = [_fv(PY, BASE_PY, _py(old, new))]
    return pytest.param(files, {(kind, PY, test) for kind, test in expected}, id=name)


def _js_row(name: str, old: str, new: str, *expected: tuple[str, str | None]) -> Any:
    files = [_fv(JS, BASE_JS, _js(old, new))]
    return pytest.param(files, {(kind, JS, test) for kind, test in expected}, id=name)


def _row(name: str, files: list[FileVersions], *expected: tuple[str, str, str | None]) -> Any:
    return pytest.param(files, set(expected), id=name)


def _loose(path: str) -> tuple[str, str, None]:
    return ("config-loosened", path, None)


SKIP, REMOVED, ASSERT = "skip-added", "test-removed", "assert-removed"

# One row per way of weakening, with the exact (kind, file, test) set it must name.
WEAKENED = [
    _py_row("py-unittest-skip", "    def test_sub", '    @unittest.skip("later")\n    def test_sub',
            (SKIP, "MathCase.test_sub")),
    _py_row("py-pytest-mark-skipif", "def test_add",
            "@pytest.mark.skipif(True, reason='x')\ndef test_add",
            (SKIP, "test_add")),
    _py_row("py-pytest-mark-xfail-bare", "def test_add", "@pytest.mark.xfail\ndef test_add",
            (SKIP, "test_add")),
    _py_row("py-expected-failure", "    def test_sub",
            "    @unittest.expectedFailure\n    def test_sub",
            (SKIP, "MathCase.test_sub")),
    _py_row("py-class-decorator", "class TestMod:", "@pytest.mark.skip\nclass TestMod:",
            (SKIP, "TestMod")),
    _py_row("py-class-pytestmark", "class TestMod:\n",
            "class TestMod:\n    pytestmark = pytest.mark.skip\n", (SKIP, "TestMod")),
    _py_row("py-class-dunder-test", "class TestMod:\n", "class TestMod:\n    __test__ = False\n",
            (SKIP, "TestMod")),
    _py_row("py-module-pytestmark", "import pytest\n",
            "import pytest\n\npytestmark = [pytest.mark.skip]\n", (SKIP, None)),
    _py_row("py-module-level-dunder-test", "class MathCase",
            "test_add.__test__ = False\n\n\nclass MathCase", (SKIP, None)),
    _py_row("py-module-level-skip", "import pytest\n",
            "import pytest\n\npytest.skip('no', allow_module_level=True)\n", (SKIP, None)),
    _py_row("py-pytest-skip-in-body", ADD_1, "    pytest.skip('no')\n" + ADD_1, (SKIP, "test_add")),
    _py_row("py-pytest-xfail-in-body", ADD_1, "    pytest.xfail('no')\n" + ADD_1,
            (SKIP, "test_add")),
    _py_row("py-skiptest-in-body", SUB, "        self.skipTest('no')\n" + SUB,
            (SKIP, "MathCase.test_sub")),
    _py_row("py-raise-skiptest", ADD_1, "    raise unittest.SkipTest('no')\n" + ADD_1,
            (SKIP, "test_add")),
    _py_row("py-importorskip-in-body", ADD_1, "    pytest.importorskip('nope')\n" + ADD_1,
            (SKIP, "test_add")),
    _py_row("py-early-return", ADD_1, "    return\n" + ADD_1, (SKIP, "test_add")),
    _row("py-renamed-pytest-import",
         [_fv(PY, BASE_PY, _py("def test_add", "@pt.mark.skip\ndef test_add")
              .replace("import pytest\n", "import pytest\nimport pytest as pt\n"))],
         (SKIP, PY, "test_add")),
    _row("py-aliased-unittest-skip",
         [_fv(PY, BASE_PY, _py("def test_add", "@later\ndef test_add")
              .replace("import unittest\n",
                       "import unittest\nfrom unittest import skip as later\n"))],
         (SKIP, PY, "test_add")),
    _py_row("py-marker-bound-to-a-name", "def test_add",
            "skipper = pytest.mark.skip\n\n@skipper\ndef test_add",
            (SKIP, "test_add"), (SKIP, None)),
    _py_row("py-xfail-inside-parametrize", "def test_add(numbers)",
            "@pytest.mark.parametrize('n', [pytest.param(1, marks=pytest.mark.xfail)])\n"
            "def test_add(numbers, n)", (SKIP, "test_add")),
    _py_row("py-fixture-skips", "    return [1, 2]", "    pytest.skip('no numbers')", (SKIP, None)),
    _py_row("py-new-test-skipped-by-a-call", "@pytest.mark.skip(",
            "def test_new():\n    pytest.skip('todo')\n\n\n@pytest.mark.skip(", (SKIP, "test_new")),
    _py_row("py-new-test-skipped-from-the-start", "class TestMod:",
            "@pytest.mark.skip\ndef test_extra():\n    assert extra()\n\n\nclass TestMod:",
            (SKIP, "test_extra")),
    _py_row("py-test-removed", TEST_MOD, "", (REMOVED, "TestMod.test_mod")),
    _py_row("py-test-class-renamed-out-of-collection", "class TestMod:", "class ModChecks:",
            (REMOVED, "TestMod.test_mod")),
    _py_row("py-test-shadowed-by-a-later-definition", "class TestMod:",
            "def test_add(numbers):\n    pass\n\n\nclass TestMod:", (ASSERT, "test_add")),
    _py_row("py-test-class-rebound", "class MathCase", "TestMod = None\n\n\nclass MathCase",
            (REMOVED, "TestMod.test_mod")),
    _py_row("py-assert-removed", ADD_0, "", (ASSERT, "test_add")),
    _py_row("py-assert-made-trivial", SUB + "(sub(3, 1), 2)", "        self.assertTrue(True)",
            (ASSERT, "MathCase.test_sub")),
    _py_row("py-assert-true", ADD_0, "    assert True\n", (ASSERT, "test_add")),
    _py_row("py-candidate-unparseable", ADD_0, ADD_0 + "def broken(:\n", (REMOVED, None)),
    _py_row("py-pytest-plugins-in-test-module", "import pytest\n",
            "import pytest\n\npytest_plugins = ['cheat']\n", ("config-loosened", None)),
    _py_row("py-generate-tests-hook-in-test-module", "class TestMod:",
            "def pytest_generate_tests(metafunc):\n    pass\n\n\nclass TestMod:",
            ("config-loosened", None)),
    _row("py-test-file-removed", [_fv(PY, BASE_PY, None)], ("test-file-removed", PY, None)),
    _row("py-test-package-init-removed", [_fv("tests/__init__.py", "", None)],
         _loose("tests/__init__.py")),
    # JS / TS
    _js_row("js-it-skip", 'it("one"', 'it.skip("one"', (SKIP, "adds > one")),
    _js_row("js-describe-skip", 'describe("adds"', 'describe.skip("adds"', (SKIP, "adds")),
    _js_row("js-test-only", 'test("two"', 'test.only("two"', (SKIP, "adds > two")),
    _js_row("js-skip-option", 'test("two", (t)', 'test("two", { skip: true }, (t)',
            (SKIP, "adds > two")),
    _js_row("js-todo-option", 'test("two", (t)', 'test("two", { todo: "later" }, (t)',
            (SKIP, "adds > two")),
    _js_row("js-node-test-t-skip", "    assert.equal", "    t.skip();\n    assert.equal",
            (SKIP, "adds > two")),
    _js_row("js-mocha-this-skip", 'it("one", () => {\n',
            'it("one", function () {\n    this.skip();\n',
            (SKIP, "adds > one")),
    _js_row("js-xit", 'it("one"', 'xit("one"', (SKIP, "adds > one")),
    _js_row("js-test-removed", TEST_TWO, "", (REMOVED, "adds > two")),
    _js_row("js-expect-removed", "    expect(add(1, 1)).toBe(2);\n", "", (ASSERT, "adds > one")),
    _js_row("js-expect-made-trivial", "expect(add(1, 1)).toBe(2)", "expect(2).toBe(2)",
            (ASSERT, "adds > one")),
    _js_row("js-candidate-unparseable", "});\n", "});\nit('broken', () => {\n", (REMOVED, None)),
    _row("js-test-file-removed", [_fv(JS, BASE_JS, None)], ("test-file-removed", JS, None)),
    _row("ts-it-skip",
         [_fv("src/__tests__/adds.ts",
              "it('one', (): void => { expect(add(1) as number).toBe(1) })",
              "it.skip('one', (): void => { expect(add(1) as number).toBe(1) })")],
         (SKIP, "src/__tests__/adds.ts", "one")),
    _row("tsx-each-skip",
         [_fv("src/adds.spec.tsx",
              "it.each([1, 2])('n %s', (n) => { expect(<A n={n} />).toBeTruthy() })",
              "it.each([1, 2]).skip('n %s', (n) => { expect(<A n={n} />).toBeTruthy() })")],
         (SKIP, "src/adds.spec.tsx", "n %s")),
    # configuration
    _row("pytest-ini-addopts-k",
         [_fv("pytest.ini", "[pytest]\naddopts = -ra\n",
              "[pytest]\naddopts = -ra -k 'not slow'\n")],
         _loose("pytest.ini")),
    _row("pytest-ini-unparseable",
         [_fv("pytest.ini", "[pytest]\naddopts = -ra\n", "[pytest\naddopts = -ra\n")],
         _loose("pytest.ini")),
    _row("pytest-ini-added-takes-precedence", [_fv("sub/pytest.ini", None, "")],
         _loose("sub/pytest.ini")),
    _row("tox-ini-testpaths",
         [_fv("tox.ini", "[pytest]\ntestpaths = tests\n", "[pytest]\ntestpaths = tests/unit\n")],
         _loose("tox.ini")),
    _row("setup-cfg-xfail-strict",
         [_fv("setup.cfg", "[tool:pytest]\nxfail_strict = true\n",
              "[tool:pytest]\nxfail_strict = false\n")],
         _loose("setup.cfg")),
    _row("setup-cfg-fail-under",
         [_fv("setup.cfg", "[metadata]\nname = x\n[coverage:report]\nfail_under = 90\n",
              "[metadata]\nname = x\n[coverage:report]\nfail_under = 89.5\n")],
         _loose("setup.cfg")),
    _row("coveragerc-fail-under-removed",
         [_fv(".coveragerc", "[report]\nfail_under = 90\n", "[report]\nshow_missing = true\n")],
         _loose(".coveragerc")),
    _row("pyproject-deselect",
         [_fv("pyproject.toml", '[tool.pytest.ini_options]\naddopts = ["-ra"]\n',
              '[tool.pytest.ini_options]\naddopts = ["-ra", "--deselect=tests/test_x.py"]\n')],
         _loose("pyproject.toml")),
    _row("pyproject-pytest11-entry-point",
         [_fv("pyproject.toml", '[project]\nname = "x"\n',
              '[project]\nname = "x"\n[project.entry-points.pytest11]\ncheat = "x.cheat"\n')],
         _loose("pyproject.toml")),
    _row("conftest-added", [_fv("conftest.py", None, "import pytest\n")], _loose("conftest.py")),
    _row("conftest-hook-added",
         [_fv("tests/conftest.py", CONFTEST,
              CONFTEST + "\n\ndef pytest_collection_modifyitems(items):\n    items.clear()\n")],
         _loose("tests/conftest.py")),
    _row("conftest-hook-changed",
         [_fv("conftest.py", CONFTEST, CONFTEST.replace('"slow: slow tests"', '"slow: slow"'))],
         _loose("conftest.py")),
    _row("conftest-collect-ignore",
         [_fv("conftest.py", CONFTEST, CONFTEST + "\ncollect_ignore = ['tests/test_math.py']\n")],
         _loose("conftest.py")),
    _row("conftest-fixture-skips",
         [_fv("conftest.py", CONFTEST, CONFTEST.replace("return {}", "pytest.skip('no db')"))],
         (SKIP, "conftest.py", None)),
    _row("conftest-unparseable", [_fv("conftest.py", CONFTEST, CONFTEST + "\ndef (\n")],
         _loose("conftest.py")),
    _row("python-startup-files",
         [_fv("sitecustomize.py", None, "import os\n"), _fv("venv.pth", "a\n", "import cheat\n")],
         _loose("sitecustomize.py"), _loose("venv.pth")),
    _row("jest-config-changed",
         [_fv("jest.config.js", "module.exports = {};\n",
              "module.exports = { testPathIgnorePatterns: ['x'] };\n")],
         _loose("jest.config.js")),
    _row("mocharc-added", [_fv(".mocharc.yml", None, "grep: fast\n")], _loose(".mocharc.yml")),
    _row("package-json-runner-keys",
         [_fv("package.json", '{"scripts": {"test": "jest"}, "jest": {}}',
              '{"scripts": {"test": "jest --passWithNoTests"}, "jest": {"bail": 1}}')],
         _loose("package.json")),
]  # fmt: skip


@pytest.mark.parametrize(("files", "expected"), WEAKENED)
def test_each_weakening_is_named_with_its_file_and_test(
    files: list[FileVersions], expected: set[tuple[str, str, str | None]]
) -> None:
    assert _found(*files) == expected


def _same(name: str, path: str, base: str | None, cand: str | None) -> Any:
    return pytest.param([_fv(path, base, cand)], id=name)


# Legitimate changes to tests and their configuration: nothing is reported.
LEGITIMATE = [
    _same("py-new-test", PY, BASE_PY, BASE_PY + "\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"),
    _same("py-new-test-file", "tests/test_new.py", None,
          "def test_mul():\n    assert mul(2, 3) == 6\n"),
    _same("non-test-code", "src/calc.py", "def add(a, b):\n    return a+b\n",
          "def add(a: int, b: int) -> int:\n    return b + a\n"),
    _same("py-assertion-added", PY, BASE_PY, _py(ADD_0, ADD_0 + "    assert add(2, 2) == 4\n")),
    _same("py-existing-skip-kept-and-comments", PY, BASE_PY,
          _py("    assert old() == 1", "    assert old() == 2")
          .replace("def test_add(numbers):", "def test_add(numbers):  # the sum")),
    _same("py-reformatted", PY, BASE_PY,
          _py(ADD_1, "    assert (\n        add(1, 2) == 3\n    )\n")),
    _same("py-harmless-marker", PY, BASE_PY,
          _py("def test_add", "@pytest.mark.slow\ndef test_add")),
    _same("py-helper-without-tests-removed", "tests/helpers.py",
          "def make():\n    return 1\n", None),
    _same("conftest-comment-outside-hooks", "conftest.py", CONFTEST,
          CONFTEST.replace("# fixtures shared by the suite", "# fixtures the suite shares")),
    _same("conftest-fixture-changed", "conftest.py", CONFTEST,
          CONFTEST.replace("return {}", "return {'a': 1}")),
    _same("pytest-ini-markers", "pytest.ini", "[pytest]\nmarkers =\n    slow: slow\n",
          "[pytest]\nmarkers =\n    slow: slow\n    net: network\n"),
    _same("pyproject-filterwarnings", "pyproject.toml",
          '[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n',
          '[tool.pytest.ini_options]\nfilterwarnings = ["error", "ignore::UserWarning"]\n'),
    _same("pyproject-fail-under-raised", "pyproject.toml",
          '[project]\nversion = "1"\n[tool.coverage.report]\nfail_under = 80\n',
          '[project]\nversion = "2"\n[tool.coverage.report]\nfail_under = 90\n'),
    _same("package-json-other-keys", "package.json",
          '{"dependencies": {"a": "1"}, "scripts": {"test": "jest"}}',
          '{"dependencies": {"a": "2"}, "scripts": {"test": "jest", "lint": "eslint"}}'),
    _same("js-new-test", JS, BASE_JS,
          _js(TEST_TWO,
              TEST_TWO + '  it("three", () => {\n    expect(add(1, 2)).toBe(3);\n  });\n')),
    _same("js-expect-added-existing-skip-kept", JS, BASE_JS,
          _js("expect(add(1, 1)).toBe(2);\n",
              "expect(add(1, 1)).toBe(2);\n    expect(add(2, 2)).toBe(4);\n")),
]  # fmt: skip


@pytest.mark.parametrize("files", LEGITIMATE)
def test_a_legitimate_change_names_nothing(files: list[FileVersions]) -> None:
    assert weakening.read_weakening(files) == ()


def test_what_says_what_changed() -> None:
    assert _whats(
        _fv(PY, BASE_PY, _py("    assert add(0, 0) == 0\n", "")),
        _fv(JS, BASE_JS, _js('test("two"', 'test.only("two"')),
        _fv("pytest.ini", "[pytest]\naddopts = -ra --strict-markers\n",
            "[pytest]\naddopts = -ra -p cheat --deselect tests/test_x.py::test_y\n"),
        _fv("pyproject.toml", "[tool.coverage.report]\nfail_under = 90\n",
            "[tool.coverage.report]\nfail_under = 50\n"),
        _fv("setup.cfg", "[tool:pytest]\naddopts = --cov=src --cov-fail-under=90\n",
            "[tool:pytest]\naddopts = --cov=src --cov-fail-under 80\n"),
        _fv("conftest.py", CONFTEST,
            CONFTEST + "\n\ndef pytest_collection_modifyitems(items):\n    items.clear()\n"),
        _fv("package.json", '{"scripts": {"test": "jest"}}', '{"scripts": {"test": "true"}}'),
    ) == [
        ("config-loosened", None, "conftest.py hook pytest_collection_modifyitems added"),
        ("config-loosened", None, "scripts.test changed"),
        ("config-loosened", None, "fail_under lowered 90 -> 50"),
        ("config-loosened", None, "addopts gained --deselect, -p; lost --strict-markers"),
        ("config-loosened", None, "--cov-fail-under lowered 90 -> 80"),
        ("config-loosened", None, "addopts changed"),
        ("assert-removed", "test_add", "assertions 2 -> 1"),
        ("skip-added", "adds > two", "test.only added (other tests no longer run)"),
    ]  # fmt: skip


def test_a_new_skipped_test_and_skip_calls_are_worded() -> None:
    cand = _py("    assert add(1, 2) == 3\n", "    pytest.skip('no')\n    assert add(1, 2) == 3\n")
    cand += "\n\n@unittest.skip('todo')\ndef test_extra():\n    assert extra()\n"
    assert _whats(_fv(PY, BASE_PY, cand)) == [
        ("skip-added", "test_add", "pytest.skip() call added"),
        ("skip-added", "test_extra", "new test is skipped (@unittest.skip)"),
    ]


def test_an_unchanged_existing_skip_is_not_reported_but_a_second_one_is() -> None:
    kept = _py("    assert old() == 1", "    assert old() == 1\n    assert old() != 2")
    assert _found(_fv(PY, BASE_PY, kept)) == set()
    doubled = _py("def test_old", "@pytest.mark.skip\ndef test_old")
    assert _whats(_fv(PY, BASE_PY, doubled)) == [
        ("skip-added", "test_old", "@pytest.mark.skip added")
    ]


def test_a_test_moved_to_another_file_is_reported_removed_and_keeps_its_digest() -> None:
    moved_from = _py("class TestMod:\n    def test_mod(self):\n        assert mod(5, 3) == 2\n", "")
    moved_to = "class TestModulo:\n    def test_mod(self):\n        assert mod(5, 3) == 2\n"
    assert _found(_fv(PY, BASE_PY, moved_from), _fv("tests/test_mod.py", None, moved_to)) == {
        ("test-removed", PY, "TestMod.test_mod")
    }
    before = weakening.test_bodies(PY, BASE_PY.encode())["TestMod.test_mod"]
    after = weakening.test_bodies("tests/test_mod.py", moved_to.encode())["TestModulo.test_mod"]
    assert before == after
    assert before.startswith("sha256:") and len(before) == 7 + 64
    changed = weakening.test_bodies("tests/test_mod.py", moved_to.replace("== 2", "== 3").encode())
    assert changed["TestModulo.test_mod"] != before


def test_test_bodies_names_every_test_and_ignores_decorators_and_positions() -> None:
    bodies = weakening.test_bodies(PY, BASE_PY.encode())
    assert sorted(bodies) == ["MathCase.test_sub", "TestMod.test_mod", "test_add", "test_old"]
    shifted = "\n\n\n" + BASE_PY.replace('@pytest.mark.skip(reason="flaky upstream")\n', "")
    assert weakening.test_bodies(PY, shifted.encode()) == bodies
    assert weakening.test_bodies(PY, b"def broken(:\n") == {}
    assert weakening.test_bodies("src/calc.py", b"def test_x():\n    pass\n") == {}


def test_js_test_bodies_ignore_whitespace_and_follow_the_describe_path() -> None:
    bodies = weakening.test_bodies(JS, BASE_JS.encode())
    assert sorted(bodies) == ["adds > later", "adds > one", "adds > two"]
    squeezed = BASE_JS.replace("    expect(add(1, 0)).toBe(1);\n", "expect(add(1, 0)).toBe(1);   ")
    assert weakening.test_bodies(JS, squeezed.encode())["adds > one"] == bodies["adds > one"]
    renamed = BASE_JS.replace('describe("adds"', 'describe("sums"')
    assert weakening.test_bodies(JS, renamed.encode())["sums > one"] == bodies["adds > one"]
    assert weakening.test_bodies(JS, b"it('x', () => {") == {}


def test_an_oversize_candidate_counts_as_unparseable() -> None:
    files = [
        FileVersions(PY, BASE_PY.encode(), None, candidate_oversize=True),
        FileVersions(
            "pyproject.toml", b"[tool.pytest.ini_options]\n", None, candidate_oversize=True
        ),
    ]
    assert _whats(*files) == [
        ("config-loosened", None, "pyproject.toml could not be parsed"),
        ("test-removed", None, "test file could not be parsed"),
    ]
    assert MAX_READ_BYTES > 0


def test_a_deleted_unreadable_test_file_is_reported_removed() -> None:
    files = [FileVersions(PY, None, None, base_oversize=True)]
    assert _whats(*files) == [
        ("test-file-removed", None, "test file removed (unreadable on the base)")
    ]


def test_output_is_sorted_by_file_test_and_kind() -> None:
    cand = _py("    assert add(0, 0) == 0\n", "    pytest.skip('x')\n")
    found = weakening.read_weakening(
        [_fv(PY, BASE_PY, cand), _fv(JS, BASE_JS, None), _fv("conftest.py", None, "")]
    )
    assert [(w.file, w.test, w.kind) for w in found] == [
        ("conftest.py", None, "config-loosened"),
        (PY, "test_add", "assert-removed"),
        (PY, "test_add", "skip-added"),
        (JS, None, "test-file-removed"),
    ]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("test_x.py", True),
        ("pkg/x_test.py", True),
        ("tests/helpers.py", True),
        ("a/test/b/c.py", True),
        ("src/testing.py", False),
        ("src/x.test.ts", True),
        ("src/x.spec.mjs", True),
        ("src/__tests__/x.jsx", True),
        ("test/x.cjs", True),
        ("src/x.ts", False),
        ("tests/data.json", False),
    ],
)
def test_test_files_follow_the_naming_conventions(path: str, expected: bool) -> None:
    assert weakening.is_test_file(path) is expected
