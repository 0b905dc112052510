"""The decisions behind every hook, the same for both clients: a write with a secret or to a
protected path, a read of a secret file or of a file holding a secret, a refused shell
command, a file that now holds a secret.

The policy is the gates' own: `oms.toml` at the default branch's tip (no repository, one
never `oms init`ed, or no commit yet: the built-in defaults). Inside an oms agent sandbox
there is no state root and the workspace is the agent's, so the built-in defaults apply
there. The scanners are the gates' (`scan_with_policy`: the pinned, digest-checked
Gitleaks and detect-secrets, through the scan-result cache); a scanner that cannot run
raises, and the caller denies.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evidence import state_root
from gatekeeper.errors import UsageError
from gatekeeper.gates.result.builtin import BUILTIN
from gatekeeper.integrations.hooks import policy_cache
from gatekeeper.integrations.hooks.bash import bash_refusal
from gatekeeper.integrations.hooks.policy_cache import HookPolicy
from gatekeeper.integrations.hooks.reads import PlannedRead
from gatekeeper.integrations.hooks.secret_paths import REMEDY, glob_targets_secrets, secret_name
from gatekeeper.integrations.hooks.writes import PlannedWrite, inside, repo_top, roots, spellings
from gatekeeper.repo.git import Repo, open_repo, repo_id_at
from gatekeeper.scan.interface import Finding, ScanItem
from gatekeeper.text import path_text
from policy.paths import matches

if TYPE_CHECKING:
    from gatekeeper.scan.policy import ScanReport
    from policy import LoadedPolicy

# A file read back after a write is scanned up to this size (the gate scans the rest).
READ_BACK_MAX = 4 << 20
_SHOWN = 5  # findings named in one reason


@dataclass(frozen=True)
class Session:
    """Where the hook runs: the client's cwd, its repository top, oms' state root."""

    cwd: str
    top: str | None
    state_root: str | None  # None inside an agent sandbox: there is none to protect
    # An unattended worker's run (its marker says so): a call that passes is `allow`.
    may_allow: bool = False

    @property
    def in_sandbox(self) -> bool:
        return self.state_root is None

    @classmethod
    def of(cls, cwd: str, *, in_sandbox: bool, may_allow: bool = False) -> Session:
        """The session at `cwd` (the client's; else this process's). `in_sandbox`: oms runs
        inside an agent sandbox (the CLI knows, from gatekeeper/agent/inside.py)."""
        cwd = os.path.abspath(cwd or os.getcwd())
        if not in_sandbox:  # on the host, never an allow
            return cls(cwd, repo_top(cwd), str(state_root()))
        return cls(cwd, repo_top(cwd), None, may_allow)


def set_up(session: Session) -> bool:
    """Whether oms was set up (`oms init`) for the session's repository; asked without
    creating anything, so that a user-scope install stays out of other repositories."""
    if session.state_root is None or session.top is None:
        return False
    try:
        repo_id = repo_id_at(Path(session.top))
    except UsageError:
        return False  # no usable .git: not a repository oms could have set up
    # What gates.records.initialised asks, without importing the gates' records.
    log = Path(session.state_root) / "repos" / repo_id / "evidence" / "log.jsonl"
    return log.exists()


def load_policy(session: Session) -> LoadedPolicy:
    """The policy the gates would use for this repository (module docstring)."""
    return hook_policy(session).loaded()


def hook_policy(session: Session) -> HookPolicy:
    """The policy the gates would use for this repository, from the hooks' own cache when
    nothing it depends on changed (policy_cache.py), else read as the gates read it."""
    if session.top is None or not set_up(session):
        return HookPolicy((), None, None, "built-in defaults")
    try:
        repo = open_repo(Path(session.top))
    except UsageError:
        return HookPolicy((), None, None, "built-in defaults")  # a repository oms refuses to open
    cached = policy_cache.lookup(repo)
    if cached is not None:
        return cached
    return _read_policy(session, repo)


def _read_policy(session: Session, repo: Repo) -> HookPolicy:
    from gatekeeper.gates.mark import policy_commit  # the miss: the gates' own path
    from gatekeeper.repo.policy import read_committed_file, read_policy_at
    from gatekeeper.repo.refs import resolve_commit
    from policy import POLICY_FILE

    try:
        resolve_commit(repo.top, "HEAD")
        known = policy_cache.facts(repo)
    except (UsageError, OSError):
        return HookPolicy((), None, None, "built-in defaults")  # no commit yet
    commit = policy_commit(repo)
    loaded = read_policy_at(repo, commit)
    source = read_committed_file(repo, commit, POLICY_FILE)
    policy_cache.remember(repo, known, commit, loaded, source)
    return HookPolicy.of(loaded, source)


def _protected_reason(session: Session, path: str, extra: Sequence[str]) -> str | None:
    for where in spellings(path, session.cwd):
        if session.state_root is not None and inside(where, session.state_root) is not None:
            return "it is inside oms' state root (keys, approvals, evidence)"
        for top in roots(session.top) if session.top else ():
            rel = inside(where, top)
            if rel is None:
                continue
            pattern = matches(rel, (*BUILTIN, *extra)) if rel != "." else None
            if pattern is not None:
                return (f"{path_text(rel)} is a protected path ({path_text(pattern)}): the "
                        "result gate blocks any change to it; ask the user to make it")  # fmt: skip
    return None


def _display(session: Session, path: str) -> str:
    absolute = os.path.normpath(os.path.join(session.cwd, path))
    rel = inside(absolute, session.top) if session.top else None
    return rel if rel is not None else absolute


_WRITE_REMEDY = (
    "Remove it and read it at run time from the environment or a secret store; only the "
    "repository owner can allow a false positive, by its fingerprint in oms.toml "
    "[scanners] allow_fingerprints"
)


def _secret_reason(
    findings: Iterable[Finding], what: str, remedy: str = _WRITE_REMEDY
) -> str | None:
    found = sorted({(f.file, f.line, f.rule, f.fingerprint) for f in findings})
    if not found:
        return None
    shown = "; ".join(
        f"{path_text(file)} line {line}: rule {path_text(rule)} (fingerprint {fp[:16]})"
        for file, line, rule, fp in found[:_SHOWN]
    )
    more = f"; and {len(found) - _SHOWN} more" if len(found) > _SHOWN else ""
    return f"{what} a secret ({shown}{more}). {remedy}"


def check_writes(session: Session, writes: Sequence[PlannedWrite]) -> str | None:
    """Why these writes are refused (a protected path, the state root, a secret in the
    added lines), or None."""
    policy = hook_policy(session)
    for w in writes:
        reason = _protected_reason(session, w.path, policy.protected)
        if reason is not None:
            return f"oms refused writing {path_text(w.path)}: {reason}"
    items = [ScanItem(_display(session, w.path), list(w.lines)) for w in writes if w.lines]
    if not items:
        return None
    report = _scan(items, policy)
    return _secret_reason(report.blocking, "oms refused this write: the new text holds")


def check_written(session: Session, paths: Sequence[str]) -> str | None:
    """After a write: why the files now on disk need fixing (a secret), or None."""
    items = []
    for path in dict.fromkeys(paths):
        text = _read_back(os.path.join(session.cwd, path))
        if text is not None:
            items.append(ScanItem.whole(_display(session, path), text))
    if not items:
        return None
    report = _scan(items, hook_policy(session))
    return _secret_reason(report.blocking, "oms: the file just written now holds")


def _read_back(path: str) -> str | None:
    found = _regular_file(path)
    return None if found is None else found[1].decode("utf-8", "replace")


def _regular_file(path: str) -> tuple[int, bytes] | None:
    """(size, its first READ_BACK_MAX bytes) of the regular file at `path`, opened without
    following a symlink; None for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None  # deleted, a symlink, unreadable: nothing oms can vouch for here
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        return st.st_size, os.read(fd, READ_BACK_MAX)
    finally:
        os.close(fd)


