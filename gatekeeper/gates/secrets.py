"""`oms scan`: both scanners over paths, a commit range, or standard input."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from gatekeeper.errors import UsageError
from gatekeeper.repo.change import read_change, scan_set
from gatekeeper.repo.git import open_repo
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import resolve_commit
from gatekeeper.scan import Finding, ScanItem
from gatekeeper.scan.decode import text_views
from gatekeeper.scan.policy import scan_with_policy
from gatekeeper.scan.sarif import to_sarif
from policy import LoadedPolicy, default_policy

MAX_FILE_BYTES = 16 << 20


def _policy(repo_dir: Path) -> LoadedPolicy:
    try:
        repo = open_repo(repo_dir)
        return read_policy_at(repo.top, resolve_commit(repo.top, "HEAD"))
    except UsageError:
        return default_policy()


def _items_from_paths(paths: list[Path]) -> list[ScanItem]:
    items = []
    for root in paths:
        if not root.exists() and not root.is_symlink():
            raise UsageError(f"no such file: {root}")
        for f in [root] if not root.is_dir() else sorted(_walk(root)):
            if f.is_symlink() or not f.is_file():
                continue
            if f.stat().st_size > MAX_FILE_BYTES:
                raise UsageError(f"{f} is larger than {MAX_FILE_BYTES} bytes")
            for n, text in enumerate(text_views(f.read_bytes())):
                items.append(ScanItem.whole(str(f) + (" (as bytes)" if n else ""), text))
    return items


def _walk(root: Path) -> Iterator[Path]:
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != ".git"]
        for name in files:
            yield Path(d) / name


def scan(
    repo_dir: Path,
    paths: list[Path],
    diff: str | None,
    stdin_text: str | None,
    sarif: Path | None,
) -> tuple[dict[str, Any], int]:
    loaded = _policy(repo_dir)
    items: list[ScanItem] = []
    keep = None
    if diff:
        if ".." not in diff:
            raise UsageError("--diff takes BASE..HEAD")
        a, b = diff.split("..", 1)
        repo = open_repo(repo_dir)
        base, head = resolve_commit(repo.top, a), resolve_commit(repo.top, b)
        scope = scan_set(repo.top, read_change(repo.top, base, head))
        items += scope.items
        keep = scope.new_findings
    items += _items_from_paths(paths)
    if stdin_text is not None:
        items.append(ScanItem.whole("<stdin>", stdin_text))
    if not items and not (diff or paths or stdin_text is not None):
        raise UsageError("nothing to scan: give PATH…, --diff BASE..HEAD or --stdin")
    findings, infos = scan_with_policy(items, loaded)
    if keep is not None:  # of a modified file, only what touches a line the range adds
        findings = keep(findings)
    allowed = set(loaded.policy.scanners.allow_fingerprints)
    marked: list[Finding] = [replace(f, allowed=f.fingerprint in allowed) for f in findings]
    if sarif is not None:
        try:
            sarif.write_text(json.dumps(to_sarif(marked, infos), indent=2))
        except OSError as exc:
            raise UsageError(f"cannot write {sarif}: {exc.strerror}") from None
    blocking = [f for f in marked if not f.allowed]
    data = {
        "findings": [f.to_json() for f in marked],
        "blocking": len(blocking),
        "scanners": [{"name": i.name, "version": i.version, "digest": i.digest} for i in infos],
        "policy_digest": loaded.digest,
        "scanned_items": len(items),
    }
    return data, (3 if blocking else 0)
