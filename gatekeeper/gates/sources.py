"""Where `oms scan` reads: the repository's files, what `git commit` would record, commits.

Each source yields batches (a bounded number of bytes each, scanned in one call of
both scanners) and the files it skipped, with the reason: over the size limit,
binary (a NUL in the first 8 KiB that is not UTF-16/32 text, which is decoded and
scanned), a symlink (never followed, the file or a directory on its path), or
unreadable (a FIFO, a device, a read error). A skip is reported, never a failure and
never silent. git only lists names and reads objects by id through oms' own
repository (`gatekeeper.repo.git`); worktree bytes are read through `fsread`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gatekeeper.errors import UsageError
from gatekeeper.repo.change import PATHS_LABEL, Change, ScanSet, Touched, read_commits
from gatekeeper.repo.fsread import FileRefused, LinkRefused, Missing, NotRegular, RepoFiles
from gatekeeper.repo.fsread import TooLarge as FileTooLarge
from gatekeeper.repo.git import Repo, git, read_objects, worktree_git
from gatekeeper.repo.refs import read_ref, resolve_commit
from gatekeeper.repo.worktree import index_entries, tree_entries
from gatekeeper.scan import Finding, ScanItem
from gatekeeper.scan.decode import guess_encoding, text_views

MAX_FILE_BYTES = 16 << 20  # one file or blob; larger ones are skipped as too_large
BATCH_BYTES = 32 << 20  # bytes read for one call of the scanners
BINARY_SNIFF = 8192
_CONTENT_MODES = ("100644", "100755", "120000")
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"  # git's empty tree: a root's base


@dataclass(frozen=True)
class Skipped:
    """A file not scanned: `reason` is too_large, binary, symlink, unreadable, or oms_output
    (the file this command writes, e.g. its `--sarif` report)."""

    path: str
    reason: str
    bytes: int | None

    def to_json(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Batch:
    """Items for one scanner call; `keep` selects the findings on added lines (None: all);
    `origin` maps an item's label to (path, commit) where the label is not the path."""

    items: tuple[ScanItem, ...]
    skipped: tuple[Skipped, ...] = ()
    scope: ScanSet | None = None
    origin: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    def located(self, findings: Iterable[Finding]) -> list[tuple[Finding, str | None]]:
        """The findings this batch keeps, each at its path, with its commit (None: no commit)."""
        kept = self.scope.new_findings(findings) if self.scope is not None else list(findings)
        out: list[tuple[Finding, str | None]] = []
        for f in kept:
            path, commit = self.origin.get(f.file, (f.file, ""))
            out.append((f if path == f.file else _at(f, path), commit or None))
        return out


def _at(f: Finding, path: str) -> Finding:
    return Finding(f.scanner, f.rule, path, f.line, f.fingerprint, f.preview, f.allowed,
                   f.end_line)  # fmt: skip


def is_binary(data: bytes) -> bool:
    """A NUL near the start that no UTF-16/32 guess explains (`scan/decode.py` decodes those)."""
    return b"\0" in data[:BINARY_SNIFF] and guess_encoding(data) is None


def file_items(label: str, data: bytes) -> list[ScanItem]:
    """The scan items of one file's bytes: each text view, the bytes as `(as bytes)`."""
    return [ScanItem.whole(label + (" (as bytes)" if n else ""), view)
            for n, view in enumerate(text_views(data))]  # fmt: skip


def label_of(raw: bytes) -> str:
    """A path as a report label: valid Unicode, a name that is not UTF-8 with \\xNN escapes."""
    return raw.decode("utf-8", "backslashreplace")


# -- the repository's files ----------------------------------------------------------------


