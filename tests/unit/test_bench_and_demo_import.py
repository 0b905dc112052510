"""bench/*.py, ci/demo.py and ci/smoke.py cannot rot: each imports cleanly, and every
module and name it imports (at the top or inside a function) still exists, so moving a
module cannot leave them behind. Nothing is run: each keeps its work under `__main__`."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = [
    *sorted((ROOT / "bench").glob("*.py")),
    ROOT / "ci" / "demo.py",
    ROOT / "ci" / "smoke.py",
]


def _load(path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Execute `path` as a module that is not `__main__`, as `import` would (registered in
    sys.modules while this test runs: dataclasses look their module up there)."""
    name = f"_script_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def _imports(path: Path) -> Iterator[tuple[str, str | None]]:
    """(module, name or None) for every absolute import statement anywhere in `path`."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module != "__future__":
                yield from ((node.module, alias.name) for alias in node.names)


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_every_bench_and_ci_script_is_covered() -> None:
    names = {_rel(p) for p in SCRIPTS}
    assert {"bench/run.py", "bench/corpus.py", "ci/demo.py", "ci/smoke.py"} <= names


@pytest.mark.parametrize("path", SCRIPTS, ids=_rel)
def test_script_imports_without_running_its_main(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = _load(path, monkeypatch)
    # The shared fake-secret corpus and issue 33's row recorder are libraries, not scripts.
    if path.name not in ("corpus.py", "rows.py"):
        assert callable(getattr(module, "main", None)), f"{_rel(path)} has no main()"


@pytest.mark.parametrize("path", SCRIPTS, ids=_rel)
def test_every_import_in_a_script_resolves(path: Path) -> None:
    for module_name, name in _imports(path):
        module = importlib.import_module(module_name)
        if name is None or name == "*" or hasattr(module, name):
            continue
        try:  # a submodule not yet imported, e.g. `from gatekeeper.gates import records`
            found = importlib.util.find_spec(f"{module_name}.{name}") is not None
        except ModuleNotFoundError:  # the parent is a module, not a package
            found = False
        assert found, f"{_rel(path)}: `from {module_name} import {name}` no longer resolves"
