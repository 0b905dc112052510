"""Refs of the user's repository, read and written as data: names, symbolic refs, revisions,
the default branch and the trusted base. Nothing of the repository runs."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from evidence import state_root
from evidence.state import atomic_write
from gatekeeper.errors import Blocked, UsageError
from gatekeeper.repo.git import SHA_RE, Repo, git, is_ancestor, repo_of

_HEX_PREFIX = re.compile(r"^[0-9a-fA-F]{4,64}$")


_SUFFIX = re.compile(r"^(?:[~^][0-9]{0,6})*$")


_MAX_SYMREF_DEPTH = 5


# git's own order for a short name (refs.c, ref_rev_parse_rules), HEAD aside.
_DWIM = ("{}", "refs/{}", "refs/tags/{}", "refs/heads/{}", "refs/remotes/{}",
         "refs/remotes/{}/HEAD")  # fmt: skip


DEFAULT_BRANCH_FILE = "default-branch"


# `oms agent run` results and the provenance notes (notes.NOTES_REF, which imports this
# module): the refs outside refs/heads/ that oms writes.
RUN_REF_RE = re.compile(r"^refs/oms/runs/[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}$")
_NOTES_REF = "refs/notes/oms"


def valid_refname(name: str) -> bool:
    """git's refname rules (git-check-ref-format), without running anything."""
    if not name or name.startswith("/") or name.endswith(("/", ".", ".lock")) or name == "@":
        return False
    if any(c in name for c in " ~^:?*[\\\x7f") or "@{" in name or ".." in name or "//" in name:
        return False
    if any(ord(c) < 0x20 for c in name):
        return False
    return all(part and not part.startswith(".") and not part.endswith(".lock")
               for part in name.split("/"))  # fmt: skip


def _packed_refs(common: Path) -> dict[str, str]:
    try:
        data = (common / "packed-refs").read_bytes()
    except OSError:
        return {}
    refs: dict[str, str] = {}
    for line in data.split(b"\n"):
        if not line or line[:1] in (b"#", b"^"):
            continue
        sha, _, name = line.partition(b" ")
        refs[name.decode("utf-8", "surrogateescape")] = sha.decode("ascii", "replace")
    return refs


def _read_loose(base: Path, name: str) -> bytes | None:
    path = base / name
    real = os.path.realpath(path)
    if not real.startswith(os.path.realpath(base) + os.sep):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not os.path.isfile(real):
            return None
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def read_ref(repo: Repo, name: str, _depth: int = 0) -> str | None:
    """The commit (or object) a full ref name points at, following symbolic refs; None if absent.

    `HEAD` is this worktree's HEAD; everything else comes from the common dir (loose refs,
    then `packed-refs`). Nothing of the repository runs.
    """
    if _depth > _MAX_SYMREF_DEPTH:
        raise UsageError(f"symbolic ref {name[:80]!r} loops")
    if name == "HEAD":
        raw = _read_loose(repo.git_dir, "HEAD")
    elif name.startswith("refs/") and valid_refname(name):
        raw = _read_loose(repo.common_dir, name)
        if raw is None:
            raw = (_packed_refs(repo.common_dir).get(name) or "").encode() or None
    else:
        return None
    if raw is None:
        return None
    text = raw.decode("utf-8", "surrogateescape").strip()
    if text.startswith("ref: "):
        return read_ref(repo, text[5:].strip(), _depth + 1)
    return text if SHA_RE.match(text) else None


def symbolic_target(repo: Repo, name: str, git_dir: Path | None = None) -> str | None:
    """Where a symbolic ref points (`refs/heads/main` for a HEAD on main), None if it does not."""
    base = git_dir if git_dir is not None else (repo.git_dir if name == "HEAD" else repo.common_dir)
    raw = _read_loose(base, name)
    if raw is None:
        return None
    text = raw.decode("utf-8", "surrogateescape").strip()
    return text[5:].strip() if text.startswith("ref: ") else None


def current_branch(repo: Repo) -> str | None:
    """The checked-out branch's short name, or None when HEAD is detached."""
    target = symbolic_target(repo, "HEAD")
    if target and target.startswith("refs/heads/"):
        return target.removeprefix("refs/heads/")
    return None