def repo_files(repo: Repo, own_outputs: Iterable[Path] = ()) -> Iterator[Batch]:
    """Tracked files and untracked files that are not ignored, as the worktree holds them;
    but `own_outputs`, the files this very command writes (absolute, resolved paths), are
    skipped as `oms_output`: they are about to be replaced. A later command scans them."""
    out = worktree_git(repo, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    names = list(dict.fromkeys(p for p in out.split(b"\0") if p))  # unmerged: one per stage
    own = _relative_bytes(own_outputs, repo.top)
    items: list[ScanItem] = []
    skipped: list[Skipped] = []
    size = 0
    with RepoFiles(repo.top) as files:
        for raw in names:
            label = label_of(raw)
            if raw in own:
                skipped.append(Skipped(label, "oms_output", None))
                continue
            data = _read_worktree(files, raw.decode("utf-8", "surrogateescape"), label, skipped)
            if data is None:
                continue
            if size and size + len(data) > BATCH_BYTES:
                yield Batch(tuple(items), tuple(skipped))
                items, skipped, size = [], [], 0
            items += file_items(label, data)
            size += len(data)
    yield Batch(tuple(items), tuple(skipped))


def _relative_bytes(paths: Iterable[Path], top: Path) -> set[bytes]:
    """Those of `paths` below `top`, as git names them."""
    top = top.resolve()
    return {os.fsencode(p.relative_to(top).as_posix()) for p in paths if p.is_relative_to(top)}


def _read_worktree(files: RepoFiles, rel: str, label: str, skipped: list[Skipped]) -> bytes | None:
    """The bytes to scan at `rel`, or None with the skip recorded (nothing there: no skip)."""
    try:
        data = files.read(rel, MAX_FILE_BYTES)
    except FileTooLarge as exc:
        skipped.append(Skipped(label, "too_large", exc.size))
        return None
    except LinkRefused:
        skipped.append(Skipped(label, "symlink", None))
        return None
    except (NotRegular, Missing, FileRefused, UsageError, OSError) as exc:
        _unreadable(files, rel, label, exc, skipped)
        return None
    if is_binary(data):
        skipped.append(Skipped(label, "binary", len(data)))
        return None
    return data


def _unreadable(files: RepoFiles, rel: str, label: str, exc: Exception,
                skipped: list[Skipped]) -> None:  # fmt: skip
    # A deleted file has nothing to scan, a submodule is a directory git lists; anything
    # else that is there but cannot be read is reported.
    try:
        st = files.lstat(rel)
    except (FileRefused, UsageError, OSError):
        if not isinstance(exc, Missing):
            skipped.append(Skipped(label, "unreadable", None))
        return
    if not stat.S_ISDIR(st.st_mode):
        skipped.append(Skipped(label, "unreadable", st.st_size))


# -- what `git commit` would record, and commits -------------------------------------------


def staged(repo: Repo) -> Iterator[Batch]:
    """The index's blobs at paths where they differ from HEAD's (all of them before the
    first commit), their added lines only."""
    head = read_ref(repo, "HEAD")
    tree = tree_entries(repo, resolve_commit(repo, head)) if head else {}
    touched = []
    for e in index_entries(repo):
        t = tree.get(e.path)
        if e.stage or (t is not None and (t.mode, t.oid) == (e.mode, e.oid)):
            continue  # unmerged (git commit refuses those) or as HEAD has it
        olds = ((t.mode, t.oid),) if t is not None else ()
        path = label_of(e.path.encode("utf-8", "surrogateescape"))
        touched.append(Touched("", path, e.mode, e.oid, olds))
    return blob_batches(repo, Change("", "", touched=tuple(touched)), messages=False)


def history(repo: Repo, spec: str) -> Iterator[Batch]:
    """Each commit of `spec` (REV: all its history, root commits included; A..B: the commits
    B has and A has not), every line it adds, its message and headers."""
    return blob_batches(repo, read_commits(repo.top, _history_revs(repo, spec)), messages=True)


def _history_revs(repo: Repo, spec: str) -> list[str]:
    """rev-list arguments made of full SHAs only (a revision is data, never an option)."""
    if spec == "HEAD" and read_ref(repo, "HEAD") is None:
        raise UsageError("the repository has no commit yet: there is no history to scan")
    if ".." not in spec:
        return [resolve_commit(repo, spec)]
    a, b = spec.split("..", 1)
    head = resolve_commit(repo, b or "HEAD")
    if a == EMPTY_TREE:  # the base of a root commit: all of B's history
        return [head]
    return [f"{resolve_commit(repo, a or 'HEAD')}..{head}"]


# -- blobs of commits or of the index ------------------------------------------------------


def blob_batches(repo: Repo, change: Change, messages: bool) -> Iterator[Batch]:
    """What `change.touched` adds (lines no replaced blob holds), in batches by commit;
    with `messages`, each commit's message and other headers too."""
    by_commit: dict[str, list[Touched]] = {c: [] for c in change.commits}
    for t in change.touched:
        by_commit.setdefault(t.commit, []).append(t)
    ids = {t.blob for t in change.touched} | {o for t in change.touched for _, o in t.olds}
    sizes = _sizes(repo, [*ids, *(change.commits if messages else ())])
    group: list[str] = []
    size = 0
    for commit, touched in by_commit.items():
        more = sum(sizes.get(t.blob, 0) for t in touched) + sizes.get(commit, 0)
        if group and size + more > BATCH_BYTES:
            yield _blob_batch(repo, group, by_commit, sizes, messages)
            group, size = [], 0
        group.append(commit)
        size += more
    if group:
        yield _blob_batch(repo, group, by_commit, sizes, messages)


def _sizes(repo: Repo, ids: Iterable[str]) -> dict[str, int]:
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    out = git(repo, "cat-file", "--batch-check", input="".join(f"{i}\n" for i in wanted).encode())
    sizes = {}
    for line in out.decode("ascii", "replace").splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2].isdigit():
            sizes[fields[0]] = int(fields[2])
    return sizes


