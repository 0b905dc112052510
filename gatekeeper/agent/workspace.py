"""The agent's workspace: a clone oms makes, and its result written back as data.

`create_workspace` makes `work_root()/<run-id>` from nothing: the files of `base` written
as data (scratch.copy_commit: no attributes, filters or hooks of anyone's), a `.git` whose
config, HEAD and branch oms writes, and the whole history of `base` packed by oms' git from
oms' mirror (never `git clone` of the user's repository, which would run upload-pack under
its config; never alternates, which would make the user's repository visible inside).

`collect` runs after the agent ended, outside the sandbox, on a workspace that is now
hostile: its `.git` (config, hooks, index, refs, packed-refs, objects) is read as data or
not at all. Uncommitted changes are committed from the files' bytes (`gatekeeper.agent.
snapshot`), the new objects are packed from a temporary repository of oms' and checked by
`index-pack --strict` in a quarantine beside the user's objects, and only a descendant of
`base` is moved in and named `refs/oms/runs/<run-id>`. One deadline bounds all of it
(`gatekeeper.agent.collect_deadline`): every git call is killed at it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from evidence import state_root
from evidence.state import ensure_private_dir, fsync_dir
from gatekeeper.agent import snapshot
from gatekeeper.agent.collect_deadline import (
    COLLECT_DEADLINE_S,
    CollectTimeout,
    killed_at,
    left,
)
from gatekeeper.agent.payloads import Diffstat, SpecialFile
from gatekeeper.agent.snapshot import AGENT_IDENTITY
from gatekeeper.errors import Blocked, ConfigError, Unavailable, UsageError
from gatekeeper.repo.git import GitError, Repo, git, git_argv, git_env, run_argv
from gatekeeper.repo.refs import RUN_REF_RE, read_ref, resolve_commit, write_ref
from gatekeeper.repo.scratch import copy_commit, remove_tree
from sandbox import Deadline

RUN_REF_PREFIX = "refs/oms/runs/"

MAX_OBJECT_FILES = 1_000_000  # entries of a workspace's objects dir oms walks
MAX_PACK_BYTES = 1 << 30  # the objects of one run's result, packed

_WORKSPACE_CONFIG = """\
[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = false
\tlogallrefupdates = true
[user]
\tname = {name}
\temail = {email}
"""


def _inside(a: Path, b: Path) -> bool:
    """`a` is `b` or below it (both resolved)."""
    ra, rb = os.path.realpath(a), os.path.realpath(b)
    return ra == rb or ra.startswith(rb.rstrip(os.sep) + os.sep)


def _apart(a: Path, b: Path) -> bool:
    return not _inside(a, b) and not _inside(b, a)


def data_home(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_DATA_HOME`, else `~/.local/share`: where oms keeps what a run needs outside
    `$OMS_HOME` (the workspaces, the subscription logins)."""
    env = os.environ if environ is None else environ
    if env.get("XDG_DATA_HOME"):
        return Path(env["XDG_DATA_HOME"]).expanduser().absolute()
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return home / ".local" / "share"


def outside_state(root: Path, what: str, remedy: str,
                  environ: Mapping[str, str] | None = None) -> Path:  # fmt: skip
    """`root`, unless it and the state root contain one another (ConfigError): what is
    bound into an agent's sandbox, or copied into it, never lies in `$OMS_HOME`."""
    env = os.environ if environ is None else environ
    if not _apart(root, state_root(env)):
        raise ConfigError(f"the agent {what} {root} and the oms state root {state_root(env)} "
                          f"overlap; set {remedy} outside $OMS_HOME")  # fmt: skip
    return root


def work_root(environ: Mapping[str, str] | None = None) -> Path:
    """`$OMS_WORK_DIR`, else `$XDG_DATA_HOME/oms/work`, else `~/.local/share/oms/work`;
    ConfigError when it and the state root contain one another (the agent's workspace is
    bound into its sandbox; the state root never may be)."""
    env = os.environ if environ is None else environ
    if env.get("OMS_WORK_DIR"):
        root = Path(env["OMS_WORK_DIR"]).expanduser().absolute()
    else:
        root = data_home(env) / "oms" / "work"
    return outside_state(root, "work dir", "OMS_WORK_DIR", env)


def new_run_id(now: datetime | None = None) -> str:
    """`20261201T150000Z-0a1b2c3d`: the UTC time and 8 random hex digits."""
    when = datetime.now(UTC) if now is None else now
    if when.tzinfo is not None:  # a naive time is taken as UTC already
        when = when.astimezone(UTC)
    return f"{when:%Y%m%dT%H%M%SZ}-{secrets.token_hex(4)}"


@dataclass(frozen=True)
class Workspace:
    run_id: str
    path: Path
    base: str
    base_ref: str
    # The lstat of the files oms wrote, taken at creation: collect hashes only the others.
    stamps: snapshot.Stamps | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class Collected:
    candidate: str | None
    candidate_ref: str | None
    diffstat: Diffstat | None
    special: tuple[SpecialFile, ...] = ()  # FIFOs, sockets, devices: left out, never opened
    special_total: int = 0


def run_ref(run_id: str) -> str:
    """`refs/oms/runs/<run-id>`; UsageError for anything that is not a run id."""
    ref = RUN_REF_PREFIX + run_id
    if not RUN_REF_RE.match(ref):
        raise UsageError(f"not a run id: {run_id[:80]!r}")
    return ref


def workspace_path(run_id: str, environ: Mapping[str, str] | None = None) -> Path:
    """Where `create_workspace` puts run `run_id`'s clone: `work_root()/<run-id>`. Pure (it
    creates nothing), so a dispatch can record the path before the run starts."""
    run_ref(run_id)
    return work_root(environ) / run_id


def _root_for(repo: Repo) -> Path:
    root = work_root()
    for part in (repo.top, repo.common_dir):
        if not _apart(root, part):
            raise ConfigError(f"the agent work dir {root} and the repository {part} overlap; "
                              "set OMS_WORK_DIR outside the repository")  # fmt: skip
    ensure_private_dir(root)
    return root


def _write_new(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _make_dotgit(repo: Repo, top: Path, run_id: str, base: str) -> None:
    """`top/.git`, every file of it written by oms; the history of `base` packed into it."""
    dotgit = top / ".git"
    for sub in ("", "hooks", "info", "objects", "objects/info", "objects/pack", "refs",
                "refs/heads", "refs/heads/oms", "refs/tags"):  # fmt: skip
        os.mkdir(dotgit / sub if sub else dotgit, 0o755)
    name, email = AGENT_IDENTITY
    _write_new(dotgit / "config", _WORKSPACE_CONFIG.format(name=name, email=email).encode())
    _write_new(dotgit / "HEAD", f"ref: refs/heads/oms/{run_id}\n".encode())
    _write_new(dotgit / "refs" / "heads" / "oms" / run_id, f"{base}\n".encode())
    # Objects: packed by oms' git from oms' mirror (the user's objects as its alternate).
    # No delta search and no compression of loose objects: packed data is reused as it is,
    # and start-up time matters more than the workspace's size (the agent's gc can shrink it).
    argv = git_argv(repo, "-c", "pack.compression=0", "pack-objects", "--revs", "-q",
                    "--window=0", "--delta-base-offset",
                    str(dotgit / "objects" / "pack" / "pack"))  # fmt: skip
    run_argv(argv, git_env(repo), repo.mirror, f"{base}\n".encode(), True, "pack-objects")
    # The index, so that `git status` inside starts clean: oms' env, the config just written.
    env = git_env(repo)
    env["GIT_INDEX_FILE"] = str(dotgit / "index")
    for args in (("read-tree", base), ("update-index", "-q", "--refresh")):
        argv = ["git", "--git-dir", str(dotgit), "--work-tree", str(top), *args]
        run_argv(argv, env, top, None, args[0] == "read-tree", args[0])


def create_workspace(repo: Repo, base_ref: str | None, run_id: str) -> Workspace:
    """A fresh private clone of `base_ref` (default HEAD) at `work_root()/<run-id>`."""
    ref = base_ref if base_ref is not None else "HEAD"
    run_ref(run_id)
    base = resolve_commit(repo, ref)
    root = _root_for(repo)
    path = workspace_path(run_id)
    if os.path.lexists(path):
        raise UsageError(f"a workspace for run {run_id} exists already: {path}")
    tmp = copy_commit(repo.top, base, dest_parent=root)
    try:
        _make_dotgit(repo, tmp, run_id, base)
        stamps = snapshot.Stamps.take(tmp, root)  # paths are relative: the rename keeps them
        os.chmod(tmp, 0o700)
        os.rename(tmp, path)
    except BaseException:
        remove_tree(tmp)
        raise
    return Workspace(run_id, path, base, ref, stamps)


# -- collect ---------------------------------------------------------------------------------


def _real_dir(path: Path, what: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise Blocked(f"the workspace has no {what}; nothing can be collected") from None
    if not stat.S_ISDIR(st.st_mode):
        raise Blocked(f"the workspace's {what} is not a directory (a symlink or a file); "
                      "oms does not follow it")  # fmt: skip


def _vet_objects(objects: Path, deadline: Deadline) -> None:
    """Blocked unless the workspace's object store is plain files in plain directories and
    names no other store (alternates would let git read objects from anywhere)."""
    for name in ("alternates", "http-alternates"):
        if os.path.lexists(objects / "info" / name):
            raise Blocked(f"the workspace's objects/info/{name} names other object stores; "
                          "oms does not read them")  # fmt: skip
    stack, seen = [os.fsencode(objects)], 0
    while stack:
        left(deadline, "checking the workspace's object store")
        with os.scandir(stack.pop()) as it:
            for entry in it:
                seen += 1
                if seen > MAX_OBJECT_FILES:
                    raise Blocked("the workspace's object store has too many files to collect")
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif not entry.is_file(follow_symlinks=False):
                    shown = os.fsdecode(entry.path)[len(str(objects)) + 1 :]
                    raise Blocked(f"the workspace's objects/{shown[:120]} is a symlink or "
                                  "special file; oms does not follow it")  # fmt: skip


@contextmanager
def _quarantine(repo: Repo) -> Iterator[Path]:
    """An object directory inside the user's (so its packs can be moved in by rename)."""
    objects = repo.common_dir / "objects"
    q = Path(tempfile.mkdtemp(prefix="tmp_objdir-oms-", dir=objects))
    try:
        os.mkdir(q / "pack", 0o700)
        yield q
    finally:
        shutil.rmtree(q, ignore_errors=True)


def _receive(repo: Repo, t: snapshot.TempRepo, q: Path, base: str, result: str) -> None:
    """base..result packed in the temporary repository, indexed and checked (every object
    hashed again, links resolved, fsck rules) into the quarantine; Blocked unless the result
    descends from base."""
    sender = t.popen("pack-objects", "--revs", "--stdout", "-q", "--no-use-bitmap-index",
                     "--delta-base-offset")  # fmt: skip
    env = git_env(repo)
    env["GIT_OBJECT_DIRECTORY"] = str(q)
    env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = str(repo.common_dir / "objects")
    assert sender.stdin is not None and sender.stdout is not None
    receiver = subprocess.Popen(git_argv(repo, "index-pack", "--strict", "--stdin",
                                         f"--max-input-size={MAX_PACK_BYTES}"), env=env,
                                cwd=repo.mirror, stdin=sender.stdout, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)  # fmt: skip
    sender.stdout.close()
    with killed_at(t.deadline, "git pack-objects | git index-pack", sender, receiver):
        sender.stdin.write(f"{result}\n^{base}\n".encode())
        sender.stdin.close()
        _, err = receiver.communicate()
        sent_err = sender.stderr.read() if sender.stderr is not None else b""
        sent = sender.wait()
    if sent != 0 or receiver.returncode != 0:
        first = (sent_err or err).decode("utf-8", "replace").strip().splitlines()
        raise Blocked("the workspace's objects do not check out (git index-pack --strict): "
                      + (first[0][:200] if first else "no reason given"))  # fmt: skip
    check = subprocess.run(git_argv(repo, "merge-base", "--is-ancestor", base, result),
                           env=env, cwd=repo.mirror, capture_output=True, check=False,
                           timeout=left(t.deadline, "git merge-base"))  # fmt: skip
    if check.returncode != 0:
        raise Blocked(f"the agent rewrote history: the workspace HEAD {result[:12]} does not "
                      f"descend from the run's base {base[:12]}")  # fmt: skip


def _move_in(repo: Repo, q: Path) -> None:
    """The checked packs into the user's objects/pack; each index last (it makes a pack seen)."""
    dest = repo.common_dir / "objects" / "pack"
    os.makedirs(dest, exist_ok=True)
    names = sorted(os.listdir(q / "pack"), key=lambda n: n.endswith(".idx"))
    for name in names:
        if not name.startswith("pack-"):
            continue
        if os.path.lexists(dest / name):
            continue  # the very same pack (its name is its hash) is there already
        os.rename(q / "pack" / name, dest / name)
    fsync_dir(dest)  # the packs are durable before the ref that needs them is written


def diffstat(repo: Repo, base: str, candidate: str, timeout: float | None = None) -> Diffstat:
    """Files, insertions and deletions of base..candidate (oms' git; binary counts 0)."""
    out = git(repo, "diff-tree", "-r", "-z", "--numstat", "--no-renames", "--no-ext-diff",
              "--no-textconv", base, candidate, timeout=timeout)  # fmt: skip
    files = ins = dels = 0
    for rec in out.split(b"\0"):
        fields = rec.split(b"\t")
        if len(fields) < 3:
            continue
        files += 1
        ins += int(fields[0]) if fields[0].isdigit() else 0
        dels += int(fields[1]) if fields[1].isdigit() else 0
    return Diffstat(files=files, insertions=ins, deletions=dels)


def collect(repo: Repo, ws: Workspace, deadline: Deadline | None = None) -> Collected:
    """The agent's result as `refs/oms/runs/<run-id>` in the user's repository (or nothing,
    when the workspace still is `base`). Blocked for a workspace oms will not read;
    CollectTimeout (Blocked) past `deadline` (default COLLECT_DEADLINE_S from now)."""
    deadline = deadline or Deadline.after(COLLECT_DEADLINE_S)
    try:
        return _collect(repo, ws, deadline)
    except subprocess.TimeoutExpired:  # a git call ran into the deadline and was killed
        raise CollectTimeout.of(deadline, "a git call was killed at it") from None


def _collect(repo: Repo, ws: Workspace, deadline: Deadline) -> Collected:
    ref = run_ref(ws.run_id)
    if read_ref(repo, ref) is not None:
        raise Blocked(f"{ref} exists already; a run's result is written once")
    _real_dir(ws.path, "directory")
    _real_dir(ws.path / ".git", ".git directory")
    _real_dir(ws.path / ".git" / "objects", ".git/objects directory")
    _vet_objects(ws.path / ".git" / "objects", deadline)
    head = snapshot.workspace_head(ws.path / ".git")
    with snapshot.TempRepo.beside(repo, ws.path, deadline) as t:
        try:
            snap = snapshot.commit_uncommitted(t, head, ws.run_id, ws.base, ws.stamps)
        except GitError as exc:
            raise Blocked(f"the workspace cannot be collected: {exc}") from None
        result, special = snap.commit, (snap.special, snap.special_total)
        if result == ws.base:
            return Collected(None, None, None, *special)
        try:
            with _quarantine(repo) as q:
                _receive(repo, t, q, ws.base, result)
                _move_in(repo, q)
        except OSError as exc:
            raise Unavailable(f"cannot write the run's objects into the repository: "
                              f"{exc.strerror or exc}") from None  # fmt: skip
    # Before the ref: past the deadline, no ref is left that `agent.run.end` does not name.
    stats = diffstat(repo, ws.base, result, left(deadline, "git diff-tree"))
    write_ref(repo, ref, result, None, f"oms agent run {ws.run_id}")
    return Collected(result, ref, stats, *special)
