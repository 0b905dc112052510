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
"""

from __future__ import annotations

import ast
import configparser
import functools
import json
import math
import shlex
import tomllib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain as chained
from pathlib import PurePosixPath
from typing import Any, Literal

import tree_sitter_javascript
import tree_sitter_typescript
from pydantic import BaseModel, ConfigDict
from tree_sitter import Language, Node, Parser

from gatekeeper.digest import Sha256Digest
from gatekeeper.gates.result.versions import FileVersions

Kind = Literal[
    "test-removed", "test-file-removed", "skip-added", "assert-removed", "config-loosened"
]


class Weakening(BaseModel):
    """One way the candidate weakened the tests, read statically from one changed file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Kind
    file: str  # repo-relative path, as in FileVersions.path
    test: str | None  # "TestMod.test_add", "adds > one"; None at file or config level
    what: str  # one short line


def _weak(kind: Kind, path: str, test: str | None, what: str) -> Weakening:
    return Weakening(kind=kind, file=path, test=test, what=what)


def _loosened(path: str, what: str) -> Weakening:
    return _weak("config-loosened", path, None, what)


# ---------------------------------------------------------------------------- test files

_PY_TEST_DIRS = frozenset({"tests", "test"})
_JS_TEST_DIRS = frozenset({"tests", "test", "__tests__"})
_JS_EXTS = frozenset({"js", "mjs", "cjs", "ts", "mts", "cts", "jsx", "tsx"})


def is_test_file(path: str) -> bool:
    """pytest's `test_*.py`/`*_test.py`, any `.py` under `tests/`/`test/`; JS/TS
    `*.test.*`/`*.spec.*`, or JS/TS under `__tests__/`, `test/`, `tests/`."""
    return _is_py_test(path) or _is_js_test(path)


def _is_py_test(path: str) -> bool:
    p = PurePosixPath(path)
    if p.suffix != ".py":
        return False
    named = p.name.startswith("test_") or p.name.endswith("_test.py")
    return named or not _PY_TEST_DIRS.isdisjoint(p.parts[:-1])


def _is_js_test(path: str) -> bool:
    p = PurePosixPath(path)
    parts = p.name.split(".")
    if len(parts) < 2 or parts[-1] not in _JS_EXTS:
        return False
    named = len(parts) >= 3 and parts[-2] in ("test", "spec")
    return named or not _JS_TEST_DIRS.isdisjoint(p.parts[:-1])


# ---------------------------------------------------------------------------- public API


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
    if _is_py_test(path):
        reading = _read_py(data)
    elif _is_js_test(path):
        reading = _read_js(path, data)
    else:
        return {}
    if reading is None:
        return {}
    return {
        name: str(Sha256Digest.of("\0".join(unit.bodies).encode("utf-8", "surrogatepass")))
        for name, unit in sorted(reading.units.items())
        if unit.tests
    }


# ---------------------------------------------------------------------------- one side read


@dataclass
class _Unit:
    """A test (tests > 0: how many declarations carry the name) or a group of tests (a class,
    a describe) under one qualified name."""

    tests: int = 0
    asserts: int = 0
    skips: Counter[str] = field(default_factory=Counter)
    bodies: list[str] = field(default_factory=list)  # what test_bodies digests


@dataclass
class _Reading:
    """One side of one test module or conftest.py, read as data."""

    units: dict[str, _Unit] = field(default_factory=dict)
    file_skips: Counter[str] = field(default_factory=Counter)  # module level and helpers
    hooks: dict[str, str] = field(default_factory=dict)  # hook or plugin list -> ast dump

    def unit(self, name: str) -> _Unit:
        return self.units.setdefault(name, _Unit())

    def forget(self, name: str) -> None:
        """A Python name bound again: the earlier test or class (and its tests) is gone."""
        for key in [k for k in self.units if k == name or k.startswith(name + ".")]:
            del self.units[key]

    @property
    def has_tests(self) -> bool:
        return any(unit.tests for unit in self.units.values())


def _here(data: bytes | None, oversize: bool) -> bool:
    return data is not None or oversize


# ---------------------------------------------------------------------------- comparing

_NOT_SKIPPED_WHEN_NEW = frozenset({"return statement"})
_JS_FOCUS = frozenset({"fit", "fdescribe", "{ only } option"})


def _test_changes(
    fv: FileVersions, base: _Reading | None, cand: _Reading | None
) -> Iterator[Weakening]:
    """A test file removed or no longer parseable, then test by test."""
    if fv.deleted:
        if _here(fv.base, fv.base_oversize) and (base is None or base.has_tests):
            what = "test file removed" if base else "test file removed (unreadable on the base)"
            yield _weak("test-file-removed", fv.path, None, what)
        return
    if cand is None:
        if base is not None and base.has_tests:
            yield _weak("test-removed", fv.path, None, "test file could not be parsed")
        return
    yield from _unit_changes(fv.path, base.units if base else {}, cand.units)
    yield from _file_skip_changes(fv.path, base.file_skips if base else Counter(), cand.file_skips)