@dataclass
class _Building:
    items: list[ScanItem] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    added: dict[str, frozenset[int]] = field(default_factory=dict)
    origin: dict[str, tuple[str, str]] = field(default_factory=dict)

    def label(self, path: str, commit: str) -> str:
        """A label no other item of the batch has; the path itself where it can be."""
        label, n = path, 0
        while label in self.origin or label == PATHS_LABEL:
            n += 1
            label = f"{path} @{commit[:12]}" + (f" #{n}" if n > 1 else "")
        self.origin[label] = (path, commit)
        return label


def _blob_batch(repo: Repo, commits: list[str], by_commit: Mapping[str, list[Touched]],
                sizes: Mapping[str, int], messages: bool) -> Batch:  # fmt: skip
    b = _Building()
    touched = [t for c in commits for t in by_commit[c] if t.mode in _CONTENT_MODES]
    small = [t for t in touched if sizes.get(t.blob, 0) <= MAX_FILE_BYTES]
    b.skipped += [Skipped(t.path, "too_large", sizes.get(t.blob)) for t in touched
                  if t not in small]  # fmt: skip
    olds = {o for t in small for m, o in t.olds if m in _CONTENT_MODES}
    olds = {o for o in olds if sizes.get(o, MAX_FILE_BYTES + 1) <= MAX_FILE_BYTES}
    wanted = [t.blob for t in small] + sorted(olds) + (commits if messages else [])
    data = {k: v for k, (_, v) in read_objects(repo, [w for w in wanted if w]).items()}
    for t in small:
        _add_blob(b, t, data)
    names = dict.fromkeys(t.path for c in commits for t in by_commit[c])
    if names:
        b.items.append(ScanItem.whole(PATHS_LABEL, "\n".join(names)))
    for sha in commits if messages else ():
        _add_commit(b, sha, data[sha])
    return Batch(tuple(b.items), tuple(b.skipped), ScanSet(tuple(b.items), b.added), b.origin)


def _add_blob(b: _Building, t: Touched, data: Mapping[str, bytes]) -> None:
    new = data[t.blob]
    if t.mode != "120000" and is_binary(new):
        b.skipped.append(Skipped(t.path, "binary", len(new)))
        return
    olds = [data.get(o) for m, o in t.olds if m in _CONTENT_MODES]
    old_lines = _lines_of(olds) if olds else None
    label = b.label(t.path, t.commit)
    for item in file_items(label, new):
        if item.path != label:
            b.origin[item.path] = (item.path.replace(label, t.path, 1), t.commit)
        b.items.append(item)
        if old_lines is not None:  # else added whole: every line counts
            b.added[item.path] = frozenset(i for i, s in item.lines if s not in old_lines)


def _lines_of(blobs: list[bytes | None]) -> set[str] | None:
    """Every line the replaced blobs hold; None when one was not read (over the limit), so
    that its successor counts as added whole (more findings, never fewer)."""
    lines: set[str] = set()
    for blob in blobs:
        if blob is None:
            return None
        for view in text_views(blob):
            lines.update(view.split("\n"))
    return lines


def _add_commit(b: _Building, sha: str, raw: bytes) -> None:
    head, _, message = raw.partition(b"\n\n")
    kept = b"\n".join(x for x in head.split(b"\n") if not x.startswith((b"tree ", b"parent ")))
    for label, part in ((f"commit:{sha}", message), (f"commit:{sha} (headers)", kept)):
        for item in file_items(label, part):
            b.origin[item.path] = (item.path, sha)
            b.items.append(item)
