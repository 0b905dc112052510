"""A read-only, bounded view of one repository for agents (the MCP repo gateway).

Only paths inside the repository: `..` and absolute paths are refused, and every
file is read through `fsread` (down from the repository top, no link followed, so a
symlink, or a symlinked directory on the way, serves nothing); `.git`, `.oms`,
dependency/build folders and secret-looking names are skipped. Every text returned
is scanned by both scanners and lines with findings are replaced before it leaves;
search leaves lines with findings out of matching altogether, so hit or miss says
nothing about a redacted value. Worktree state and diffs are oms' own (`worktree`),
never `git status`/`git diff` in the repository. A regex search runs in an isolated
interpreter (`-I -S`, cwd `/`, no file access: it is handed the lines) under a time
bound, so neither a pathological pattern nor a `re.py` in the repository can act.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import PurePosixPath
from typing import Any

from gatekeeper.errors import UsageError
from gatekeeper.mcp.answers import DiffText, FileText, Hit, Listing, Matches
from gatekeeper.mcp.bounds import PAGE_BYTES, json_size, page
from gatekeeper.repo.fsread import (
    FileRefused,
    LinkRefused,
    Missing,
    NotRegular,
    RepoFiles,
    TooLarge,
    parts_of,
)
from gatekeeper.repo.git import Repo
from gatekeeper.repo.paths import DEPENDENCY_DIRS, secret_looking
from gatekeeper.repo.refs import current_branch, resolve_commit
from gatekeeper.repo.worktree import (
    REGULAR_MODES,
    TreeEntry,
    blob_id,
    index_entries,
    read_blobs,
    tree_entries,
    unified_diff,
    untracked,
    worktree_state,
)
from gatekeeper.scan import ScanItem
from gatekeeper.scan.policy import redacted, scan_with_policy
from gatekeeper.scan.redact import covered_lines
from policy import LoadedPolicy

MAX_FILE_BYTES = 4 << 20
SKIP_DIRS = DEPENDENCY_DIRS | {".git", ".oms"}
REGEX_TIMEOUT_S = 5
_SCAN_CACHE_MAX = 50_000


def _skipped(rel: str, is_dir: bool = False) -> str | None:
    parts = PurePosixPath(rel).parts
    dirs = parts if is_dir else parts[:-1]
    if any(p in SKIP_DIRS for p in dirs) or (parts and parts[-1] in (".git", ".oms")):
        return "a .git, .oms, dependency or build folder"
    if secret_looking(rel):
        return "a secret-looking name"
    return None


def resolve_inside(repo: Repo, raw: str, scope: bool = False) -> str:
    """The repository-relative spelling of `raw` ("" for the top), else UsageError;
    `scope`: it names a folder to list or diff below.

    Decided from the name alone; whether anything is served there is fsread's call.
    """
    if raw in ("", ".", "./"):
        return ""
    rel = "/".join(parts_of(raw.rstrip("/")))
    why = _skipped(rel, is_dir=scope)
    if why:
        raise UsageError(f"path is not served: {why}")
    return rel


def _below(names: Iterable[str], rel: str) -> list[str]:
    prefix = rel + "/"
    return [n for n in names if not rel or n == rel or n.startswith(prefix)]


def redact_text(repo: Repo, path: str, text: str, loaded: LoadedPolicy) -> tuple[str, int]:
    """`text` with its findings' lines replaced, and how many findings there were
    (answered from the scan-result cache when this content was scanned before)."""
    return redacted(ScanItem.whole(path, text), loaded)


def served_files(repo: Repo, path: str) -> list[str]:
    """Tracked and untracked, not ignored, served regular files below `path` (no links)."""
    rel = resolve_inside(repo, path, scope=True)
    names = {e.path for e in index_entries(repo)}.union(untracked(repo))
    out = []
    with RepoFiles(repo.top) as files:
        for n in sorted(_below(names, rel)):
            if _skipped(n):
                continue
            try:
                if files.lstat(n).st_mode & 0o170000 == 0o100000:
                    out.append(n)
            except FileRefused:
                continue  # deleted, or a link on the way: not served
    return out


def tree(repo: Repo, path: str, offset: int, limit: int) -> Listing:
    files = served_files(repo, path)
    window = files[offset : offset + limit]
    budget, shown = PAGE_BYTES, []
    for f in window:
        budget -= json_size(f) + 8
        if budget < 0:
            break
        shown.append(f)
    return Listing(tuple(shown), len(files), offset)


def _refusal(exc: FileRefused) -> UsageError:
    if isinstance(exc, LinkRefused):
        return UsageError("path is not served: it is or passes through a symlink")
    if isinstance(exc, TooLarge):
        return UsageError(f"file is larger than {MAX_FILE_BYTES} bytes")
    if isinstance(exc, NotRegular | Missing):
        return UsageError("not a file")
    return UsageError(f"not served: {exc.reason}")


def _read(files: RepoFiles, rel: str) -> bytes:
    try:
        return files.read(rel, MAX_FILE_BYTES)
    except FileRefused as exc:
        raise _refusal(exc) from None


def read_file(repo: Repo, path: str, offset: int, loaded: LoadedPolicy) -> FileText:
    rel = resolve_inside(repo, path)
    if not rel:
        raise UsageError("not a file")
    with RepoFiles(repo.top) as files:
        data = _read(files, rel)
    if b"\0" in data[:8192]:
        raise UsageError("binary file")
    text, found = redacted(ScanItem.of_bytes(rel, data, "replace"), loaded)
    return FileText(rel, page(text, offset, "text"), found)


# -- search --------------------------------------------------------------------------------

# (policy digest, path, sha256 of bytes) -> lines holding a finding, for the server's life:
# search scans every file it searches (not only those that match: that would time a hit).
_withheld_cache: dict[tuple[str, str, str], frozenset[int]] = {}


@dataclass(frozen=True)
class _Text:
    path: str
    data: bytes

    @cached_property
    def key(self) -> tuple[str, str]:
        return self.path, hashlib.sha256(self.data).hexdigest()


def _texts(repo: Repo, names: list[str]) -> list[_Text]:
    out = []
    with RepoFiles(repo.top) as files:
        for n in names:
            try:
                data = files.read(n, MAX_FILE_BYTES)
            except FileRefused:
                continue
            if b"\0" not in data[:8192]:
                out.append(_Text(n, data))
    return out


def _withheld(texts: list[_Text], loaded: LoadedPolicy) -> dict[str, frozenset[int]]:
    """path -> the line numbers that hold a finding (through each finding's last line)."""
    known = {t.path: _withheld_cache.get((loaded.digest, *t.key)) for t in texts}
    todo = [t for t in texts if known[t.path] is None]
    if todo:
        # One run of each scanner for every file not seen before (the scan-result cache
        # answers the ones scanned in an earlier search, read or gate).
        report = scan_with_policy(
            [ScanItem.of_bytes(t.path, t.data, "replace", t.key[1]) for t in todo], loaded
        )
        lines = {t.path: frozenset[int]() for t in todo} | covered_lines(report.findings)
        if len(_withheld_cache) + len(todo) > _SCAN_CACHE_MAX:
            _withheld_cache.clear()
        for t in todo:
            known[t.path] = _withheld_cache[(loaded.digest, *t.key)] = lines[t.path]
    return {path: rows or frozenset() for path, rows in known.items()}


def _clean_lines(
    texts: list[_Text], withheld: dict[str, frozenset[int]], must_hold: str | None = None
) -> list[list[Any]]:
    """[[path, [[n, line], ...]], ...]: every line of every text except those withheld.

    With `must_hold` (a literal query), a text that withholds nothing and does not contain
    it is left out: none of its lines could match. A text that withholds a line is always
    kept, so how long a search takes says nothing about what a withheld line holds.
    """
    out = []
    for t in texts:
        skip = withheld[t.path]
        text = t.data.decode("utf-8", "replace")
        if must_hold is not None and not skip and must_hold not in text:
            continue
        rows = text.split("\n")
        out.append([t.path, [[n, line] for n, line in enumerate(rows, 1) if n not in skip]])
    return out


def _literal(query: str, files: list[list[Any]], limit: int) -> list[list[Any]]:
    hits: list[list[Any]] = []
    for path, rows in files:
        for n, line in rows:
            if query in line:
                hits.append([path, n, line[:200]])
                if len(hits) >= limit:
                    return hits
    return hits


# Runs as `python -I -S -c`: no repository, cwd or site directory on the import path, and
# it opens no file; it is handed the (already withheld) lines on stdin.
_REGEX_WORKER = """
import json, re, sys
pattern, files, limit = json.load(sys.stdin)
rx = re.compile(pattern)
hits = []
for path, rows in files:
    for n, line in rows:
        if rx.search(line):
            hits.append([path, n, line[:200]])
            if len(hits) >= limit:
                break
    if len(hits) >= limit:
        break
print(json.dumps(hits))
"""


def _regex(query: str, files: list[list[Any]], limit: int) -> list[list[Any]]:
    try:
        re.compile(query)
    except re.error as exc:
        raise UsageError(f"bad regex: {exc}") from None
    try:
        # A fixed argv: the pattern and the lines travel on stdin.
        proc = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _REGEX_WORKER],
            input=json.dumps([query, files, limit]), capture_output=True, text=True,
            timeout=REGEX_TIMEOUT_S, check=True, cwd="/", env={"LC_ALL": "C.UTF-8"},
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise UsageError(f"regex search took over {REGEX_TIMEOUT_S} s; use a literal "
                         "search or a simpler pattern") from None  # fmt: skip
    except subprocess.CalledProcessError:
        raise UsageError("regex search failed; use a literal search") from None
    hits: list[list[Any]] = json.loads(proc.stdout)
    return hits


