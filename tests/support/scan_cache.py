"""The scan-result cache as tests see it: its raw rows, a spy on the scanner runs it saves,
and the connections it keeps per process closed between tests."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import gatekeeper.scan.cache as cache_module
import gatekeeper.scan.policy as policy_module
from gatekeeper.scan import Finding, ScanItem
from gatekeeper.scan.cache import Identity, scanner_config_digest


def close_caches() -> None:
    """Close every cache connection this process holds, as a new process would start."""
    for c in list(cache_module._OPEN.values()):
        c.close()


@contextmanager
def cache_db(root: Path) -> Iterator[sqlite3.Connection]:
    """The cache database under the state root `root`, as anyone who can write it sees it."""
    conn = sqlite3.connect(root / "cache" / "scan.db", isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


def cache_keys(root: Path) -> set[str]:
    with cache_db(root) as conn:
        return {k for (k,) in conn.execute("SELECT key FROM entries")}


def copy_cache(src: Path, dst: Path) -> None:
    """The cache of state root `src` as the cache of a new state root `dst` (modes kept)."""
    close_caches()  # checkpointed: everything is in scan.db
    dst.mkdir(mode=0o700, parents=True)
    shutil.copytree(src / "cache", dst / "cache")


def entry_key(item: ScanItem, pinned_sha256: str) -> str:
    """The cache key `scan_with_policy` gives `item` under this pin, this oms, this
    detect-secrets."""
    ident = Identity(
        pinned_sha256, scanner_config_digest(), policy_module._detect_secrets_version()
    )
    return ident.key(item.key)


def shape(findings: Sequence[Finding]) -> list[tuple[Any, ...]]:
    """Everything a finding says, `allowed` and `end_line` included (dataclass equality
    leaves those two out)."""
    return [(f.scanner, f.rule, f.file, f.line, f.fingerprint, f.preview, f.end_line, f.allowed)
            for f in findings]  # fmt: skip


def json_shape(findings: Sequence[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """As `shape`, for findings in a command's JSON."""
    keys = ("scanner", "rule", "file", "line", "fingerprint", "preview", "end_line", "allowed")
    return [tuple(f[k] for k in keys) for f in findings]


class ScannerRuns:
    """A spy on the scanner runs `scan_with_policy` starts: each run's item paths, in order
    (the one run for the items the cache lacks, or the run of all when there is no cache)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.runs: list[list[str]] = []
        for name in ("scan_both_by_item", "scan_both"):
            monkeypatch.setattr(policy_module, name, self._spy(getattr(policy_module, name)))

    def _spy(self, real: Any) -> Any:
        def spy(items: Sequence[ScanItem], pinned: str, timeout_s: int) -> Any:
            self.runs.append([i.path for i in items])
            return real(items, pinned, timeout_s)

        return spy

    def clear(self) -> None:
        self.runs.clear()
