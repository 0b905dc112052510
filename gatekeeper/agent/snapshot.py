"""A hostile workspace turned into one commit, with oms' git and oms' config only.

After the agent ended, its `.git` is data: HEAD and its branch are read as files (no
symlink followed, odd shapes refused); its config, hooks, index, attributes and info/
are never read. The files are compared with HEAD's tree by their bytes (hashed as blobs,
no clean filter) and every change, tracked or untracked-and-not-ignored (the `.gitignore`
files read by `ls-files` as data, like `git add -A`), becomes one commit written by
`git fast-import` in a temporary repository of oms' own, whose alternates are the user's
objects and then the workspace's. Nothing git writes there is trusted yet: the caller
checks it all with `index-pack --strict` before it reaches the user's repository.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gatekeeper.errors import Blocked
from gatekeeper.repo.fsread import FileRefused, Missing, RepoFiles, TooLarge
from gatekeeper.repo.git import SHA_RE, GitError, Repo, git_env, run_argv
from gatekeeper.repo.refs import valid_refname
from gatekeeper.repo.scratch import MAX_ENTRIES, check_limits
from gatekeeper.repo.worktree import GITLINK_MODE, LINK_MODE, blob_id

AGENT_IDENTITY = ("oms agent", "agent@oms.invalid")
MAX_FILE_BYTES = 256 << 20  # one workspace file oms commits
MAX_REFS_BYTES = 64 << 20  # the workspace's packed-refs, read to find HEAD's branch

_TEMP_CONFIG = """\
[core]
\trepositoryformatversion = 0
\tbare = true
\tfsmonitor = false
\thooksPath = /dev/null
\tattributesFile = {empty}
\texcludesFile = {empty}
\tcommitGraph = false
\tmultiPackIndex = false
\tuntrackedCache = false
\tsplitIndex = false
\tautocrlf = false
\tsafecrlf = false
\tsymlinks = true
\tfilemode = true
\tquotePath = false
\tlogAllRefUpdates = false
\tbigFileThreshold = 4g
[pack]
\tuseBitmaps = false
\treadReverseIndex = false
[gpg]
\tprogram = /dev/null
[protocol]
\tallow = never
[gc]
\tauto = 0
[maintenance]
\tauto = false
"""


@dataclass(frozen=True)
class TempRepo:
    """oms' own bare repository for one collect: alternates are the user's objects (first,
    so a trusted copy wins) and the workspace's; config and index are oms'."""

    path: Path
    repo: Repo
    worktree: Path

    @classmethod
    @contextmanager
    def beside(cls, repo: Repo, workspace: Path) -> Iterator[TempRepo]:
        path = Path(tempfile.mkdtemp(prefix="oms-collect-", dir=workspace.parent))
        try:
            for sub in ("objects/info", "objects/pack", "refs/heads", "info"):
                os.makedirs(path / sub, 0o700)
            (path / "info" / "empty").write_bytes(b"")
            (path / "HEAD").write_bytes(b"ref: refs/heads/collect\n")
            (path / "config").write_text(_TEMP_CONFIG.format(empty=path / "info" / "empty"))
            stores = [repo.common_dir / "objects", workspace / ".git" / "objects"]
            alternates = b"".join(os.fsencode(s) + b"\n" for s in stores)
            (path / "objects" / "info" / "alternates").write_bytes(alternates)
            yield cls(path, repo, workspace)
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def _argv(self, args: tuple[str, ...], worktree: bool) -> list[str]:
        tree = ["--work-tree", str(self.worktree)] if worktree else []
        return ["git", "--git-dir", str(self.path), *tree, "--no-replace-objects",
                "--literal-pathspecs", *args]  # fmt: skip

    def _env(self) -> dict[str, str]:
        env = git_env(self.repo)
        env["GIT_INDEX_FILE"] = str(self.path / "index")
        return env

    def run(self, *args: str, worktree: bool = False) -> bytes:
        cwd = self.worktree if worktree else self.path
        return run_argv(self._argv(args, worktree), self._env(), cwd, None, True, args[0])

    def popen(self, *args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self._argv(args, False), env=self._env(), cwd=self.path,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)  # fmt: skip


# -- HEAD, read as data ------------------------------------------------------------------------


def _small(files: RepoFiles, rel: str, limit: int) -> bytes:
    """A file of the workspace's .git; Missing passes, anything else odd is Blocked."""
    try:
        return files.read(rel, limit)
    except Missing:
        raise
    except TooLarge:
        raise Blocked(f"the workspace's .git/{rel[:80]} is too large to be a ref") from None
    except FileRefused as exc:
        raise Blocked(f"the workspace's .git/{rel[:80]} is {exc.reason}; oms refuses it") from None