def _unit_changes(path: str, base: dict[str, _Unit], cand: dict[str, _Unit]) -> Iterator[Weakening]:
    for name, b in base.items():
        c = cand.get(name)
        if b.tests and (c is None or c.tests < b.tests):
            what = "test removed" if c is None else f"tests of this name {b.tests} -> {c.tests}"
            yield _weak("test-removed", path, name, what)
        if c is not None:
            yield from _kept_unit(path, name, b, c)
    for name, c in cand.items():
        if name not in base:
            yield from _new_unit(path, name, c)


def _kept_unit(path: str, name: str, b: _Unit, c: _Unit) -> Iterator[Weakening]:
    for label in sorted(c.skips):
        if c.skips[label] > b.skips[label]:
            yield _weak("skip-added", path, name, _skip_what(label, None))
    if b.tests and c.tests and c.asserts < b.asserts:
        yield _weak("assert-removed", path, name, f"assertions {b.asserts} -> {c.asserts}")


def _new_unit(path: str, name: str, c: _Unit) -> Iterator[Weakening]:
    noun = "test" if c.tests else "test group"
    for label in sorted(c.skips):
        if c.skips[label] > 0 and label not in _NOT_SKIPPED_WHEN_NEW:
            yield _weak("skip-added", path, name, _skip_what(label, noun))


def _file_skip_changes(path: str, base: Counter[str], cand: Counter[str]) -> Iterator[Weakening]:
    for label in sorted(cand):
        if cand[label] > base[label]:
            yield _weak("skip-added", path, None, _skip_what(label, None))


def _skip_what(label: str, new: str | None) -> str:
    if label in _JS_FOCUS or ".only" in label:
        return f"{label} added (other tests no longer run)"
    return f"new {new} is skipped ({label})" if new else f"{label} added"


def _hook_changes(
    path: str, base: dict[str, str], cand: dict[str, str], prefix: str
) -> Iterator[Weakening]:
    for name in sorted(base.keys() | cand.keys()):
        b, c = base.get(name), cand.get(name)
        if b != c:
            change = "added" if b is None else "removed" if c is None else "changed"
            noun = name if name in _PY_PLUGIN_NAMES else f"hook {name}"
            yield _loosened(path, f"{prefix}{noun} {change}")


# ---------------------------------------------------------------------------- Python

_PY_RUNNERS = frozenset({"pytest", "_pytest", "unittest"})
_PY_PLUGIN_NAMES = frozenset({"pytest_plugins", "collect_ignore", "collect_ignore_glob"})
_SKIP_MARKS = frozenset({"skip", "skipif", "xfail", "skipIf", "skipUnless", "expectedFailure"})
_SKIP_CALLS = frozenset(
    {"pytest.skip", "pytest.xfail", "pytest.importorskip", "skip", "xfail", "importorskip"}
)
_CHECK_CALLS = frozenset(
    {"pytest.raises", "pytest.warns", "pytest.approx", "pytest.deprecated_call", "pytest.fail"}
    | {"self.fail", "cls.fail"}
)
_PY_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_PyFunction = ast.FunctionDef | ast.AsyncFunctionDef


def _read_py(data: bytes | None) -> _Reading | None:
    """A Python module's tests, skips and hooks; None when absent or not parseable.
    `ast.parse` on the bytes honours a BOM and a PEP 263 coding line, as Python would."""
    if data is None:
        return None
    try:
        return _PyScan(ast.parse(data)).read()
    except (SyntaxError, ValueError, RecursionError):
        return None


def _read_py_tests(fv: FileVersions) -> Iterator[Weakening]:
    base, cand = _read_py(fv.base), _read_py(fv.candidate)
    yield from _test_changes(fv, base, cand)
    if cand is not None and PurePosixPath(fv.path).name != "conftest.py":
        yield from _hook_changes(fv.path, base.hooks if base else {}, cand.hooks, "")


def _read_conftest(fv: FileVersions) -> Iterator[Weakening]:
    cand = _read_py(fv.candidate)
    if fv.added:
        hooks = ", ".join(sorted(cand.hooks)) if cand is not None else ""
        yield _loosened(fv.path, f"conftest.py added ({hooks})" if hooks else "conftest.py added")
        return
    if cand is None and not fv.deleted:
        yield _loosened(fv.path, "conftest.py could not be parsed")
        return
    base, cand = _read_py(fv.base) or _Reading(), cand or _Reading()
    yield from _hook_changes(fv.path, base.hooks, cand.hooks, "conftest.py ")
    yield from _file_skip_changes(fv.path, base.file_skips, cand.file_skips)


