"""`oms scan`: both scanners over the repository's files, paths, the staged change, a commit
range, history, or standard input."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from gatekeeper.errors import EXIT_BLOCKED, EXIT_OK, UsageError
from gatekeeper.gates import sources
from gatekeeper.gates.sources import MAX_FILE_BYTES, Batch, Skipped, file_items, is_binary
from gatekeeper.outfile import write_output
from gatekeeper.repo.change import read_change, scan_set
from gatekeeper.repo.git import Repo, open_repo
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import resolve_commit
from gatekeeper.scan import Finding, ScanItem, ScannerInfo, fingerprint
from gatekeeper.scan.policy import ScanReport, allow_by_path, scan_with_policy
from gatekeeper.scan.sarif import to_sarif
from policy import LoadedPolicy, default_policy

__all__ = ["MAX_FILE_BYTES", "SecretsScan", "scan"]

_QUOTED_FINGERPRINT = re.compile(r'"([0-9a-f]{64})"')


@dataclass(frozen=True)
class SecretsScan:
    """What `oms scan` found: every finding (allowed ones marked), the scanners, the policy,
    the files skipped and, for `--history`, each finding's commit (same order as findings)."""

    findings: tuple[Finding, ...]
    scanners: tuple[ScannerInfo, ...]
    policy_digest: str
    scanned_items: int
    skipped: tuple[Skipped, ...] = ()
    commits: tuple[str | None, ...] | None = None

    @property
    def blocking(self) -> int:
        """How many findings the policy does not allow."""
        return sum(1 for f in self.findings if not f.allowed)

    @property
    def exit_code(self) -> int:
        """3 (blocked) on any finding the policy does not allow, else 0; skips never count."""
        return EXIT_BLOCKED if self.blocking else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        """The `oms scan --json` data, key for key."""
        found = [f.to_json() for f in self.findings]
        if self.commits is not None:
            found = [{**f, "commit": c} for f, c in zip(found, self.commits, strict=True)]
        return {
            "findings": found,
            "blocking": self.blocking,
            "scanners": [i.to_json() for i in self.scanners],
            "policy_digest": self.policy_digest,
            "scanned_items": self.scanned_items,
            "skipped": [s.to_json() for s in self.skipped],
        }


def _policy(repo_dir: Path) -> LoadedPolicy:
    try:
        repo = open_repo(repo_dir)
        return read_policy_at(repo.top, resolve_commit(repo.top, "HEAD"))
    except UsageError:
        return default_policy()


def _repo(repo_dir: Path) -> Repo:
    try:
        return open_repo(repo_dir)
    except UsageError:
        raise UsageError(f"{repo_dir} is not inside a git repository: give PATH…, --stdin, "
                         "or --repo DIR of a repository") from None  # fmt: skip


def _path_batches(paths: list[Path], own_outputs: frozenset[Path] = frozenset()) -> Iterator[Batch]:
    """PATHs (a directory: every file below it but `.git`), skipping as the repository scan
    does, and `own_outputs` (the files this command writes) as `oms_output`."""
    items: list[ScanItem] = []
    skipped: list[Skipped] = []
    size = 0
    for root in paths:
        if not root.exists() and not root.is_symlink():
            raise UsageError(f"no such file: {root}")
        for f in [root] if not root.is_dir() else sorted(_walk(root)):
            if own_outputs and _resolved(f) in own_outputs:
                skipped.append(Skipped(str(f), "oms_output", None))
                continue
            data = _read_path(f, skipped)
            if data is None:
                continue
            if size and size + len(data) > sources.BATCH_BYTES:
                yield Batch(tuple(items), tuple(skipped))
                items, skipped, size = [], [], 0
            items += file_items(str(f), data)
            size += len(data)
    yield Batch(tuple(items), tuple(skipped))


def _read_path(f: Path, skipped: list[Skipped]) -> bytes | None:
    try:
        if f.is_symlink():
            skipped.append(Skipped(str(f), "symlink", None))
            return None
        st = f.stat()
        if not f.is_file():
            skipped.append(Skipped(str(f), "unreadable", None))
            return None
        if st.st_size > MAX_FILE_BYTES:
            skipped.append(Skipped(str(f), "too_large", st.st_size))
            return None
        data = f.read_bytes()
    except OSError:
        skipped.append(Skipped(str(f), "unreadable", None))
        return None
    if is_binary(data):
        skipped.append(Skipped(str(f), "binary", len(data)))
        return None
    return data