def search(repo: Repo, query: str, regex: bool, path: str, limit: int,
           loaded: LoadedPolicy) -> Matches:  # fmt: skip
    """Matches on lines without findings only; `redacted_findings` counts the withheld
    lines of every searched file, whatever the query (so it tells nothing about a match)."""
    if not query or len(query) > 200:
        raise UsageError("query must be 1 to 200 characters")
    texts = _texts(repo, served_files(repo, path))
    withheld = _withheld(texts, loaded)
    files = _clean_lines(texts, withheld, None if regex else query)
    hits = _regex(query, files, limit) if regex else _literal(query, files, limit)
    results: list[Hit] = []
    budget = PAGE_BYTES
    for name, n, line in hits:
        hit = Hit(name, n, line)
        budget -= json_size(hit.to_json()) + 16
        if budget < 0:
            break
        results.append(hit)
    truncated = len(results) < len(hits) or len(hits) >= limit
    return Matches(tuple(results), truncated, sum(len(v) for v in withheld.values()))


# -- worktree state and diff ---------------------------------------------------------------


def status(repo: Repo) -> list[str]:
    """`git status --porcelain=v1 --branch`-shaped lines, from oms' own worktree state."""
    head = resolve_commit(repo.top, "HEAD")
    branch = current_branch(repo)
    lines = [f"## {branch}" if branch else "## HEAD (no branch)"]
    return lines + [c.line() for c in worktree_state(repo, head).changes]