def _py_chain(node: ast.AST) -> tuple[str, ...] | None:
    """`a.b.c` -> ("a", "b", "c"); anything but names and attributes -> None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return tuple(reversed(parts))


def _walk_all(nodes: Iterable[ast.AST]) -> Iterator[ast.AST]:
    return chained.from_iterable(ast.walk(node) for node in nodes)


def _own_nodes(nodes: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """The nodes of `nodes`, not descending into nested functions, lambdas or classes."""
    stack = list(nodes)
    while stack:
        node = stack.pop()
        yield node
        stack.extend(c for c in ast.iter_child_nodes(node) if not isinstance(c, _PY_SCOPES))


def _py_renames(tree: ast.Module) -> dict[str, tuple[str, ...]]:
    """Module-level names bound to pytest/unittest objects: `import pytest as pt`,
    `from unittest import skip as s`, `from pytest import mark`."""
    out: dict[str, tuple[str, ...]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            for alias in stmt.names:
                if alias.asname and alias.name.split(".")[0] in _PY_RUNNERS:
                    out[alias.asname] = tuple(alias.name.split("."))
        elif isinstance(stmt, ast.ImportFrom) and stmt.module:
            if stmt.module.split(".")[0] in _PY_RUNNERS:
                for alias in stmt.names:
                    out[alias.asname or alias.name] = (*stmt.module.split("."), alias.name)
    return out


def _bound_names(stmt: ast.stmt) -> Iterator[str]:
    """Names a module- or class-level statement binds or deletes directly."""
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        yield from ((a.asname or a.name).split(".")[0] for a in stmt.names)
        return
    targets: list[ast.expr] = []
    if isinstance(stmt, ast.Assign | ast.Delete):
        targets = stmt.targets
    elif isinstance(stmt, ast.AnnAssign | ast.AugAssign):
        targets = [stmt.target]
    for node in _walk_all(targets):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            yield node.id


def _assigns_test_flag(node: ast.AST) -> bool:
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        return node.id == "__test__"
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and node.attr == "__test__"
    )


def _py_body(fn: _PyFunction) -> str:
    """The test as `ast.dump` sees it, its name, decorators and positions left out."""
    parts = [type(fn).__name__, ast.dump(fn.args), *(ast.dump(s) for s in fn.body)]
    if fn.returns is not None:
        parts.append(ast.dump(fn.returns))
    return "\n".join(parts)


class _PyScan:
    """Reads one parsed module into a _Reading: pytest's and unittest's collection rules
    (module `test*` functions, `test*` methods of `Test*` classes and TestCase subclasses),
    names rebound later in the module replacing earlier ones."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.renames = _py_renames(tree)
        self.aliases: frozenset[str] = frozenset()  # module names bound to a skip marker
        self.test_classes: set[str] = set()
        self.reading = _Reading()

    def read(self) -> _Reading:
        self.aliases = self._mark_aliases()
        self._scope(self.tree.body, "", self.reading.file_skips, collect=True)
        return self.reading

    def chain(self, node: ast.AST) -> tuple[str, ...] | None:
        parts = _py_chain(node)
        if parts and parts[0] in self.renames:
            return (*self.renames[parts[0]], *parts[1:])
        return parts

    def _mark_aliases(self) -> frozenset[str]:
        """`skipper = pytest.mark.skip` at module level: `@skipper` skips too."""
        names: set[str] = set()
        for stmt in self.tree.body:
            if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
                if any(self._mark_refs(ast.walk(stmt.value), marks_only=False)):
                    names.update(_bound_names(stmt))
        return frozenset(names)

    def _mark_refs(self, nodes: Iterable[ast.AST], marks_only: bool) -> Iterator[str]:
        """Skip/xfail markers named in `nodes`; with marks_only, only `….mark.…` ones."""
        for node in nodes:
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                if node.id in self.aliases:
                    yield node.id
                    continue
            if not isinstance(node, ast.Name | ast.Attribute):
                continue
            parts = self.chain(node)
            if parts and parts[-1] in _SKIP_MARKS and (not marks_only or "mark" in parts[:-1]):
                yield ".".join(parts)

    def _skip_calls(self, nodes: Iterable[ast.AST]) -> Iterator[str]:
        for node in nodes:
            if isinstance(node, ast.Call):
                parts = self.chain(node.func)
                if parts and (".".join(parts) in _SKIP_CALLS or parts[-1] == "skipTest"):
                    yield f"{'.'.join(parts)}() call"
            elif isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                parts = self.chain(exc)
                if parts and (parts[-1] == "SkipTest" or parts[-2:] == ("skip", "Exception")):
                    yield f"raise {'.'.join(parts)}"

    def _body_skips(self, body: list[ast.stmt]) -> list[str]:
        nodes = list(_walk_all(body))
        marks = (f"{ref} applied" for ref in self._mark_refs(nodes, marks_only=True))
        return [*self._skip_calls(nodes), *marks]

    def _scope(
        self, body: list[ast.stmt], prefix: str, skips: Counter[str] | None, collect: bool
    ) -> None:
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                self._function(stmt, prefix, collect)
            elif isinstance(stmt, ast.ClassDef):
                self._class(stmt, prefix, collect)
            else:
                self._statement(stmt, prefix, skips)

    def _function(self, fn: _PyFunction, prefix: str, collect: bool) -> None:
        name = prefix + fn.name
        self.reading.forget(name)
        if collect and fn.name.startswith("test"):
            self.reading.units[name] = self._test(fn)
            return
        for label in self._body_skips(fn.body):
            self.reading.file_skips[f"{label} in {name}"] += 1
        if fn.name.startswith("pytest_") or name == "load_tests":
            self.reading.hooks[name] = ast.dump(fn)

    def _test(self, fn: _PyFunction) -> _Unit:
        decorated = self._mark_refs(_walk_all(fn.decorator_list), marks_only=False)
        skips = Counter(f"@{ref}" for ref in decorated)
        skips.update(self._body_skips(fn.body))
        returns = sum(isinstance(n, ast.Return) for n in _own_nodes(fn.body))
        if returns:
            skips["return statement"] += returns
        return _Unit(tests=1, asserts=self._asserts(fn.body), skips=skips, bodies=[_py_body(fn)])

    def _asserts(self, body: list[ast.stmt]) -> int:
        return sum(1 for node in _walk_all(body) if self._is_check(node))

    def _is_check(self, node: ast.AST) -> bool:
        """`assert` (not of a constant), `….assert*(…)` (not of constants only),
        `pytest.raises/warns/approx/deprecated_call/fail`, `self.fail`."""
        if isinstance(node, ast.Assert):
            return not isinstance(node.test, ast.Constant)
        if not isinstance(node, ast.Call):
            return False
        parts = self.chain(node.func)
        if parts is None:
            return False
        if ".".join(parts) in _CHECK_CALLS:
            return True
        args = [*node.args, *(k.value for k in node.keywords)]
        constant = bool(args) and all(isinstance(a, ast.Constant) for a in args)
        return parts[-1].startswith("assert") and not constant

    def _class(self, cls: ast.ClassDef, prefix: str, collect: bool) -> None:
        name = prefix + cls.name
        self.reading.forget(name)
        is_test = collect and (
            cls.name.startswith("Test") or any(self._is_test_base(b) for b in cls.bases)
        )
        skips = None
        if is_test:
            self.test_classes.add(cls.name)
            skips = self.reading.unit(name).skips
            refs = self._mark_refs(_walk_all(cls.decorator_list), marks_only=False)
            skips.update(f"@{ref}" for ref in refs)
        self._scope(cls.body, name + ".", skips, is_test)

    def _is_test_base(self, base: ast.expr) -> bool:
        parts = self.chain(base)
        return parts is not None and (
            parts[-1].endswith("TestCase") or parts[-1] in self.test_classes
        )

    def _statement(self, stmt: ast.stmt, prefix: str, skips: Counter[str] | None) -> None:
        """A module- or class-level statement: rebinding, plugin lists, pytestmark, skips."""
        for bound in _bound_names(stmt):
            self.reading.forget(prefix + bound)
        nodes = list(_own_nodes([stmt]))
        if not prefix:
            for name in sorted({n.id for n in nodes if isinstance(n, ast.Name)} & _PY_PLUGIN_NAMES):
                self.reading.hooks[name] = self.reading.hooks.get(name, "") + ast.dump(stmt)
        if skips is None:
            return
        labels = [*self._mark_refs(nodes, marks_only=False), *self._skip_calls(nodes)]
        labels += ["__test__ assignment" for n in nodes if _assigns_test_flag(n)]
        where = "" if prefix else "module-level "
        skips.update(where + label for label in labels)


