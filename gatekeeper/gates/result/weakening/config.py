"""The configuration that steers a test run, read as data: conftest.py's hooks and skips,
the pytest, coverage and `pytest11` sections of ini and TOML files, package.json's runner
keys, JS runner configs, Python's start-up files and a test package's `__init__.py`."""

from __future__ import annotations

import configparser
import json
import math
import shlex
import tomllib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain as chained
from pathlib import PurePosixPath
from typing import Any

from gatekeeper.gates.result.versions import FileVersions
from gatekeeper.gates.result.weakening.python import PY_TEST_DIRS, hook_changes, read_py
from gatekeeper.gates.result.weakening.reading import (
    Reading,
    Weakening,
    file_skip_changes,
    loosened,
    present,
)

# ---------------------------------------------------------------------------- conftest.py


def read_conftest(fv: FileVersions) -> Iterator[Weakening]:
    cand = read_py(fv.candidate)
    if fv.added:
        hooks = ", ".join(sorted(cand.hooks)) if cand is not None else ""
        yield loosened(fv.path, f"conftest.py added ({hooks})" if hooks else "conftest.py added")
        return
    if cand is None and not fv.deleted:
        yield loosened(fv.path, "conftest.py could not be parsed")
        return
    base, cand = read_py(fv.base) or Reading(), cand or Reading()
    yield from hook_changes(fv.path, base.hooks, cand.hooks, "conftest.py ")
    yield from file_skip_changes(fv.path, base.file_skips, cand.file_skips)


# ---------------------------------------------------------------------------- ini / toml


@dataclass(frozen=True)
class _ConfigSpec:
    toml: bool
    pytest: tuple[str, ...] = ()  # the sections pytest reads in this file
    coverage: tuple[str, str] | None = None  # coverage's run and report sections
    plugins: tuple[str, str | None] | None = None  # section (and key) of pytest11 entry points
    claims: bool = False  # read whenever it exists, before the other config files


CONFIG_FILES = {
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


def read_config_file(fv: FileVersions) -> Iterator[Weakening]:
    name = PurePosixPath(fv.path).name
    spec = CONFIG_FILES[name]
    cand = _read_config(fv.candidate, spec.toml)
    if cand is None and present(fv.candidate, fv.candidate_oversize):
        yield loosened(fv.path, f"{name} could not be parsed")
        return
    base = _read_config(fv.base, spec.toml) or {}
    cand = cand or {}
    if spec.claims and (fv.added or fv.deleted):
        yield loosened(fv.path, f"{name} {'added' if fv.added else 'removed'}")
    for what in chained(
        _pytest_changes(spec, base, cand),
        _coverage_changes(spec, base, cand),
        _plugin_changes(spec, base, cand),
    ):
        yield loosened(fv.path, what)


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


def read_package_json(fv: FileVersions) -> Iterator[Weakening]:
    cand = _json_object(fv.candidate)
    if cand is None and present(fv.candidate, fv.candidate_oversize):
        yield loosened(fv.path, "package.json could not be parsed")
        return
    base, cand = _json_object(fv.base) or {}, cand or {}
    for key in _PACKAGE_KEYS:
        if base.get(key) != cand.get(key):
            yield loosened(fv.path, f"{key} changed")
    b_scripts, c_scripts = base.get("scripts"), cand.get("scripts")
    for key in _PACKAGE_SCRIPTS:
        b = b_scripts.get(key) if isinstance(b_scripts, dict) else None
        c = c_scripts.get(key) if isinstance(c_scripts, dict) else None
        if b != c:
            yield loosened(fv.path, f"scripts.{key} changed")


def _changed_bytes(fv: FileVersions) -> bool:
    return fv.base != fv.candidate or fv.base_oversize or fv.candidate_oversize


def read_runner_config(fv: FileVersions) -> Iterator[Weakening]:
    """A JS runner's config file is code: any change counts."""
    if _changed_bytes(fv):
        change = "added" if fv.added else "removed" if fv.deleted else "changed"
        yield loosened(fv.path, f"{PurePosixPath(fv.path).name} {change}")


def read_startup_file(fv: FileVersions) -> Iterator[Weakening]:
    """Python runs these at start-up, before any test: added or changed counts."""
    if _changed_bytes(fv) and not fv.deleted:
        change = "added" if fv.added else "changed"
        yield loosened(fv.path, f"{PurePosixPath(fv.path).name} {change}")


def read_package_init(fv: FileVersions) -> Iterator[Weakening]:
    """unittest discovery does not descend into a test directory without `__init__.py`."""
    if fv.deleted:
        yield loosened(fv.path, "test package __init__.py removed")


def is_runner_config(path: str) -> bool:
    return PurePosixPath(path).name.startswith(_RUNNER_CONFIGS)


def is_startup_file(path: str) -> bool:
    p = PurePosixPath(path)
    return p.name in _STARTUP_FILES or p.suffix == ".pth"


def is_test_package_init(path: str) -> bool:
    p = PurePosixPath(path)
    return p.name == "__init__.py" and not PY_TEST_DIRS.isdisjoint(p.parts[:-1])
