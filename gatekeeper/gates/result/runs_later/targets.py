"""The make and just targets the base plan's checks run: what changed in them, in what they
reach and at the top level of their files, and in the files those include."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator, Sequence

from gatekeeper.gates.result.protected import matches
from gatekeeper.gates.result.runs_later.common import (
    Hits,
    RunsLater,
    Unreadable,
    decode,
    file_name,
    hit,
    is_change,
    pair,
    repo_path,
)
from gatekeeper.gates.result.runs_later.just import parse_just
from gatekeeper.gates.result.runs_later.make import parse_make
from gatekeeper.gates.result.runs_later.script import Script, stem_of
from gatekeeper.gates.result.versions import FileVersions

_MAX_REACHED = 4096


def _reached(s: Script, names: Iterable[str]) -> set[str]:
    """`names` and their prerequisites, transitively, through explicit and pattern rules."""
    if s.opaque:
        return set(s.headers)
    patterns = [t for t in s.headers if "%" in t]
    seen: set[str] = set()
    todo = list(names)
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        if len(seen) > _MAX_REACHED:
            return seen | set(s.headers)
        seen.add(t)
        todo.extend(s.deps.get(t, ()))
        for p in patterns:
            stem = stem_of(p, t) if "%" not in t else None
            if stem is not None:
                seen.add(p)
                todo.extend(d.replace("%", stem) for d in s.deps.get(p, ()))
    return seen


def _script_changes(b: Script, c: Script, targets: Iterable[str]) -> Iterator[str]:
    """What changed in the planned targets, their prerequisites and the top level."""
    wanted = set(targets)
    names = {c.aliases.get(t, t) for t in wanted if t}
    if "" in wanted:
        names.update(() if c.first is None else (c.first,))
        if b.first != c.first:
            yield "default target changed"
    for t in sorted(_reached(c, names)):
        if b.headers.get(t, []) != c.headers.get(t, []):
            yield f"target {t}'s prerequisites changed"
        if b.bodies.get(t, []) != c.bodies.get(t, []):
            yield f"target {t}'s recipe changed"
    added = set(c.include_lines) - set(b.include_lines)
    if added:
        yield "include added"
    if c.top != b.top or (not added and c.include_lines != b.include_lines):
        yield "top-level line changed"


_MAKEFILES = frozenset({"Makefile", "makefile", "GNUmakefile"})
_JUSTFILES = frozenset({"justfile", ".justfile"})
_FRAGMENTS = {False: ("*.mk", "*.mak"), True: ("*.just",)}  # by "is just"


def _is_just(plan_path: str) -> bool:
    name = file_name(plan_path).lower()
    return name in _JUSTFILES or name.endswith(".just")


def _names(plan_path: str, path: str) -> bool:
    """`path` is the file `plan_path` names; a default name stands for each name the tool
    looks for in that folder."""
    (pd, pn), (d, n) = posixpath.split(plan_path), posixpath.split(path)
    if plan_path == path or pd != d:
        return plan_path == path
    return (pn == "Makefile" and n in _MAKEFILES) or (pn == "justfile" and n.lower() in _JUSTFILES)


def _planned_file(
    f: FileVersions, just: bool, targets: Iterable[str]
) -> tuple[list[RunsLater], Script | None]:
    """A planned makefile's or justfile's changes, and its candidate reading (for includes)."""
    parse = parse_just if just else parse_make
    cand = decode(f.candidate, f.candidate_oversize, "latin-1")  # compared, never shown
    try:
        if cand is None:
            raise Unreadable
        b, c = pair(parse, decode(f.base, f.base_oversize, "latin-1"), cand)
    except Unreadable:
        what = f"{file_name(f.path)} could not be parsed"
        return [hit(f.path, "make-target", what, False)] if is_change(f) else [], None
    hits = [hit(f.path, "make-target", w, False) for w in _script_changes(b, c, targets)]
    return hits, c


def script_hits(
    files: Sequence[FileVersions],
    changed: Sequence[FileVersions],
    plan: Sequence[tuple[str, str]],
) -> Hits:
    wanted: dict[str, set[str]] = {}
    for plan_path, target in plan:
        wanted.setdefault(plan_path, set()).add(target)
    planned: set[str] = set()
    included: set[str | None] = set()
    for f in files:
        for plan_path, targets in wanted.items():
            if f.deleted or not _names(plan_path, f.path):
                continue
            planned.add(f.path)
            hits, script = _planned_file(f, _is_just(plan_path), targets)
            yield from hits
            folder = posixpath.dirname(f.path)
            included.update(repo_path(folder, p) for p in (script.includes if script else ()))
    kinds = {_is_just(p) for p in wanted}
    fragments = tuple(g for just in kinds for g in _FRAGMENTS[just])
    for f in changed:
        if f.path not in planned and (f.path in included or matches(f.path, fragments)):
            yield hit(f.path, "make-target", "included file changed", False)