def _packed(files: RepoFiles) -> dict[str, str]:
    try:
        data = _small(files, "packed-refs", MAX_REFS_BYTES)
    except Missing:
        return {}
    refs: dict[str, str] = {}
    for line in data.split(b"\n"):
        if line and line[:1] not in (b"#", b"^"):
            sha, _, name = line.partition(b" ")
            refs[name.decode("utf-8", "surrogateescape")] = sha.decode("ascii", "replace")
    return refs


def workspace_head(dotgit: Path) -> str:
    """The commit the workspace HEAD names: a plain id, or a branch under refs/heads/ that
    holds one (loose or packed). Blocked for any other shape."""
    with RepoFiles(dotgit) as files:
        try:
            raw = _small(files, "HEAD", 4096)
        except Missing:
            raise Blocked("the workspace has no HEAD") from None
        text = raw.decode("ascii", "replace").removesuffix("\n")
        if SHA_RE.match(text):
            return text
        name = text.removeprefix("ref: ")
        if name == text or not name.startswith("refs/heads/") or not valid_refname(name):
            raise Blocked("the workspace HEAD is neither a commit nor a branch; oms refuses it")
        try:
            sha: str | None = _small(files, name, 4096).decode("ascii", "replace").strip()
        except Missing:
            sha = _packed(files).get(name)
        if sha is None:
            raise Blocked(f"the workspace HEAD names {name[:80]}, which does not exist")
        if not SHA_RE.match(sha):
            raise Blocked(f"the workspace's {name[:80]} does not hold a commit id")
        return sha


# -- the files, as bytes -----------------------------------------------------------------------


def _tree(t: TempRepo, head: str) -> dict[bytes, tuple[str, str]]:
    out = t.run("ls-tree", "-r", "-z", "--full-tree", head)
    entries = []
    for rec in out.split(b"\0"):
        if rec:
            meta, _, path = rec.partition(b"\t")
            mode, _kind, oid = meta.decode("ascii").split(" ")
            entries.append((mode, oid, path))
    check_limits(entries)
    return {path: (mode, oid) for mode, oid, path in entries}


def _rel(path: bytes) -> str:
    return path.decode("utf-8", "surrogateescape")


def _entry(files: RepoFiles, path: bytes, oid_len: int) -> tuple[str, str] | None:
    """(mode, blob id) of what is at `path` now; None when no file or symlink is there."""
    try:
        st = files.lstat(_rel(path))
        if stat.S_ISLNK(st.st_mode):
            return LINK_MODE, blob_id(files.readlink(_rel(path)), oid_len)
        if not stat.S_ISREG(st.st_mode):
            return None  # a directory, FIFO, socket or device: not content git commits
        mode = "100755" if st.st_mode & 0o100 else "100644"
        return mode, blob_id(files.read(_rel(path), MAX_FILE_BYTES), oid_len)
    except TooLarge as exc:
        raise Blocked(f"{exc.rel[:120]} in the workspace is larger than oms collects "
                      f"({MAX_FILE_BYTES} bytes)") from None  # fmt: skip
    except FileRefused:
        return None


