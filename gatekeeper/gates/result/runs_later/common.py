"""What every runs-later reader shares: the entry model (`RunsLater`, its `Kind`), the
`Unreadable` signal, and reading both sides of a changed file (decoded, paired, compared
key by key)."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterator, Mapping
from typing import Literal, TypeVar, get_args

from pydantic import BaseModel, ConfigDict

from gatekeeper.gates.result.versions import FileVersions

Kind = Literal[
    "npm-lifecycle", "npmrc", "yarnrc", "workspace-tasks", "tool-versions", "wrapper-url",
    "python-build", "make-target", "policy-listed",
]  # fmt: skip
KINDS: tuple[Kind, ...] = get_args(Kind)


class RunsLater(BaseModel):
    """One change that runs later outside the sandbox."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    path: str
    kind: Kind
    what: str
    automatic: bool  # runs without a human action (install, checkout, wrapper start)


class Unreadable(Exception):
    """A side that cannot be read as the format its name claims."""


_T = TypeVar("_T")
_MAX_WHAT = 120
Said = Iterator[tuple[str, bool]]  # (what, automatic) from one reader
Hits = Iterator[RunsLater]


def is_change(f: FileVersions) -> bool:
    """Added or modified (deletions run nothing); equal bytes are context only."""
    if f.deleted:
        return False
    return f.base_oversize or f.candidate_oversize or f.base != f.candidate


def hit(path: str, kind: Kind, what: str, automatic: bool) -> RunsLater:
    return RunsLater(path=path, kind=kind, what=_one_line(what), automatic=automatic)


def _one_line(text: str) -> str:
    """`what` holds names from the candidate's files: one printable line, kept short."""
    flat = "".join(ch if ch.isprintable() else " " for ch in text)
    return flat if len(flat) <= _MAX_WHAT else f"{flat[: _MAX_WHAT - 3]}..."


def file_name(path: str) -> str:
    return posixpath.basename(path)


def decode(data: bytes | None, oversize: bool, encoding: str) -> str | None:
    if data is None or oversize:
        return None
    try:
        return data.decode(encoding)
    except UnicodeDecodeError:
        return None


def pair(parse: Callable[[str | None], _T], base: str | None, cand: str) -> tuple[_T, _T]:
    """Both sides parsed (a parser reads None, an absent side, as empty); the candidate must
    parse, an unreadable base reads as absent (everything on the candidate is added)."""
    c = parse(cand)
    try:
        return parse(base), c
    except Unreadable:
        return parse(None), c


def key_changes(
    b: Mapping[str, object], c: Mapping[str, object], label: str = "", new: str = "set"
) -> Iterator[tuple[str, str]]:
    """(key, what) for each key the candidate adds (`new`) or changes."""
    for key in sorted(c):
        if c[key] != b.get(key):
            yield key, f"{label}{key} {'changed' if key in b else new}"


def unguarded(b: Mapping[str, str], c: Mapping[str, str], key: str, guard: str) -> Said:
    """A switch that stops scripts (`guard` its value) set otherwise, or removed."""
    bv, cv = (_switch(side.get(key)) for side in (b, c))
    if cv != bv and cv != guard and (cv is not None or bv == guard):
        yield (f"{key} unset" if cv is None else f"{key} set to {cv}"), True


def _switch(value: str | None) -> str | None:
    return None if value is None else value.strip().strip("'\"").lower()


def repo_path(*parts: str) -> str | None:
    """A path relative to the repository root, or None when it leaves it."""
    path = posixpath.normpath(posixpath.join(*parts)) if parts else "."
    return None if path.startswith(("/", "../")) or path == ".." else path