# ---------------------------------------------------------------------------- JS / TS

# root callee -> whether it declares a group (describe) rather than a test
_JS_ROOTS = {
    **dict.fromkeys(("it", "test", "specify", "xit", "xtest", "xspecify", "fit"), False),
    **dict.fromkeys(("describe", "suite", "context", "xdescribe", "xcontext"), True),
    "fdescribe": True,
}
_JS_OFF_ROOTS = frozenset({"xit", "xtest", "xspecify", "xdescribe", "xcontext", "fit", "fdescribe"})
_JS_SKIP_MODS = frozenset({"skip", "only", "todo", "skipIf", "runIf", "fails", "fixme", "failing"})
_JS_DECL_MODS = _JS_SKIP_MODS | {
    "each", "for", "concurrent", "sequential", "serial", "parallel", "describe", "shuffle",
}  # fmt: skip
_JS_OPTIONS = frozenset({"skip", "todo", "only"})
_JS_FUNCS = frozenset({"arrow_function", "function_expression", "function", "generator_function"})
_JS_NAMES = frozenset({"string", "template_string"})
_JS_LITERALS = frozenset({"number", "string", "true", "false", "null", "undefined"})
_JS_OFF_VALUES = frozenset({"false", "null", "undefined"})


@functools.cache
def _parser(grammar: str) -> Parser:
    languages = {
        "javascript": tree_sitter_javascript.language,
        "typescript": tree_sitter_typescript.language_typescript,
        "tsx": tree_sitter_typescript.language_tsx,
    }
    return Parser(Language(languages[grammar]()))


