"""`oms scan`: both scanners over paths, a commit range, or standard input."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gatekeeper.errors import EXIT_BLOCKED, EXIT_OK, UsageError
from gatekeeper.repo.change import read_change, scan_set
from gatekeeper.repo.git import open_repo
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import resolve_commit
from gatekeeper.scan import Finding, ScanItem, ScannerInfo
from gatekeeper.scan.decode import text_views
from gatekeeper.scan.policy import ScanReport, scan_with_policy
from gatekeeper.scan.sarif import to_sarif
from policy import LoadedPolicy, default_policy

MAX_FILE_BYTES = 16 << 20


@dataclass(frozen=True)
class SecretsScan:
    """What `oms scan` found: every finding (allowed ones marked), the scanners, the policy."""

    findings: tuple[Finding, ...]
    scanners: tuple[ScannerInfo, ...]
    policy_digest: str
    scanned_items: int

    @property
    def blocking(self) -> int:
        """How many findings the policy does not allow."""
        return sum(1 for f in self.findings if not f.allowed)

    @property
    def exit_code(self) -> int:
        """3 (blocked) on any finding the policy does not allow, else 0."""
        return EXIT_BLOCKED if self.blocking else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        """The `oms scan --json` data, key for key."""
        return {
            "findings": [f.to_json() for f in self.findings],
            "blocking": self.blocking,
            "scanners": [i.to_json() for i in self.scanners],
            "policy_digest": self.policy_digest,
            "scanned_items": self.scanned_items,
        }


Keep = Callable[[Iterable[Finding]], list[Finding]]


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
) -> SecretsScan:
    """Both scanners over PATHs, what BASE..HEAD adds and/or stdin, under the policy at HEAD."""
    loaded = _policy(repo_dir)
    items: list[ScanItem] = []
    diff_items, keep = _diff_items(repo_dir, diff) if diff else ([], None)
    items += diff_items
    items += _items_from_paths(paths)
    if stdin_text is not None:
        items.append(ScanItem.whole("<stdin>", stdin_text))
    if not items and not (diff or paths or stdin_text is not None):
        raise UsageError("nothing to scan: give PATH…, --diff BASE..HEAD or --stdin")
    report = scan_with_policy(items, loaded)
    if keep is not None:  # of a modified file, only what touches a line the range adds
        report = report.only(keep)
    if sarif is not None:
        _write_sarif(sarif, report)
    return SecretsScan(report.findings, report.scanners, loaded.digest, len(items))


def _diff_items(repo_dir: Path, diff: str) -> tuple[list[ScanItem], Keep]:
    if ".." not in diff:
        raise UsageError("--diff takes BASE..HEAD")
    a, b = diff.split("..", 1)
    repo = open_repo(repo_dir)
    base, head = resolve_commit(repo.top, a), resolve_commit(repo.top, b)
    scope = scan_set(repo.top, read_change(repo.top, base, head))
    return list(scope.items), scope.new_findings


def _write_sarif(path: Path, report: ScanReport) -> None:
    try:
        path.write_text(json.dumps(to_sarif(report.findings, report.scanners), indent=2))
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror}") from None
