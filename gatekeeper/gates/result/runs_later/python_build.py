"""Python builds: `[build-system]` in `pyproject.toml`, and the in-tree build backend its
`backend-path` names."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Sequence

from gatekeeper.gates.result.runs_later.common import (
    Hits,
    Said,
    Unreadable,
    decode,
    file_name,
    hit,
    pair,
    repo_path,
)
from gatekeeper.gates.result.runs_later.documents import table, toml_object
from gatekeeper.gates.result.versions import FileVersions


def pyproject(base: str | None, cand: str) -> Said:
    b, c = pair(toml_object, base, cand)
    bb, cb = table(b, "build-system"), table(c, "build-system")
    for key in ("requires", "build-backend", "backend-path"):
        if bb.get(key) != cb.get(key):
            yield f"build-system {key} changed", False


def _backend_roots(f: FileVersions) -> Iterator[str]:
    """Where an in-tree build backend (`backend-path`) lives: `dir/module`, as a file stem
    and a package folder."""
    try:
        system = table(
            toml_object(decode(f.candidate, f.candidate_oversize, "utf-8-sig")), "build-system"
        )
    except Unreadable:
        return
    paths, backend = system.get("backend-path"), system.get("build-backend")
    if not isinstance(paths, list) or not isinstance(backend, str):
        return
    top = backend.partition(":")[0].partition(".")[0].strip()
    for p in paths:
        root = repo_path(posixpath.dirname(f.path), p, top) if isinstance(p, str) else None
        if top and root is not None:
            yield root


def backend_hits(files: Sequence[FileVersions], changed: Sequence[FileVersions]) -> Hits:
    roots = {r for f in files if file_name(f.path) == "pyproject.toml" for r in _backend_roots(f)}
    for f in changed:
        if any(f.path == f"{r}.py" or f.path.startswith(f"{r}/") for r in roots):
            yield hit(f.path, "python-build", "build backend changed", False)