def _grammar(path: str) -> str:
    ext = PurePosixPath(path).suffix[1:]
    return "typescript" if ext in ("ts", "mts", "cts") else "tsx" if ext == "tsx" else "javascript"


def _read_js(path: str, data: bytes | None) -> _Reading | None:
    """A JS/TS test file's tests and skips; None when absent or the tree has errors."""
    if data is None:
        return None
    tree = _parser(_grammar(path)).parse(data)
    if tree.root_node.has_error:
        return None
    return _JsScan().read(tree.root_node)


def _read_js_tests(fv: FileVersions) -> Iterator[Weakening]:
    yield from _test_changes(fv, _read_js(fv.path, fv.base), _read_js(fv.path, fv.candidate))


def _js_text(node: Node | None) -> str:
    return (node.text or b"").decode("utf-8", "replace") if node is not None else ""


def _js_args(call: Node) -> list[Node]:
    args = call.child_by_field_name("arguments")
    if args is None or args.type != "arguments":
        return []  # a tagged template
    return [a for a in args.named_children if a.type != "comment"]


def _js_chain(node: Node | None, through_calls: bool) -> tuple[str, ...] | None:
    """`it.skip` -> ("it", "skip"); through_calls also reads `it.each(t)` as ("it", "each")."""
    parts: list[str] = []
    while node is not None:
        if node.type in ("identifier", "this"):
            parts.append(_js_text(node))
            return tuple(reversed(parts))
        if node.type == "member_expression":
            parts.append(_js_text(node.child_by_field_name("property")))
            node = node.child_by_field_name("object")
        elif through_calls and node.type == "call_expression":
            node = node.child_by_field_name("function")
        else:
            return None
    return None


def _js_title(node: Node) -> str:
    text = _js_text(node)
    plain = node.type == "string" or (
        node.type == "template_string"
        and not any(c.type == "template_substitution" for c in node.named_children)
    )
    return text[1:-1] if plain else text


def _is_js_declaration(chain: tuple[str, ...], args: list[Node]) -> bool:
    if chain[0] not in _JS_ROOTS or not set(chain[1:]) <= _JS_DECL_MODS or not args:
        return False
    return args[0].type in _JS_NAMES or any(a.type in _JS_FUNCS for a in args[1:])


def _js_option_keys(obj: Node) -> Iterator[str]:
    """`{ skip: true }`, `{ todo: "later" }`, `{ only }`: options that turn a test off."""
    for child in obj.named_children:
        if child.type == "shorthand_property_identifier" and _js_text(child) in _JS_OPTIONS:
            yield _js_text(child)
        elif child.type == "pair":
            key, value = child.child_by_field_name("key"), child.child_by_field_name("value")
            name = _js_title(key) if key is not None else ""
            off = value is None or value.type in _JS_OFF_VALUES or _js_text(value) == "0"
            if name in _JS_OPTIONS and not off:
                yield name


def _js_decl_labels(chain: tuple[str, ...], args: list[Node]) -> list[str]:
    labels = [chain[0]] if chain[0] in _JS_OFF_ROOTS else []
    if not _JS_SKIP_MODS.isdisjoint(chain[1:]):
        labels.append(".".join(chain))
    for arg in args:
        if arg.type == "object":
            labels.extend(f"{{ {key} }} option" for key in _js_option_keys(arg))
    return labels


def _is_js_check(call: Node, chain: tuple[str, ...]) -> bool:
    """`expect(…)`, `expect.*(…)`, `assert(…)`, `assert.*(…)`, `t.assert.*(…)`; one on
    literals only (`assert(true)`, `expect(1).toBe(1)`) is no check."""
    if not (chain[0] in ("assert", "expect") or (len(chain) > 1 and chain[1] == "assert")):
        return False
    args = _js_args(call)
    if chain == ("expect",):
        args += _js_matcher_args(call)
    return not args or not all(a.type in _JS_LITERALS for a in args)


def _js_matcher_args(expect: Node) -> list[Node]:
    """The arguments of the matcher `expect(x)` is chained to: `.toBe(y)`, `.not.toBe(y)`."""
    node = expect
    while node.parent is not None and node.parent.type == "member_expression":
        node = node.parent
    parent = node.parent
    if node is expect or parent is None or parent.type != "call_expression":
        return []
    return _js_args(parent)


def _js_skip_call(chain: tuple[str, ...]) -> str | None:
    """`test.skip()`/`test.fixme(cond)` (Playwright), `t.skip()`/`t.todo()` (node:test),
    `this.skip()` (mocha), `skip()` (a vitest context's)."""
    if chain[0] in _JS_ROOTS and not _JS_SKIP_MODS.isdisjoint(chain[1:]):
        return f"{'.'.join(chain)}() call"
    if chain == ("skip",) or (len(chain) == 2 and chain[1] in ("skip", "todo")):
        return f"{'.'.join(chain)}() call"
    return None


