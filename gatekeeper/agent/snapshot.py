"""A hostile workspace turned into one commit, with oms' git and oms' config only.

After the agent ended, its `.git` is data: HEAD and its branch are read as files (no
symlink followed, odd shapes refused); its config, hooks, index, attributes and info/
are never read. The files are compared with HEAD's tree by their bytes (hashed as blobs,
no clean filter; a file whose lstat is still the one `Stamps` took when oms wrote it is the
base's blob, unread) and every change, tracked or untracked-and-not-ignored (found by oms'
own walk, `gatekeeper.agent.untracked`: no git reads the workspace's files), becomes one
commit written by `git fast-import` in a temporary repository of oms' own, whose
alternates are the user's objects and then the workspace's. Nothing git writes there is
trusted yet: the caller checks it all with `index-pack --strict` before it reaches the
user's repository. FIFOs, sockets and devices are recorded and left out, never opened;
every git call is bounded by collect's one deadline.
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

from gatekeeper.agent.collect_deadline import killed_at, left
from gatekeeper.agent.payloads import SpecialFile, SpecialKind
from gatekeeper.agent.untracked import special_kind, walk_untracked
from gatekeeper.errors import Blocked
from gatekeeper.repo.fsread import FileRefused, Missing, RepoFiles, TooLarge
from gatekeeper.repo.git import SHA_RE, GitError, Repo, git_env, run_argv
from gatekeeper.repo.refs import valid_refname
from gatekeeper.repo.scratch import check_limits
from gatekeeper.repo.worktree import GITLINK_MODE, LINK_MODE, blob_id
from sandbox import Deadline

AGENT_IDENTITY = ("oms agent", "agent@oms.invalid")
MAX_FILE_BYTES = 256 << 20  # one workspace file oms commits
MAX_REFS_BYTES = 64 << 20  # the workspace's packed-refs, read to find HEAD's branch
MAX_SPECIAL_NAMED = 100  # special files named in the evidence (all are counted)

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


Stamp = tuple[int, int, int, int, int]  # st_ino, st_size, st_mtime_ns, st_ctime_ns, st_mode


def _stamp(st: os.stat_result) -> Stamp:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode


@dataclass(frozen=True)
class Stamps:
    """The lstat of every file and symlink oms wrote into a workspace, taken when it was made.

    At collect a path whose lstat is still its stamp holds the base's bytes and is not hashed.
    The agent can set a file's mtime (`touch -d`) but not its ctime, which every write, chmod
    or rename sets to the kernel's (coarse) clock; `fence` is a ctime the kernel gave after
    the stamps were taken. A stamp whose ctime is not before the fence is in doubt (a write in
    that same clock tick would leave the ctime as it was), and so is every path not stamped:
    those are hashed, as any path is when the workspace has no stamps."""

    files: dict[bytes, Stamp]
    fence: int

    @classmethod
    def take(cls, top: Path, fence_dir: Path) -> Stamps:
        """Stamps of `top`'s files (its `.git` left out); the fence from a file made in
        `fence_dir` (private to oms) once they are taken."""
        files: dict[bytes, Stamp] = {}
        stack = [b""]
        while stack:
            rel = stack.pop()
            with os.scandir(os.path.join(os.fsencode(top), rel)) as it:
                for entry in it:
                    path = rel + b"/" + entry.name if rel else entry.name
                    if entry.is_dir(follow_symlinks=False):
                        if path != b".git":
                            stack.append(path)
                    else:
                        files[path] = _stamp(entry.stat(follow_symlinks=False))
        fd, name = tempfile.mkstemp(prefix="oms-fence-", dir=fence_dir)
        try:
            fence = os.fstat(fd).st_ctime_ns
        finally:
            os.close(fd)
            os.unlink(name)
        return cls(files, fence)

    def unchanged(self, path: bytes, st: os.stat_result) -> bool:
        """True only when `path` was stamped before the fence and its lstat is that stamp."""
        was = self.files.get(path)
        return was is not None and was[3] < self.fence and was == _stamp(st)


@dataclass(frozen=True)
class TempRepo:
    """oms' own bare repository for one collect: alternates are the user's objects (first,
    so a trusted copy wins) and the workspace's; config and index are oms'. No git run
    here reads the workspace's files: `worktree` is oms' to read, through RepoFiles."""

    path: Path
    repo: Repo
    worktree: Path
    deadline: Deadline

    @classmethod
    @contextmanager
    def beside(cls, repo: Repo, workspace: Path, deadline: Deadline) -> Iterator[TempRepo]:
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
            yield cls(path, repo, workspace, deadline)
        finally:
            shutil.rmtree(path, ignore_errors=True)

    def _argv(self, args: tuple[str, ...], tree: Path | None = None) -> list[str]:
        at = ["--work-tree", str(tree)] if tree is not None else []
        return ["git", "--git-dir", str(self.path), *at, "--no-replace-objects",
                "--literal-pathspecs", *args]  # fmt: skip

    def _env(self) -> dict[str, str]:
        env = git_env(self.repo)
        env["GIT_INDEX_FILE"] = str(self.path / "index")
        return env

    def run(self, *args: str) -> bytes:
        """git ARGS here, killed at the deadline (subprocess.TimeoutExpired)."""
        return run_argv(self._argv(args), self._env(), self.path, None, True, args[0],
                        left(self.deadline, f"git {args[0]}"))  # fmt: skip

    def ignored(self, shadow: Path, paths: list[bytes]) -> set[bytes]:
        """Which of `paths` git's ignore rules exclude, judged against the `.gitignore`
        copies in `shadow` (a tree of oms'), never against the workspace's own files."""
        # check-ignore refuses literal pathspecs; "./" before each path keeps a leading ":"
        # from being read as pathspec magic (":(top)x" would be judged as "x").
        argv = ["git", "--git-dir", str(self.path), "--work-tree", str(shadow),
                "--no-replace-objects", "check-ignore", "--no-index", "--stdin", "-z"]  # fmt: skip
        env = self._env()
        del env["GIT_LITERAL_PATHSPECS"]
        proc = subprocess.run(argv, input=b"".join(b"./" + p + b"\0" for p in paths),
                              capture_output=True, env=env, cwd=shadow, check=False,
                              timeout=left(self.deadline, "git check-ignore"))  # fmt: skip
        if proc.returncode not in (0, 1):  # 1: none of them is ignored
            first = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            raise GitError(f"git check-ignore: {first[0][:200] if first else 'failed'}")
        return {p.removeprefix(b"./") for p in proc.stdout.split(b"\0") if p}

    def popen(self, *args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self._argv(args), env=self._env(), cwd=self.path,
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


def _entry(files: RepoFiles, path: bytes, oid_len: int, special: dict[bytes, SpecialKind],
           known: Known | None = None) -> tuple[str, str] | None:  # fmt: skip
    """(mode, blob id) of what is at `path` now; None when no file or symlink is there (a
    FIFO, socket or device is recorded in `special`, and never opened). `known`: the base's
    entries and the workspace's stamps, which spare reading a file oms wrote and nobody
    touched since."""
    try:
        st = files.lstat(_rel(path))
        if known is not None and path in known[0] and known[1].unchanged(path, st):
            return known[0][path]
        if stat.S_ISLNK(st.st_mode):
            return LINK_MODE, blob_id(files.readlink(_rel(path)), oid_len)
        if not stat.S_ISREG(st.st_mode):
            kind = special_kind(st.st_mode)
            if kind is not None:
                special[path] = kind
            return None  # a directory, FIFO, socket or device: not content git commits
        mode = "100755" if st.st_mode & 0o100 else "100644"
        return mode, blob_id(files.read(_rel(path), MAX_FILE_BYTES), oid_len)
    except TooLarge as exc:
        raise Blocked(f"{exc.rel[:120]} in the workspace is larger than oms collects "
                      f"({MAX_FILE_BYTES} bytes)") from None  # fmt: skip
    except FileRefused:
        return None


@dataclass(frozen=True)
class Changes:
    """(path, new mode; None: deleted) of every path whose bytes or mode differ from HEAD's
    tree, untracked files not ignored included, deletions first; and the special files."""

    found: list[tuple[bytes, str | None]]
    special: dict[bytes, SpecialKind]


Known = tuple[dict[bytes, tuple[str, str]], Stamps]  # the base's tree, the stamps


def changes(t: TempRepo, head: str, base: str | None = None,
            stamps: Stamps | None = None) -> Changes:  # fmt: skip
    """What `git add -A` would stage in the workspace, found without git reading it.
    `stamps` (taken when the workspace was made from `base`): the files still stamped are
    the base's, unread."""
    tree = _tree(t, head)
    known: Known | None = None
    if stamps is not None and base is not None:
        known = (tree if base == head else _tree(t, base), stamps)
    gitlinks = {p for p, (mode, _) in tree.items() if mode == GITLINK_MODE}
    shadow = t.path / "ignores"
    os.mkdir(shadow, 0o700)
    walk = walk_untracked(t.worktree, shadow, tree, gitlinks,
                          lambda paths: t.ignored(shadow, paths), t.deadline)  # fmt: skip
    found: list[tuple[bytes, str | None]] = []
    with RepoFiles(t.worktree) as files:
        for n, (path, (mode, oid)) in enumerate(tree.items()):
            if n % 1024 == 0:
                left(t.deadline, "comparing the workspace's files with HEAD")
            if mode == GITLINK_MODE:
                continue  # a submodule's commit stays as it was: oms runs no git inside it
            now = _entry(files, path, len(head), walk.special, known)
            if now != (mode, oid):
                found.append((path, None if now is None else now[0]))
        for n, path in enumerate(walk.others):
            if n % 1024 == 0:
                left(t.deadline, "hashing the workspace's new files")
            now = _entry(files, path, len(head), walk.special)
            if now is not None:
                found.append((path, now[0]))
    return Changes(sorted(found, key=lambda c: c[1] is not None), walk.special)


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


@dataclass(frozen=True)
class Snapshot:
    commit: str  # HEAD when nothing changed
    special: tuple[SpecialFile, ...]  # the first MAX_SPECIAL_NAMED, by path
    special_total: int


def _named(special: dict[bytes, SpecialKind]) -> tuple[SpecialFile, ...]:
    return tuple(SpecialFile(path=p.decode("utf-8", "backslashreplace")[:1024], kind=k)
                 for p, k in sorted(special.items())[:MAX_SPECIAL_NAMED])  # fmt: skip


def commit_uncommitted(t: TempRepo, head: str, run_id: str, base: str | None = None,
                       stamps: Stamps | None = None) -> Snapshot:  # fmt: skip
    """HEAD when the workspace's files are HEAD's tree; else a new commit on HEAD holding them,
    by oms' identity, "oms agent run <run-id>: uncommitted changes". `base`, `stamps`: as
    `changes` takes them."""
    got = changes(t, head, base, stamps)
    special = (_named(got.special), len(got.special))
    if not got.found:
        return Snapshot(head, *special)
    return Snapshot(_fast_import(t, head, got.found, run_id), *special)


def _fast_import(t: TempRepo, head: str, found: list[tuple[bytes, str | None]],
                 run_id: str) -> str:  # fmt: skip
    proc = t.popen("fast-import", "--quiet", "--done")
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    message = f"oms agent run {run_id}: uncommitted changes\n".encode()
    with killed_at(t.deadline, "git fast-import", proc):
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
        code = proc.wait()
    sha = out.decode("ascii", "replace").strip()
    if code != 0 or not SHA_RE.match(sha):
        first = err.decode("utf-8", "replace").strip().splitlines()
        raise GitError(f"git fast-import: {first[0][:200] if first else 'no commit made'}")
    return sha