def _old_side(repo: Repo, base: str | None) -> tuple[dict[str, TreeEntry], set[str]]:
    """(path -> entry the worktree is compared with, every index path)."""
    entries = index_entries(repo)
    indexed = {e.path for e in entries}
    if base:
        return tree_entries(repo, resolve_commit(repo.top, base)), indexed
    return {e.path: TreeEntry(e.mode, e.oid) for e in entries if e.stage == 0}, indexed


def _same(entry: TreeEntry | None, data: bytes | None) -> bool:
    return entry is not None and data is not None and blob_id(data, len(entry.oid)) == entry.oid


def _file_diffs(repo: Repo, old: dict[str, TreeEntry], names: list[str]) -> list[bytes]:
    """One diff per changed served file: the old blob against the worktree bytes."""
    news: dict[str, bytes | None] = {}
    with RepoFiles(repo.top) as files:
        for n in names:
            e = old.get(n)
            if e is not None and e.mode not in REGULAR_MODES:
                continue  # links and submodules are not served
            try:
                news[n] = files.read(n, MAX_FILE_BYTES)
            except Missing:
                news[n] = None
            except FileRefused:
                continue
    changed = [n for n, data in news.items() if not _same(old.get(n), data)]
    blobs = read_blobs(repo, (old[n].oid for n in changed if n in old))
    out = []
    for n in changed:
        a = blobs[old[n].oid] if n in old else None
        b = news[n]
        if (a is not None and b"\0" in a[:8192]) or (b is not None and b"\0" in b[:8192]):
            out.append(f"diff --git a/{n} b/{n}\nBinary files differ\n".encode())
        elif d := unified_diff(n, a, b):
            out.append(d)
    return out


def diff(repo: Repo, base: str | None, path: str, offset: int, loaded: LoadedPolicy) -> DiffText:
    """The worktree diff (against the index, or `base` if given) of served files only,
    built by oms from blobs and fsread bytes, redacted, paged."""
    rel = resolve_inside(repo, path, scope=True)
    old, indexed = _old_side(repo, base)
    names = sorted(n for n in _below(set(old) | indexed, rel) if not _skipped(n))
    diffs = _file_diffs(repo, old, names)
    text = b"".join(diffs).decode("utf-8", "replace")
    text, found = redact_text(repo, "<diff>", text, loaded)
    return DiffText(page(text, offset, "diff"), found, len(diffs))