def _walk(root: Path) -> Iterator[Path]:
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x != ".git"]
        for name in files:
            yield Path(d) / name


def _diff_batch(repo_dir: Path, diff: str) -> Batch:
    if ".." not in diff:
        raise UsageError("--diff takes BASE..HEAD")
    a, b = diff.split("..", 1)
    repo = open_repo(repo_dir)
    base, head = resolve_commit(repo.top, a), resolve_commit(repo.top, b)
    scope = scan_set(repo.top, read_change(repo.top, base, head))
    return Batch(scope.items, scope=scope)


def _resolved(path: Path) -> Path:
    """`path` absolute, its directory resolved (the file itself may not exist yet)."""
    return path.absolute().parent.resolve() / path.name


def _batches(repo_dir: Path, paths: list[Path], diff: str | None, stdin_text: str | None,
             staged: bool, history: str | None,
             own_outputs: frozenset[Path] = frozenset()) -> list[Iterable[Batch]]:  # fmt: skip
    """Each source asked for, in order; none: the repository's files. `own_outputs`: the
    files this command writes, never read as the user's (worktree and PATHs only)."""
    if sum((diff is not None, staged, history is not None)) > 1:
        raise UsageError("give one of --diff, --staged and --history")
    found: list[Iterable[Batch]] = []
    if diff is not None:
        found.append([_diff_batch(repo_dir, diff)])
    if staged:
        found.append(sources.staged(_repo(repo_dir)))
    if history is not None:
        found.append(sources.history(_repo(repo_dir), history))
    if paths:
        found.append(_path_batches(paths, own_outputs))
    if stdin_text is not None:
        found.append([Batch((ScanItem.whole("<stdin>", stdin_text),))])
    return found or [sources.repo_files(_repo(repo_dir), own_outputs)]


def scan(
    repo_dir: Path,
    paths: list[Path],
    diff: str | None,
    stdin_text: str | None,
    sarif: Path | None,
    *,
    staged: bool = False,
    history: str | None = None,
    writes: Sequence[Path] = (),
) -> SecretsScan:
    """Both scanners over what was asked for (by default the repository's tracked and
    untracked-but-not-ignored files), under the policy at HEAD, one call per batch. The
    files this call writes (`sarif`, and `writes`: the command's `--output` files) are not
    read as the user's files; a later call reads them as any other."""
    loaded = _policy(repo_dir)
    located: list[tuple[Finding, str | None]] = []
    skipped: list[Skipped] = []
    infos: tuple[ScannerInfo, ...] = ()
    count = 0
    own = frozenset(_resolved(p) for p in [*([sarif] if sarif is not None else []), *writes])
    asked = _batches(repo_dir, paths, diff, stdin_text, staged, history, own)
    for batch in (b for source in asked for b in source):
        skipped += batch.skipped
        if batch.items or not infos:  # one call at least: a missing scanner is never "clean"
            report = scan_with_policy(batch.items, loaded)
            located += batch.located(_not_fingerprints(batch, report.findings))
            infos, count = report.scanners, count + len(batch.items)
    findings = allow_by_path((f for f, _ in located), loaded.policy.scanners)
    if sarif is not None:
        _write_sarif(sarif, ScanReport(findings, infos))
    commits = tuple(c for _, c in located) if history is not None else None
    return SecretsScan(findings, infos, loaded.digest, count, tuple(skipped), commits)


def _not_fingerprints(batch: Batch, findings: Iterable[Finding]) -> list[Finding]:
    """All but the findings whose value is a fingerprint quoted in an `oms.toml`: an
    `allow_fingerprints` entry is a hash of a secret, not one, and the line `oms scan`
    prints to paste there must not block the commit that pastes it."""
    lines = {
        item.path: dict(item.lines)
        for item in batch.items
        if PurePosixPath(batch.origin.get(item.path, (item.path, ""))[0]).name == "oms.toml"
    }
    if not lines:
        return list(findings)

    def is_fingerprint(f: Finding) -> bool:
        text = lines.get(f.file, {}).get(f.line, "")
        return any(fingerprint(h) == f.fingerprint for h in _QUOTED_FINGERPRINT.findall(text))

    return [f for f in findings if not is_fingerprint(f)]


def _write_sarif(path: Path, report: ScanReport) -> None:
    # Atomically, and never onto a symlink, a device or anything but a regular file.
    write_output(path, json.dumps(to_sarif(report.findings, report.scanners), indent=2))
