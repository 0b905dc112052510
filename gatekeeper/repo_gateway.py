"""A read-only, bounded view of one repository for agents (the MCP repo gateway).

Only paths inside the repository: `..`, absolute paths and symlinks that resolve
outside are refused; `.git`, `.oms`, dependency/build folders and secret-looking
names are skipped. Every text returned is scanned by both scanners and lines with
findings are replaced before it leaves. Search is literal by default; a regex
search runs under a time bound in a subprocess, so a pathological pattern cannot
hang the server.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any

from .errors import UsageError
from .git import Repo, git, resolve_commit
from .paths import DEPENDENCY_DIRS, secret_looking
from .result_gate import scan_both
from .scan import ScanItem, redact_lines

PAGE_BYTES = 5000  # JSON-encoded bytes of text per answer (results stay under 8 KiB)
MAX_FILE_BYTES = 4 << 20
SKIP_DIRS = DEPENDENCY_DIRS | {".git", ".oms"}
REGEX_TIMEOUT_S = 5


def _skipped(rel: str, is_dir: bool = False) -> str | None:
    parts = PurePosixPath(rel).parts
    dirs = parts if is_dir else parts[:-1]
    if any(p in SKIP_DIRS for p in dirs) or (parts and parts[-1] in (".git", ".oms")):
        return "a .git, .oms, dependency or build folder"
    if secret_looking(rel):
        return "a secret-looking name"
    return None


def resolve_inside(repo: Repo, raw: str) -> tuple[Path, str]:
    """(real path, repo-relative path) for a path inside the repository, else UsageError."""
    if raw in ("", "."):
        return repo.top, ""
    p = PurePosixPath(raw)
    if p.is_absolute() or ".." in p.parts or "\x00" in raw:
        raise UsageError("path must be relative to the repository, without '..'")
    full = repo.top / str(p)
    real = Path(os.path.realpath(full))
    top = Path(os.path.realpath(repo.top))
    if real != top and top not in real.parents:
        raise UsageError("path resolves outside the repository")
    rel = str(p)
    # Both the name asked for and what it resolves to: a link inside the repository
    # to .git/config or .env must not serve what the name itself would not.
    why = _skipped(rel, full.is_dir()) or _skipped(
        real.relative_to(top).as_posix() if real != top else "", real.is_dir()
    )
    if why:
        raise UsageError(f"path is not served: {why}")
    return real, rel


def redact_text(repo: Repo, path: str, text: str, loaded: Any) -> tuple[str, int]:
    findings, _ = scan_both([ScanItem.whole(path, text)], loaded)
    if not findings:
        return text, 0
    return redact_lines(text, findings), len(findings)


def served_files(repo: Repo, path: str) -> list[str]:
    """Tracked and untracked, not ignored, served files below `path` (no symlinks)."""
    _, rel = resolve_inside(repo, path)
    out = git(repo.top, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--",
              rel or ".")  # fmt: skip
    top = os.path.realpath(repo.top)
    names = (raw.decode("utf-8", "replace") for raw in out.split(b"\0") if raw)
    return sorted(n for n in names
                  if not _skipped(n) and not os.path.islink(os.path.join(top, n)))  # fmt: skip


def json_size(value: Any) -> int:
    """Bytes `value` takes in the JSON text that goes to the client."""
    return len(json.dumps(value, ensure_ascii=False).encode())


def fit(text: str, offset: int, budget: int) -> str:
    """The longest piece of `text` from `offset` whose JSON form fits `budget` bytes."""
    lo, hi = 0, min(len(text) - offset, budget)
    while lo < hi:  # JSON escaping can make a character take up to 6 bytes
        mid = (lo + hi + 1) // 2
        if json_size(text[offset : offset + mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return text[offset : offset + max(lo, 0)]


def page(text: str, offset: int, key: str, budget: int = PAGE_BYTES) -> dict[str, Any]:
    """One page of `text` from `offset` under `key`, with where the next page starts."""
    chunk = fit(text, offset, budget)
    nxt = offset + len(chunk)
    more = nxt < len(text)
    return {key: chunk, "offset": offset, "total_chars": len(text),
            "next_offset": nxt if more else None, "truncated": more}  # fmt: skip


def tree(repo: Repo, path: str, offset: int, limit: int) -> dict[str, Any]:
    files = served_files(repo, path)
    page = files[offset : offset + limit]
    budget, shown = PAGE_BYTES, []
    for f in page:
        budget -= json_size(f) + 8
        if budget < 0:
            break
        shown.append(f)
    nxt = offset + len(shown)
    return {"files": shown, "total": len(files), "offset": offset,
            "next_offset": nxt if nxt < len(files) else None,
            "truncated": nxt < len(files)}  # fmt: skip


def read_file(repo: Repo, path: str, offset: int, loaded: Any) -> dict[str, Any]:
    real, rel = resolve_inside(repo, path)
    if (repo.top / rel).is_symlink() and not real.is_relative_to(os.path.realpath(repo.top)):
        raise UsageError("path resolves outside the repository")
    if not real.is_file():
        raise UsageError("not a file")
    if real.stat().st_size > MAX_FILE_BYTES:
        raise UsageError(f"file is larger than {MAX_FILE_BYTES} bytes")
    data = real.read_bytes()
    if b"\0" in data[:8192]:
        raise UsageError("binary file")
    text = data.decode("utf-8", "replace")
    text, redacted = redact_text(repo, rel, text, loaded)
    return {"path": rel, **page(text, offset, "text"), "redacted_findings": redacted}


def _regex_worker(pattern: str, files: list[str], top: str, limit: int) -> list[list[Any]]:
    rx = re.compile(pattern)
    hits: list[list[Any]] = []
    for f in files:
        try:
            with open(os.path.join(top, f), "rb") as fh:
                data = fh.read(MAX_FILE_BYTES)
        except OSError:
            continue
        if b"\0" in data[:8192]:
            continue
        for n, line in enumerate(data.decode("utf-8", "replace").split("\n"), 1):
            if rx.search(line):
                hits.append([f, n, line[:200]])
                if len(hits) >= limit:
                    return hits
    return hits


def search(repo: Repo, query: str, regex: bool, path: str, limit: int,
           loaded: Any) -> dict[str, Any]:  # fmt: skip
    if not query or len(query) > 200:
        raise UsageError("query must be 1 to 200 characters")
    names = served_files(repo, path)
    top = os.path.realpath(repo.top)
    if regex:
        try:
            re.compile(query)
        except re.error as exc:
            raise UsageError(f"bad regex: {exc}") from None
        try:
            proc = subprocess.run(
                [sys.executable, "-c", "import json,sys;from gatekeeper.repo_gateway import "
                 "_regex_worker as w;a=json.load(sys.stdin);print(json.dumps(w(*a)))"],
                input=json.dumps([query, names, top, limit]),
                capture_output=True, text=True, timeout=REGEX_TIMEOUT_S, check=True,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            raise UsageError(f"regex search took over {REGEX_TIMEOUT_S} s; use a literal "
                             "search or a simpler pattern") from None  # fmt: skip
        hits = json.loads(proc.stdout)
    else:
        hits = []
        q = query.encode()
        for f in names:
            try:
                data = (Path(top) / f).read_bytes()[:MAX_FILE_BYTES]
            except OSError:
                continue
            if q not in data or b"\0" in data[:8192]:
                continue
            for n, raw_line in enumerate(data.split(b"\n"), 1):
                if q in raw_line:
                    hits.append([f, n, raw_line.decode("utf-8", "replace")[:200]])
                    if len(hits) >= limit:
                        break
            if len(hits) >= limit:
                break
    text = "\n".join(h[2] for h in hits)
    redacted_text, redacted = redact_text(repo, "<search>", text, loaded) if hits else ("", 0)
    lines = redacted_text.split("\n") if hits else []
    results: list[dict[str, Any]] = []
    budget = PAGE_BYTES
    for h, shown in zip(hits, lines, strict=False):
        budget -= json_size({"path": h[0], "line": h[1], "text": shown}) + 16
        if budget < 0:
            break
        results.append({"path": h[0], "line": h[1], "text": shown})
    return {"results": results, "truncated": len(results) < len(hits) or len(hits) >= limit,
            "redacted_findings": redacted}  # fmt: skip


def diff(repo: Repo, base: str | None, path: str, offset: int, loaded: Any) -> dict[str, Any]:
    """The worktree diff (against `base` if given) of served files only, redacted, paged."""
    args = ["diff", "--no-ext-diff", "--no-textconv", "--no-color"]
    if base:
        args.append(resolve_commit(repo.top, base))
    _, rel = resolve_inside(repo, path)
    names = git(repo.top, *args, "--name-only", "-z", "--", rel or ".")
    served = [n for raw in names.split(b"\0") if raw
              if not _skipped(n := raw.decode("utf-8", "surrogateescape"))]  # fmt: skip
    text = ""
    if served:
        text = git(repo.top, *args, "--", *served).decode("utf-8", "replace")
    text, redacted = redact_text(repo, "<diff>", text, loaded)
    return {**page(text, offset, "diff"), "redacted_findings": redacted, "files": len(served)}
