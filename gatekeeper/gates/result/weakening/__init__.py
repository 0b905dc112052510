"""The static half of the test-weakening detector: what a candidate did to the tests, read
from the changed files' bytes alone (base against candidate), parsed as data and never
imported, executed or evaluated.

Caught, per changed file:
- Python tests (`ast`): a test or a test file removed; a skip or xfail added by decorator
  (also inside `pytest.param(marks=...)`), by class decorator or class `pytestmark`, by
  module `pytestmark`, by `pytest.skip()`/`pytest.xfail()`/`importorskip()`/`self.skipTest()`/
  `raise SkipTest` in a test, a fixture or at module level, by `__test__` or by an early
  `return`; fewer assertions in a test that stays; a test shadowed by a later definition of
  the same name; `pytest_*` hooks, `load_tests` and `pytest_plugins` changed in a test module.
- JS/TS tests (tree-sitter): `it`/`test` removed; `.skip`, `.todo`, `x…`, `.only`, `f…`,
  `{ skip }`/`{ todo }`/`{ only }` options, `t.skip()`/`this.skip()`/`test.skip()` added;
  fewer `expect(`/`assert(`/`assert.*(`/`t.assert.*(` calls in a test that stays.
- Configuration: the pytest keys that steer collection and reporting (pytest.ini, tox.ini,
  setup.cfg, pyproject.toml, pytest.toml), a pytest section appearing or going (files take
  precedence over each other), coverage thresholds and scope, conftest.py hooks, collection
  lists and skipping fixtures, `pytest11` entry points, sitecustomize/usercustomize/`.pth`,
  JS runner configs and the runner keys of package.json, a test package's `__init__.py`.
A side that cannot be read (oversize, undecodable, unparseable) counts against the candidate.

Not caught, by the nature of a static reading: candidate code that detects the test run and
behaves differently (environment, `sys.modules`, `PYTEST_CURRENT_TEST`); code under test
changed so that assertions hold vacuously; runner patches outside the files named above
(plugins in ordinary modules, jest setup files, monkeypatched builtins); an assertion
weakened without there being fewer (`assert x == 1` to `assert x`); parametrisations
emptied; tests defined inside module-level `if`/`try` blocks. The dynamic half (the base's
test plan run on the candidate) and the gate's pairing of moved tests (`test_bodies`) sit
beside this reading.

Each kind of file has its reader: `python.py` (ast), `js.py` (tree-sitter) and `config.py`
(runner, coverage, conftest and start-up files); `reading.py` holds what they share. This
module is the public API and sends each changed file to the readers of its kind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import PurePosixPath

from gatekeeper.digest import Sha256Digest
from gatekeeper.gates.result.versions import FileVersions
from gatekeeper.gates.result.weakening.config import (
    CONFIG_FILES,
    is_runner_config,
    is_startup_file,
    is_test_package_init,
    read_config_file,
    read_conftest,
    read_package_init,
    read_package_json,
    read_runner_config,
    read_startup_file,
)
from gatekeeper.gates.result.weakening.js import is_js_test, read_js, read_js_tests
from gatekeeper.gates.result.weakening.python import is_py_test, read_py, read_py_tests
from gatekeeper.gates.result.weakening.reading import Kind, Weakening

__all__ = ["Kind", "Weakening", "is_test_file", "read_weakening", "test_bodies"]


def is_test_file(path: str) -> bool:
    """pytest's `test_*.py`/`*_test.py`, any `.py` under `tests/`/`test/`; JS/TS
    `*.test.*`/`*.spec.*`, or JS/TS under `__tests__/`, `test/`, `tests/`."""
    return is_py_test(path) or is_js_test(path)


def read_weakening(files: Sequence[FileVersions]) -> tuple[Weakening, ...]:
    """Every weakening the changed files show, each once, sorted by file, test, kind, what."""
    found: set[Weakening] = set()
    for fv in files:
        for matches, read in _READERS:
            if matches(fv.path):
                found.update(read(fv))
    return tuple(sorted(found, key=_order))


def _order(w: Weakening) -> tuple[str, bool, str, str, str]:
    return (w.file, w.test is not None, w.test or "", w.kind, w.what)


def test_bodies(path: str, data: bytes) -> dict[str, str]:
    """Qualified test name -> `sha256:` digest of its body, name, decorators and positions
    left out (Python: `ast.dump`; JS/TS: the callback's text, whitespace normalised), so a
    test moved to another file or class keeps its digest. Not a test file, or unparseable: {}."""
    if is_py_test(path):
        reading = read_py(data)
    elif is_js_test(path):
        reading = read_js(path, data)
    else:
        return {}
    if reading is None:
        return {}
    return {
        name: str(Sha256Digest.of("\0".join(unit.bodies).encode("utf-8", "surrogatepass")))
        for name, unit in sorted(reading.units.items())
        if unit.tests
    }


def _named(*names: str) -> Callable[[str], bool]:
    return lambda path: PurePosixPath(path).name in names


_READERS: tuple[
    tuple[Callable[[str], bool], Callable[[FileVersions], Iterable[Weakening]]], ...
] = (
    (is_py_test, read_py_tests),
    (is_js_test, read_js_tests),
    (_named("conftest.py"), read_conftest),
    (_named(*CONFIG_FILES), read_config_file),
    (_named("package.json"), read_package_json),
    (is_runner_config, read_runner_config),
    (is_startup_file, read_startup_file),
    (is_test_package_init, read_package_init),
)