def checked_out_branches(repo: Repo) -> set[str]:
    """Full names of the branches checked out in any worktree of the repository."""
    dirs = [repo.common_dir]
    try:
        dirs += [d for d in (repo.common_dir / "worktrees").iterdir() if d.is_dir()]
    except OSError:
        pass
    out = set()
    for d in dirs:
        target = symbolic_target(repo, "HEAD", git_dir=d)
        if target:
            out.add(target)
    return out


def resolve_commit(top: Path | Repo, ref: str) -> str:
    """A revision (`NAME`, `NAME~2`, `HEAD^`, a SHA or its prefix) to a full commit SHA.

    The name part is looked up in the repository's refs as data; the rest is given to
    oms' own repository. A revision is data: it can never become an option.
    """
    repo = repo_of(top)
    if not ref or len(ref) > 1024 or ref.startswith("-") or "\x00" in ref:
        raise UsageError(f"not a valid ref: {ref[:80]!r}")
    cut = min((i for i in (ref.find("~"), ref.find("^")) if i >= 0), default=len(ref))
    name, suffix = ref[:cut], ref[cut:]
    if suffix.endswith("^{commit}"):
        suffix = suffix[: -len("^{commit}")]
    if not _SUFFIX.match(suffix):
        raise UsageError(f"not a revision oms understands: {ref[:80]!r}")
    sha = None if SHA_RE.match(name) else _lookup(repo, name)
    if sha is None:
        if not _HEX_PREFIX.match(name):
            raise UsageError(f"ref does not name a commit: {ref[:80]!r}")
        sha = name.lower()
    known = (str(repo.common_dir), sha)
    if not suffix and known in _COMMITS:
        return sha
    out = git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options",
              f"{sha}{suffix}^{{commit}}", check=False).strip()  # fmt: skip
    commit = out.decode("ascii", "replace")
    if not SHA_RE.match(commit):
        raise UsageError(f"ref does not name a commit: {ref[:80]!r}")
    if not suffix and commit == sha:  # a full id that is a commit stays one
        if len(_COMMITS) >= _COMMITS_MAX:
            _COMMITS.clear()
        _COMMITS.add(known)
    return commit


# Full commit ids found to be commits, by object store: a long-lived oms (the MCP server)
# asks git once per commit, not once per call. Per process, bounded.
_COMMITS: set[tuple[str, str]] = set()
_COMMITS_MAX = 4096


def _lookup(repo: Repo, name: str) -> str | None:
    if name in ("HEAD", "@"):
        return read_ref(repo, "HEAD")
    if not valid_refname(name):
        return None
    for rule in _DWIM:
        full = rule.format(name)
        if full.startswith("refs/"):
            sha = read_ref(repo, full)
            if sha is not None:
                return sha
    return None


def default_branch_ref(repo: Repo) -> tuple[str, str]:
    """(full ref, commit) of the default branch: the one `oms init --default-branch` recorded
    in the state root, else origin/HEAD, else main, else master. Never a setting inside the
    repository or its policy."""
    ref, sha = default_branch_named(repo)
    return ref, resolve_commit(repo, sha)


def default_branch_named(repo: Repo) -> tuple[str, str]:
    """(full ref, the id it names) of the default branch, as `default_branch_ref` finds it,
    by reading files only: the id is not yet checked to be a commit (no git runs)."""
    recorded = _recorded_default(repo)
    if recorded is not None:
        sha = read_ref(repo, recorded)
        if sha is None:
            raise UsageError(f"the default branch recorded by `oms init` ({recorded}) is gone")
        return recorded, sha
    origin = symbolic_target(repo, "refs/remotes/origin/HEAD")
    for ref in ([origin] if origin else []) + ["refs/heads/main", "refs/heads/master"]:
        sha = read_ref(repo, ref)
        if sha is not None:
            return ref, sha
    raise UsageError("no default branch (origin/HEAD, main or master); record one with "
                     "`oms init --default-branch NAME`")  # fmt: skip