def check_read(session: Session, read: PlannedRead) -> str | None:
    """Why a Read, Grep or Glob call is refused: a glob singling out secret files, a path
    in the state root or named like a secret file (as written or where its links lead), a
    link out of the repository, a file too large to scan, or a secret in the file."""
    what = f"oms refused reading {path_text(read.path or read.glob)}"
    kind = glob_targets_secrets(read.glob) if read.glob else None
    if kind is not None:
        return f"{what}: the pattern {path_text(read.glob)} selects {kind}. {REMEDY}"
    if not read.path:
        return None
    for where in spellings(read.path, session.cwd):
        if session.state_root is not None and inside(where, session.state_root) is not None:
            return f"{what}: it is inside oms' state root (keys, approvals, evidence)"
        kind = secret_name(where)
        if kind is not None:
            return f"{what}: it is {kind}. {REMEDY}"
    return _content_reason(session, read.path, what) if read.content else None


def _content_reason(session: Session, path: str, what: str) -> str | None:
    absolute = os.path.normpath(os.path.join(session.cwd, path))
    real = os.path.realpath(absolute)
    tops = roots(session.top) if session.top else ()
    in_repo = any(inside(absolute, t) is not None for t in tops)
    if in_repo and not any(inside(real, t) is not None for t in tops):
        return f"{what}: it is a symbolic link that leads out of the repository"
    found = _regular_file(real)
    if found is None:
        return None  # missing, a directory: the tool answers for itself
    size, data = found
    if size > READ_BACK_MAX:
        return (f"{what}: it is {size / (1 << 20):.1f} MiB, over the {READ_BACK_MAX >> 20} MiB "
                "oms scans for secrets, so oms cannot vouch for it; ask the user for the part "
                "you need")  # fmt: skip
    item = ScanItem.whole(_display(session, path), data.decode("utf-8", "replace"))
    report = _scan([item], hook_policy(session))
    allow = ("If it is a false positive, only the repository owner can allow it, by its "
             "fingerprint in oms.toml [scanners] allow_fingerprints")  # fmt: skip
    return _secret_reason(report.blocking, f"{what}: it holds", f"{REMEDY}. {allow}")


def _scan(items: Sequence[ScanItem], policy: HookPolicy) -> ScanReport:
    from gatekeeper.scan.policy import scan_with_policy  # the scanners: only when scanning

    return scan_with_policy(items, policy.pin())


def check_command(session: Session, command: str) -> str | None:
    """Why a shell command is refused, or None (bash.py: a short table, best effort)."""
    reason = bash_refusal(command, session.state_root)
    return None if reason is None else f"oms refused this command: {reason}"