_JsFrame = tuple[Node, tuple[str, ...], str | None]  # node, describe path, enclosing unit


class _JsScan:
    """Walks one tree without recursion: `describe`/`it`/`test` declarations nest names
    (`adds > one`); calls inside a callback count for the innermost test or group."""

    def __init__(self) -> None:
        self.reading = _Reading()

    def read(self, root: Node) -> _Reading:
        stack: list[_JsFrame] = [(root, (), None)]
        while stack:
            node, path, unit = stack.pop()
            if node.type == "call_expression":
                if self._declaration(node, path, unit, stack):
                    continue
                self._call(node, unit)
            stack.extend((child, path, unit) for child in node.named_children)
        return self.reading

    def _declaration(
        self, call: Node, path: tuple[str, ...], unit: str | None, stack: list[_JsFrame]
    ) -> bool:
        callee, args = call.child_by_field_name("function"), _js_args(call)
        chain = _js_chain(callee, through_calls=True)
        if callee is None or chain is None or not _is_js_declaration(chain, args):
            return False
        group = _JS_ROOTS[chain[0]] or "describe" in chain[1:]
        title = _js_title(args[0])
        name = " > ".join((*path, title))
        declared = self.reading.unit(name)
        declared.skips.update(_js_decl_labels(chain, args))
        body = next((a for a in reversed(args) if a.type in _JS_FUNCS), None)
        if not group:
            declared.tests += 1
            declared.bodies.append(" ".join(_js_text(body).split()))
        stack.extend((n, path, unit) for n in (callee, *args) if n is not body)
        if body is not None:
            stack.append((body, (*path, title) if group else path, name))
        return True

    def _call(self, call: Node, unit: str | None) -> None:
        chain = _js_chain(call.child_by_field_name("function"), through_calls=False)
        if chain is None:
            return
        if unit is not None and _is_js_check(call, chain):
            self.reading.unit(unit).asserts += 1
            return
        label = _js_skip_call(chain)
        if label is not None:
            target = self.reading.unit(unit).skips if unit else self.reading.file_skips
            target[label] += 1


# ---------------------------------------------------------------------------- ini / toml


@dataclass(frozen=True)
class _ConfigSpec:
    toml: bool
    pytest: tuple[str, ...] = ()  # the sections pytest reads in this file
    coverage: tuple[str, str] | None = None  # coverage's run and report sections
    plugins: tuple[str, str | None] | None = None  # section (and key) of pytest11 entry points
    claims: bool = False  # read whenever it exists, before the other config files


_CONFIG_FILES = {
    "pytest.ini": _ConfigSpec(False, ("pytest",), claims=True),
    ".pytest.ini": _ConfigSpec(False, ("pytest",), claims=True),
    "pytest.toml": _ConfigSpec(True, ("pytest",), claims=True),
    ".pytest.toml": _ConfigSpec(True, ("pytest",), claims=True),
    "tox.ini": _ConfigSpec(False, ("pytest", "tool:pytest"), ("coverage:run", "coverage:report")),
    "setup.cfg": _ConfigSpec(
        False, ("tool:pytest",), ("coverage:run", "coverage:report"),
        ("options.entry_points", "pytest11"),
    ),
    "pyproject.toml": _ConfigSpec(
        True, ("tool.pytest.ini_options", "tool.pytest"),
        ("tool.coverage.run", "tool.coverage.report"), ("project.entry-points.pytest11", None),
    ),
    ".coveragerc": _ConfigSpec(False, coverage=("run", "report"), claims=True),
}  # fmt: skip
# Keys that steer what pytest collects, runs and reports; markers, filterwarnings, minversion,
# log_* and the like are left out on purpose.
_PYTEST_KEYS = (
    "addopts", "testpaths", "python_files", "python_classes", "python_functions",
    "norecursedirs", "collect_ignore", "collect_ignore_glob", "collect_imported_tests",
    "xfail_strict", "strict_xfail", "strict", "required_plugins", "pythonpath", "usefixtures",
    "confcutdir", "consider_namespace_packages", "empty_parameter_set_mark", "asyncio_mode",
    "junit_family", "junit_logging", "junit_log_passing_tests", "junit_duration_report",
    "junit_suite_name",
)  # fmt: skip
_COVERAGE_KEYS = (
    "omit", "include", "source", "source_pkgs", "branch", "plugins", "exclude_lines",
    "exclude_also", "partial_branches", "precision",
)  # fmt: skip

_ConfigValue = str | tuple[str, ...]
_Config = dict[str, dict[str, _ConfigValue]]  # section -> key -> value


def _read_config(data: bytes | None, toml: bool) -> _Config | None:
    """Sections of an ini or TOML file as data; None when absent or not parseable."""
    if data is None:
        return None
    try:
        text = data.decode("utf-8-sig")
        return _toml_sections(tomllib.loads(text)) if toml else _ini_sections(text)
    except (ValueError, configparser.Error, RecursionError):  # decode and TOML errors too
        return None