def changes(t: TempRepo, head: str) -> list[tuple[bytes, str | None]]:
    """(path, new mode; None: deleted) of every path whose bytes or mode differ from HEAD's
    tree, untracked files not ignored included; deletions first."""
    tree = _tree(t, head)
    t.run("read-tree", head)  # the temporary index: what counts as tracked
    listed = t.run("ls-files", "-z", "--others", "--exclude-standard", worktree=True)
    # A directory entry ("sub/") is a nested repository: not content of this one.
    others = [p for p in listed.split(b"\0") if p and not p.endswith(b"/")]
    if len(others) > MAX_ENTRIES:
        raise Blocked(f"the workspace holds {len(others)} new files; oms collects at most "
                      f"{MAX_ENTRIES}")  # fmt: skip
    found: list[tuple[bytes, str | None]] = []
    with RepoFiles(t.worktree) as files:
        for path, (mode, oid) in tree.items():
            if mode == GITLINK_MODE:
                continue  # a submodule's commit stays as it was: oms runs no git inside it
            now = _entry(files, path, len(head))
            if now != (mode, oid):
                found.append((path, None if now is None else now[0]))
        for path in others:
            now = _entry(files, path, len(head))
            if now is not None:
                found.append((path, now[0]))
    return sorted(found, key=lambda c: c[1] is not None)


def quote_path(path: bytes) -> bytes:
    """A path as a C-style quoted string for fast-import (anything not plain ASCII in octal)."""
    out = bytearray(b'"')
    for b in path:
        if b in (0x22, 0x5C):
            out += b"\\" + bytes([b])
        elif 0x20 <= b < 0x7F:
            out.append(b)
        else:
            out += b"\\%03o" % b
    return bytes(out + b'"')


def _stream(w: IO[bytes], t: TempRepo, head: str, found: list[tuple[bytes, str | None]],
            message: bytes) -> None:  # fmt: skip
    name, email = AGENT_IDENTITY
    who = f"{name} <{email}> {int(time.time())} +0000"
    w.write(f"commit refs/heads/collect\nmark :1\nauthor {who}\ncommitter {who}\n".encode())
    w.write(b"data %d\n%s\nfrom %s\n" % (len(message), message, head.encode()))
    with RepoFiles(t.worktree) as files:
        for path, mode in found:
            if mode is None:
                w.write(b"D " + quote_path(path) + b"\n")
                continue
            try:
                rel = _rel(path)
                data = files.readlink(rel) if mode == LINK_MODE else files.read(rel, MAX_FILE_BYTES)
            except (FileRefused, OSError):
                raise Blocked("the workspace changed while oms collected it") from None
            w.write(b"M %s inline %s\ndata %d\n" % (mode.encode(), quote_path(path), len(data)))
            w.write(data + b"\n")
    w.write(b"\nget-mark :1\ndone\n")


def commit_uncommitted(t: TempRepo, head: str, run_id: str) -> str:
    """HEAD when the workspace's files are HEAD's tree; else a new commit on HEAD holding them,
    by oms' identity, "oms agent run <run-id>: uncommitted changes"."""
    found = changes(t, head)
    if not found:
        return head
    proc = t.popen("fast-import", "--quiet", "--done")
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    message = f"oms agent run {run_id}: uncommitted changes\n".encode()
    try:
        _stream(proc.stdin, t, head, found, message)
        proc.stdin.close()
    except BrokenPipeError:
        pass  # fast-import stopped: its reason is on stderr
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    out, err = proc.stdout.read(), proc.stderr.read()
    sha = out.decode("ascii", "replace").strip()
    if proc.wait() != 0 or not SHA_RE.match(sha):
        first = err.decode("utf-8", "replace").strip().splitlines()
        raise GitError(f"git fast-import: {first[0][:200] if first else 'no commit made'}")
    return sha
