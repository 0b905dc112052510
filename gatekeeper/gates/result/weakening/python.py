"""Python test modules, read with `ast` and never imported: the tests pytest and unittest
would collect, the skips, assertions and body of each, the module's own skips, and the
`pytest_*` hooks and plugin lists it defines."""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Iterable, Iterator
from itertools import chain as chained
from pathlib import PurePosixPath

from gatekeeper.gates.result.versions import FileVersions
from gatekeeper.gates.result.weakening.reading import (
    Reading,
    Unit,
    Weakening,
    loosened,
    test_changes,
)

PY_TEST_DIRS = frozenset({"tests", "test"})
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


def is_py_test(path: str) -> bool:
    p = PurePosixPath(path)
    if p.suffix != ".py":
        return False
    named = p.name.startswith("test_") or p.name.endswith("_test.py")
    return named or not PY_TEST_DIRS.isdisjoint(p.parts[:-1])


def read_py(data: bytes | None) -> Reading | None:
    """A Python module's tests, skips and hooks; None when absent or not parseable.
    `ast.parse` on the bytes honours a BOM and a PEP 263 coding line, as Python would."""
    if data is None:
        return None
    try:
        return _PyScan(ast.parse(data)).read()
    except (SyntaxError, ValueError, RecursionError):
        return None


def read_py_tests(fv: FileVersions) -> Iterator[Weakening]:
    base, cand = read_py(fv.base), read_py(fv.candidate)
    yield from test_changes(fv, base, cand)
    if cand is not None and PurePosixPath(fv.path).name != "conftest.py":
        yield from hook_changes(fv.path, base.hooks if base else {}, cand.hooks, "")


def hook_changes(
    path: str, base: dict[str, str], cand: dict[str, str], prefix: str
) -> Iterator[Weakening]:
    for name in sorted(base.keys() | cand.keys()):
        b, c = base.get(name), cand.get(name)
        if b != c:
            change = "added" if b is None else "removed" if c is None else "changed"
            noun = name if name in _PY_PLUGIN_NAMES else f"hook {name}"
            yield loosened(path, f"{prefix}{noun} {change}")


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
    """Reads one parsed module into a Reading: pytest's and unittest's collection rules
    (module `test*` functions, `test*` methods of `Test*` classes and TestCase subclasses),
    names rebound later in the module replacing earlier ones."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.renames = _py_renames(tree)
        self.aliases: frozenset[str] = frozenset()  # module names bound to a skip marker
        self.test_classes: set[str] = set()
        self.reading = Reading()

    def read(self) -> Reading:
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

    def _test(self, fn: _PyFunction) -> Unit:
        decorated = self._mark_refs(_walk_all(fn.decorator_list), marks_only=False)
        skips = Counter(f"@{ref}" for ref in decorated)
        skips.update(self._body_skips(fn.body))
        returns = sum(isinstance(n, ast.Return) for n in _own_nodes(fn.body))
        if returns:
            skips["return statement"] += returns
        return Unit(tests=1, asserts=self._asserts(fn.body), skips=skips, bodies=[_py_body(fn)])

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