def _ini_sections(text: str) -> _Config:
    parser = configparser.ConfigParser(interpolation=None, strict=False, allow_no_value=True)
    parser.read_string(text)
    return {s: {k: v or "" for k, v in parser.items(s, raw=True)} for s in parser.sections()}


def _toml_sections(doc: dict[str, Any]) -> _Config:
    """Tables by dotted name (`tool.pytest.ini_options`), with their non-table values; a
    table holding only tables is left out."""
    out: _Config = {}
    stack: list[tuple[str, dict[str, Any]]] = [("", doc)]
    while stack:
        name, table = stack.pop()
        values = {k: _toml_value(v) for k, v in table.items() if not isinstance(v, dict)}
        if values or not table:
            out[name] = values
        subs = ((k, v) for k, v in table.items() if isinstance(v, dict))
        stack.extend((f"{name}.{k}" if name else k, v) for k, v in subs)
    return out


def _toml_value(value: object) -> _ConfigValue:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return tuple(v if isinstance(v, str) else json.dumps(v, default=str) for v in value)
    return json.dumps(value, default=str)


def _tokens(key: str, value: _ConfigValue | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, tuple):
        return value
    if key == "addopts":
        try:
            return tuple(shlex.split(value))
        except ValueError:
            return tuple(value.split())
    return tuple(value.split())


def _read_config_file(fv: FileVersions) -> Iterator[Weakening]:
    name = PurePosixPath(fv.path).name
    spec = _CONFIG_FILES[name]
    cand = _read_config(fv.candidate, spec.toml)
    if cand is None and _here(fv.candidate, fv.candidate_oversize):
        yield _loosened(fv.path, f"{name} could not be parsed")
        return
    base = _read_config(fv.base, spec.toml) or {}
    cand = cand or {}
    if spec.claims and (fv.added or fv.deleted):
        yield _loosened(fv.path, f"{name} {'added' if fv.added else 'removed'}")
    for what in chained(
        _pytest_changes(spec, base, cand),
        _coverage_changes(spec, base, cand),
        _plugin_changes(spec, base, cand),
    ):
        yield _loosened(fv.path, what)


def _pytest_changes(spec: _ConfigSpec, base: _Config, cand: _Config) -> Iterator[str]:
    for section in spec.pytest:
        b, c = base.get(section), cand.get(section)
        if (b is None) != (c is None):
            yield f"[{section}] {'added' if b is None else 'removed'}"
        for key in _PYTEST_KEYS:
            yield from _key_change(key, (b or {}).get(key), (c or {}).get(key))


def _key_change(key: str, b: _ConfigValue | None, c: _ConfigValue | None) -> Iterator[str]:
    b_tokens, c_tokens = _tokens(key, b), _tokens(key, c)
    if (b is None) == (c is None) and b_tokens == c_tokens:
        return
    if key == "addopts":
        yield _addopts_what(b_tokens, c_tokens)
        yield from _fail_under("--cov-fail-under", _cov_fail_under(b_tokens),
                               _cov_fail_under(c_tokens))  # fmt: skip
        return
    yield f"{key} {'added' if b is None else 'removed' if c is None else 'changed'}"


def _options(tokens: tuple[str, ...]) -> Counter[str]:
    """Option names in an argument list: `--deselect=x` -> `--deselect`, `-kfoo` -> `-k`."""
    names = (t.split("=", 1)[0] if t.startswith("--") else t[:2] for t in tokens)
    return Counter(n for n, t in zip(names, tokens, strict=True) if len(t) > 1 and t[0] == "-")


def _addopts_what(b: tuple[str, ...], c: tuple[str, ...]) -> str:
    gained = sorted(_options(c) - _options(b))
    lost = sorted(_options(b) - _options(c))
    parts = [f"gained {', '.join(gained)}"] if gained else []
    parts += [f"lost {', '.join(lost)}"] if lost else []
    return "addopts " + ("; ".join(parts) if parts else "changed")


def _cov_fail_under(tokens: tuple[str, ...]) -> str | None:
    found = None
    for i, arg in enumerate(tokens):
        if arg.startswith("--cov-fail-under="):
            found = arg.split("=", 1)[1]
        elif arg == "--cov-fail-under" and i + 1 < len(tokens):
            found = tokens[i + 1]
    return found


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _fail_under(name: str, b: str | None, c: str | None) -> Iterator[str]:
    """A coverage threshold lowered, removed or no longer a number."""
    if b is None:
        return
    if c is None:
        yield f"{name} removed (was {b})"
        return
    b_value, c_value = _number(b), _number(c)
    if c_value is None:
        yield f"{name} is not a number: {c[:40]}"
    elif b_value is not None and c_value < b_value:
        yield f"{name} lowered {b} -> {c}"