def _recorded_default(repo: Repo) -> str | None:
    path = state_root() / "repos" / repo.repo_id / DEFAULT_BRANCH_FILE
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        raise UsageError(f"cannot read the recorded default branch ({path.name})") from None
    if not text.startswith("refs/heads/") or not valid_refname(text):
        raise UsageError(f"the recorded default branch is not a branch: {text[:80]!r}")
    return text


def record_default_branch(repo: Repo, name: str) -> str:
    """Record the default branch in the state root (`oms init --default-branch NAME`)."""
    full = name if name.startswith("refs/heads/") else f"refs/heads/{name}"
    if not valid_refname(full):
        raise UsageError(f"not a valid branch name: {name[:80]!r}")
    if read_ref(repo, full) is None:
        raise UsageError(f"no branch {name[:80]!r} in this repository")
    path = state_root() / "repos" / repo.repo_id / DEFAULT_BRANCH_FILE
    atomic_write(path, (full + "\n").encode())
    return full


def default_branch(top: Path | Repo) -> str:
    """The commit at the tip of the default branch."""
    return default_branch_ref(repo_of(top))[1]


def default_base(top: Path | Repo, candidate: str, onto: str | None = None) -> str:
    """Merge-base of the candidate with `onto` (default: the default branch's tip)."""
    onto = onto if onto is not None else default_branch(top)
    out = git(top, "merge-base", onto, candidate, check=False).strip()
    if not out:
        raise UsageError("the candidate shares no history with the default branch")
    return out.decode("ascii")


def trusted_base(repo: Repo, candidate: str, base_ref: str | None, mark: str) -> str:
    """The base of the diff for a candidate judged by the policy at the trusted mark `mark`.

    merge-base(mark, candidate): commits on the default branch after the mark were judged
    by no one, so they are part of the range. `--base` only narrows the diff: it must be an
    ancestor of the candidate and of the mark (trusted history).
    """
    if base_ref is None:
        return default_base(repo, candidate, mark)
    base = resolve_commit(repo, base_ref)
    if not is_ancestor(repo, base, candidate):
        raise UsageError(f"--base {base_ref[:80]!r} is not an ancestor of the candidate")
    if not is_ancestor(repo, base, mark):
        raise UsageError(f"--base {base_ref[:80]!r} is not an ancestor of the default branch's "
                         "trusted mark; a base must be trusted history")  # fmt: skip
    return base


def write_ref(repo: Repo, ref: str, new: str, old: str | None, message: str) -> None:
    """Set `ref` to `new` in the user's repository if it still points at `old` (None: absent).

    Only branches (`refs/heads/…`), agent run results (`refs/oms/runs/<run-id>`) and the
    provenance notes (`refs/notes/oms`).

    Written as git does (a `.lock` file created exclusively, then renamed), without running
    git in the repository: no hook, no config of the repository takes part.
    """
    writable = ref.startswith("refs/heads/") or RUN_REF_RE.match(ref) or ref == _NOTES_REF
    if not writable or not valid_refname(ref) or not SHA_RE.match(new):
        raise UsageError(f"not a branch, agent run or notes ref: {ref[:80]!r}")
    path = repo.common_dir / ref
    os.makedirs(path.parent, exist_ok=True)
    lock = path.with_name(path.name + ".lock")
    try:
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except FileExistsError:
        raise Blocked(f"{ref} is locked by another git process; try again") from None
    try:
        if read_ref(repo, ref) != old:
            raise Blocked(f"{ref} moved while oms was delivering; nothing was changed")
        os.write(fd, new.encode() + b"\n")
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(lock, path)
    finally:
        if fd >= 0:
            os.close(fd)
        if os.path.lexists(lock):
            os.unlink(lock)
    _append_reflog(repo, ref, old, new, message)


def _append_reflog(repo: Repo, ref: str, old: str | None, new: str, message: str) -> None:
    log = repo.common_dir / "logs" / ref
    if not log.parent.is_dir():
        return
    zero = "0" * len(new)
    line = f"{old or zero} {new} oms <oms@localhost> {int(time.time())} +0000\t{message}\n"
    try:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError:
        return
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
