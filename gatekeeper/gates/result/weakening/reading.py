"""What the readers of the changed files share: the `Weakening` each one reports, one side
of a test file read as data (`Reading`), and the base's and the candidate's readings of a
test file compared, test by test."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict

from gatekeeper.gates.result.versions import FileVersions

Kind = Literal[
    "test-removed", "test-file-removed", "skip-added", "assert-removed", "config-loosened"
]


class Weakening(BaseModel):
    """One way the candidate weakened the tests, read statically from one changed file."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    kind: Kind
    file: str  # repo-relative path, as in FileVersions.path
    test: str | None  # "TestMod.test_add", "adds > one"; None at file or config level
    what: str  # one short line


def _weak(kind: Kind, path: str, test: str | None, what: str) -> Weakening:
    return Weakening(kind=kind, file=path, test=test, what=what)


def loosened(path: str, what: str) -> Weakening:
    return _weak("config-loosened", path, None, what)


# ---------------------------------------------------------------------------- one side read


@dataclass
class Unit:
    """A test (tests > 0: how many declarations carry the name) or a group of tests (a class,
    a describe) under one qualified name."""

    tests: int = 0
    asserts: int = 0
    skips: Counter[str] = field(default_factory=Counter)
    bodies: list[str] = field(default_factory=list)  # what test_bodies digests


@dataclass
class Reading:
    """One side of one test module or conftest.py, read as data."""

    units: dict[str, Unit] = field(default_factory=dict)
    file_skips: Counter[str] = field(default_factory=Counter)  # module level and helpers
    hooks: dict[str, str] = field(default_factory=dict)  # hook or plugin list -> ast dump

    def unit(self, name: str) -> Unit:
        return self.units.setdefault(name, Unit())

    def forget(self, name: str) -> None:
        """A Python name bound again: the earlier test or class (and its tests) is gone."""
        for key in [k for k in self.units if k == name or k.startswith(name + ".")]:
            del self.units[key]

    @property
    def has_tests(self) -> bool:
        return any(unit.tests for unit in self.units.values())


def present(data: bytes | None, oversize: bool) -> bool:
    """The side exists: its bytes were read, or it was too large to read."""
    return data is not None or oversize


# ---------------------------------------------------------------------------- comparing

_NOT_SKIPPED_WHEN_NEW = frozenset({"return statement"})
_JS_FOCUS = frozenset({"fit", "fdescribe", "{ only } option"})


def test_changes(
    fv: FileVersions, base: Reading | None, cand: Reading | None
) -> Iterator[Weakening]:
    """A test file removed or no longer parseable, then test by test."""
    if fv.deleted:
        if present(fv.base, fv.base_oversize) and (base is None or base.has_tests):
            what = "test file removed" if base else "test file removed (unreadable on the base)"
            yield _weak("test-file-removed", fv.path, None, what)
        return
    if cand is None:
        if base is not None and base.has_tests:
            yield _weak("test-removed", fv.path, None, "test file could not be parsed")
        return
    yield from _unit_changes(fv.path, base.units if base else {}, cand.units)
    yield from file_skip_changes(fv.path, base.file_skips if base else Counter(), cand.file_skips)


def _unit_changes(path: str, base: dict[str, Unit], cand: dict[str, Unit]) -> Iterator[Weakening]:
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


def _kept_unit(path: str, name: str, b: Unit, c: Unit) -> Iterator[Weakening]:
    for label in sorted(c.skips):
        if c.skips[label] > b.skips[label]:
            yield _weak("skip-added", path, name, _skip_what(label, None))
    if b.tests and c.tests and c.asserts < b.asserts:
        yield _weak("assert-removed", path, name, f"assertions {b.asserts} -> {c.asserts}")


def _new_unit(path: str, name: str, c: Unit) -> Iterator[Weakening]:
    noun = "test" if c.tests else "test group"
    for label in sorted(c.skips):
        if c.skips[label] > 0 and label not in _NOT_SKIPPED_WHEN_NEW:
            yield _weak("skip-added", path, name, _skip_what(label, noun))


def file_skip_changes(path: str, base: Counter[str], cand: Counter[str]) -> Iterator[Weakening]:
    for label in sorted(cand):
        if cand[label] > base[label]:
            yield _weak("skip-added", path, None, _skip_what(label, None))


def _skip_what(label: str, new: str | None) -> str:
    if label in _JS_FOCUS or ".only" in label:
        return f"{label} added (other tests no longer run)"
    return f"new {new} is skipped ({label})" if new else f"{label} added"