def _scalar(value: _ConfigValue | None) -> str | None:
    if value is None:
        return None
    return " ".join(value).strip() if isinstance(value, tuple) else value.strip()


def _coverage_changes(spec: _ConfigSpec, base: _Config, cand: _Config) -> Iterator[str]:
    if spec.coverage is None:
        return
    for section in spec.coverage:
        b, c = base.get(section, {}), cand.get(section, {})
        for key in _COVERAGE_KEYS:
            if (key in b, _tokens(key, b.get(key))) != (key in c, _tokens(key, c.get(key))):
                yield f"coverage {key} changed"
    report = spec.coverage[1]
    b_under = _scalar(base.get(report, {}).get("fail_under"))
    yield from _fail_under("fail_under", b_under, _scalar(cand.get(report, {}).get("fail_under")))


def _plugin_changes(spec: _ConfigSpec, base: _Config, cand: _Config) -> Iterator[str]:
    if spec.plugins is None:
        return
    section, key = spec.plugins
    b: object = base.get(section, {})
    c: object = cand.get(section, {})
    if key is not None:
        b, c = base.get(section, {}).get(key), cand.get(section, {}).get(key)
    if b != c:
        yield "pytest11 entry points changed"


# ---------------------------------------------------------------------------- other files

_PACKAGE_KEYS = ("jest", "mocha", "vitest", "ava", "c8", "nyc")
_PACKAGE_SCRIPTS = ("test", "pretest")
_RUNNER_CONFIGS = (
    "jest.config.", "vitest.config.", "vitest.workspace.", "vite.config.", "ava.config.",
    "karma.conf.", "playwright.config.", ".mocharc", ".nycrc", ".c8rc", ".taprc",
)  # fmt: skip
_STARTUP_FILES = frozenset({"sitecustomize.py", "usercustomize.py"})


def _json_object(data: bytes | None) -> dict[str, object] | None:
    if data is None:
        return None
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def _read_package_json(fv: FileVersions) -> Iterator[Weakening]:
    cand = _json_object(fv.candidate)
    if cand is None and _here(fv.candidate, fv.candidate_oversize):
        yield _loosened(fv.path, "package.json could not be parsed")
        return
    base, cand = _json_object(fv.base) or {}, cand or {}
    for key in _PACKAGE_KEYS:
        if base.get(key) != cand.get(key):
            yield _loosened(fv.path, f"{key} changed")
    b_scripts, c_scripts = base.get("scripts"), cand.get("scripts")
    for key in _PACKAGE_SCRIPTS:
        b = b_scripts.get(key) if isinstance(b_scripts, dict) else None
        c = c_scripts.get(key) if isinstance(c_scripts, dict) else None
        if b != c:
            yield _loosened(fv.path, f"scripts.{key} changed")


def _changed_bytes(fv: FileVersions) -> bool:
    return fv.base != fv.candidate or fv.base_oversize or fv.candidate_oversize


def _read_runner_config(fv: FileVersions) -> Iterator[Weakening]:
    """A JS runner's config file is code: any change counts."""
    if _changed_bytes(fv):
        change = "added" if fv.added else "removed" if fv.deleted else "changed"
        yield _loosened(fv.path, f"{PurePosixPath(fv.path).name} {change}")


def _read_startup_file(fv: FileVersions) -> Iterator[Weakening]:
    """Python runs these at start-up, before any test: added or changed counts."""
    if _changed_bytes(fv) and not fv.deleted:
        change = "added" if fv.added else "changed"
        yield _loosened(fv.path, f"{PurePosixPath(fv.path).name} {change}")


def _read_package_init(fv: FileVersions) -> Iterator[Weakening]:
    """unittest discovery does not descend into a test directory without `__init__.py`."""
    if fv.deleted:
        yield _loosened(fv.path, "test package __init__.py removed")


def _named(*names: str) -> Callable[[str], bool]:
    return lambda path: PurePosixPath(path).name in names


def _is_runner_config(path: str) -> bool:
    return PurePosixPath(path).name.startswith(_RUNNER_CONFIGS)


def _is_startup_file(path: str) -> bool:
    p = PurePosixPath(path)
    return p.name in _STARTUP_FILES or p.suffix == ".pth"


def _is_test_package_init(path: str) -> bool:
    p = PurePosixPath(path)
    return p.name == "__init__.py" and not _PY_TEST_DIRS.isdisjoint(p.parts[:-1])


_READERS: tuple[
    tuple[Callable[[str], bool], Callable[[FileVersions], Iterable[Weakening]]], ...
] = (
    (_is_py_test, _read_py_tests),
    (_is_js_test, _read_js_tests),
    (_named("conftest.py"), _read_conftest),
    (_named(*_CONFIG_FILES), _read_config_file),
    (_named("package.json"), _read_package_json),
    (_is_runner_config, _read_runner_config),
    (_is_startup_file, _read_startup_file),
    (_is_test_package_init, _read_package_init),
)
