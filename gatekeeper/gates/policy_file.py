"""`oms policy init|check|show`: write a starter `oms.toml`, validate a file before it is
committed, and show the policy the gates will read.

`init` and `check` work on the worktree (the user's own file, not yet trusted); `show`
reads, as every gate does, from a commit (the default branch's tip unless told).
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from evidence import EvidenceStore, NotInitialised, state_root
from gatekeeper.errors import OmsError, UsageError
from gatekeeper.gates.mark import Mark, record_trust, trusted_mark
from gatekeeper.gates.result.inventory import report_problem
from gatekeeper.gates.toolchain.inputs import input_problems
from gatekeeper.gates.toolchain.lock import lock as make_lock
from gatekeeper.repo.git import Repo, git, open_repo
from gatekeeper.repo.policy import read_committed_file, read_policy_at
from gatekeeper.repo.refs import default_branch_ref, resolve_commit
from gatekeeper.text import sanitize
from policy import MAX_POLICY_BYTES, POLICY_FILE, Policy, PolicyError, parse_policy, policy_json
from policy.issues import PolicyIssue, check_policy_text
from policy.templates import TEMPLATES, Project, TemplateName, starter_text

_SNIFF_BYTES = 1 << 20  # enough of a requirements file to see whether it pins hashes
LOCK = "requirements.lock"  # what a python-venv starter names when there is no lock yet
PYTHON = "/usr/bin/python3"  # the python-venv starter's interpreter (the model's default)


class _Result(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class PolicyWritten(_Result):
    path: str
    template: str
    toolchain_kind: str | None
    lock: str | None
    replaced: bool
    digest: str
    next_steps: tuple[str, ...]


class CheckedIssue(_Result):
    loc: str
    message: str
    suggestion: str | None
    line: str  # FILE:key.path: message (did you mean …?)


class PolicyChecked(_Result):
    file: str
    valid: bool
    errors: tuple[CheckedIssue, ...]
    digest: str | None


class PolicyShown(_Result):
    origin: str
    ref: str
    commit: str
    digest: str
    policy: dict[str, Any]
    # The default branch's trusted mark (ref, commit, seq, by, note, tip); None without an
    # evidence log (`oms init` records one).
    mark: dict[str, Any] | None = None


class PolicyTrusted(_Result):
    """`oms policy trust`: the mark moved from `previous` to `commit` (seq None: the tip
    was the mark already, nothing was recorded)."""

    ref: str
    commit: str
    previous: str
    seq: int | None
    commits: int
    changed: tuple[str, ...]
    digest: str


# -- init --------------------------------------------------------------------------------


def _regular(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _hash_pinned(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return b"--hash=sha256:" in f.read(_SNIFF_BYTES)
    except OSError:
        return False


def _python_lock(top: Path) -> str | None:
    names = ["requirements.lock", *sorted(p.name for p in top.glob("requirements*.txt"))]
    return next((n for n in names if _regular(top / n) and _hash_pinned(top / n)), None)


def _npm_test(top: Path) -> bool:
    """package.json names its own test script (not npm init's placeholder that fails)."""
    path = top / "package.json"
    try:
        script = json.loads(path.read_bytes()[:_SNIFF_BYTES])["scripts"]["test"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return _regular(path) and isinstance(script, str) and "no test specified" not in script


def detect(top: Path, template: TemplateName | None) -> Project:
    """The project in the worktree `top`: the named template, or the one its files show."""
    pyproject = _regular(top / "pyproject.toml")
    uv = _regular(top / "uv.lock") and pyproject
    py_lock = _python_lock(top)
    node = _regular(top / "package-lock.json")
    if template is None:
        seen: tuple[tuple[TemplateName, bool], ...] = (
            ("python", py_lock is not None or pyproject), ("node", node),
            ("go", _regular(top / "go.mod")),
        )  # fmt: skip
        found = [t for t, here in seen if here]
        if not found:
            raise UsageError("no pyproject.toml, requirements.lock (hash-pinned), "
                             "package-lock.json or go.mod here; pass --template "
                             f"{'|'.join(TEMPLATES)}")  # fmt: skip
        template = found[0]
    if template == "python":
        use_uv = uv and py_lock is None
        return Project("python", "uv.lock" if use_uv else py_lock, uv=use_uv)
    if template == "node":
        return Project("node", "package-lock.json" if node else None, npm_test=_npm_test(top))
    return Project("go")


def write_regular_file(path: Path, data: bytes, force: bool) -> bool:
    """Write `path` (never through a symlink); True when a file was replaced."""
    if path.is_symlink():
        raise UsageError(f"{path} is a symlink; oms never writes through one")
    exists = os.path.lexists(path)
    if exists and not force:
        raise UsageError(f"{path} exists; pass --force to replace it")
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        if not force:
            os.link(tmp, path)  # fails if the name appeared meanwhile: nothing replaced
        else:
            os.replace(tmp, path)
    except FileExistsError:
        raise UsageError(f"{path} exists; pass --force to replace it") from None
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return exists


@dataclass(frozen=True)
class Starter:
    """A starter policy for the project in the worktree, checked to parse."""

    project: Project
    text: str
    digest: str

    @property
    def toolchain_kind(self) -> str | None:
        kinds = {"python": "uv" if self.project.uv else "python-venv", "node": "node-npm"}
        return kinds.get(self.project.template)


def starter(top: Path, template: TemplateName | None) -> Starter:
    project = detect(top, template)
    text = starter_text(project)
    loaded = parse_policy(text.encode(), POLICY_FILE)  # a starter that fails is a bug
    return Starter(project, text, loaded.digest)


def _lock_needed(top: Path, s: Starter) -> str | None:
    """The lock a python-venv starter names that the worktree does not have yet."""
    if s.toolchain_kind != "python-venv" or _regular(top / (s.project.lock or LOCK)):
        return None
    return s.project.lock or LOCK


def next_steps(top: Path, s: Starter) -> tuple[str, ...]:
    path = top / POLICY_FILE
    lock = _lock_needed(top, s)
    make_lock = (f"oms toolchain lock   # write {lock} from pyproject.toml as committed on "
                 "the default branch",) if lock else ()  # fmt: skip
    prepare = ("oms toolchain prepare   # build the toolchains it names"
               if s.project.template != "go" else "oms policy check")  # fmt: skip
    return (*make_lock,
            f"review {path}, then commit it on the default branch (the gates read it there)",
            "oms policy trust   # at a terminal: shows the policy's diff; yes moves the "
            "trusted mark to it", prepare, "oms process-result --candidate BRANCH")  # fmt: skip


def write_starter(top: Path, s: Starter, force: bool) -> PolicyWritten:
    replaced = write_regular_file(top / POLICY_FILE, s.text.encode(), force)
    return PolicyWritten(path=str(top / POLICY_FILE), template=s.project.template,
                         toolchain_kind=s.toolchain_kind, lock=s.project.lock,
                         replaced=replaced, digest=s.digest,
                         next_steps=next_steps(top, s))  # fmt: skip


def init_policy(repo_dir: Path, template: TemplateName | None, force: bool) -> PolicyWritten:
    top = open_repo(repo_dir).top
    return write_starter(top, starter(top, template), force)


# -- the starter `oms init` offers ---------------------------------------------------------

OfferState = Literal["on_default_branch", "in_worktree", "undetected", "offered"]


@dataclass(frozen=True)
class Offer:
    """Whether `oms init` offers a starter: only when the default branch has no policy
    and the worktree none either (a file there is the user's, not oms' to replace)."""

    state: OfferState
    top: Path
    branch: str | None  # the default branch's full ref, None when there is none yet
    starter: Starter | None = None
    reason: str | None = None  # why nothing was detected

    @property
    def lock_needed(self) -> str | None:
        return _lock_needed(self.top, self.starter) if self.starter else None


def _committed(repo: Repo, commit: str) -> bool:
    """An oms.toml at `commit`, even one the gates refuse (`oms doctor` says why)."""
    try:
        return read_committed_file(repo, commit, POLICY_FILE) is not None
    except PolicyError:
        return True


def offer_starter(repo_dir: Path) -> Offer:
    repo = open_repo(repo_dir)
    try:
        branch, commit = default_branch_ref(repo)
    except UsageError:
        branch, commit = None, None
    if commit is not None and _committed(repo, commit):
        return Offer("on_default_branch", repo.top, branch)
    if os.path.lexists(repo.top / POLICY_FILE):
        return Offer("in_worktree", repo.top, branch)
    try:
        return Offer("offered", repo.top, branch, starter(repo.top, None))
    except UsageError as exc:  # detection found nothing: init goes on without a policy
        return Offer("undetected", repo.top, branch, reason=str(exc))


class StarterAccepted(_Result):
    """`oms init`'s policy section: what was written (a lock too when one was needed)."""

    state: OfferState | Literal["written", "declined", "not_asked"]
    path: str | None = None
    template: str | None = None
    toolchain_kind: str | None = None
    lock: str | None = None
    lock_written: bool = False
    lock_error: str | None = None
    digest: str | None = None


def accept_starter(offer: Offer, progress: Callable[[str], None]) -> StarterAccepted:
    """Write the offered starter, and the hash-pinned lock it names when the worktree has
    none (from the default branch's pyproject). A lock that cannot be made is said, never
    a failure: the user can run `oms toolchain lock` once pyproject.toml is committed."""
    assert offer.starter is not None  # nosec B101 -- only an offered starter is accepted
    written = write_starter(offer.top, offer.starter, force=False)
    lock, error = offer.lock_needed, None
    if lock is not None:
        try:
            make_lock(offer.top, lock, (), PYTHON, progress)
        except OmsError as exc:
            error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return StarterAccepted(state="written", path=written.path, template=written.template,
                           toolchain_kind=written.toolchain_kind, lock=lock or written.lock,
                           lock_written=lock is not None and error is None, lock_error=error,
                           digest=written.digest)  # fmt: skip


def not_accepted(offer: Offer, asked: bool) -> StarterAccepted:
    """The policy section when nothing was written: what was there, or what was offered."""
    if offer.starter is None:
        return StarterAccepted(state=offer.state, path=str(offer.top / POLICY_FILE))
    s = offer.starter
    return StarterAccepted(state="declined" if asked else "not_asked", template=s.project.template,
                           toolchain_kind=s.toolchain_kind, lock=s.project.lock or None,
                           digest=s.digest)  # fmt: skip


# -- check ------------------------------------------------------------------------------


def read_regular_file(path: Path, follow: bool) -> bytes:
    """At most the policy size limit (and one byte more) of a regular file; without
    `follow`, never through a symlink. A FIFO or device is refused, never waited on."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise UsageError(f"no {path}; write a starter with `oms policy init`") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise UsageError(f"{path} is not a regular file")
        return f.read(MAX_POLICY_BYTES + 1)


_SYMLINK = PolicyIssue("", "is a symlink; the gates refuse a policy that is not a regular file")


def check_policy(file: Path | None, repo_dir: Path) -> PolicyChecked:
    """Every issue of `file` (default: the worktree's oms.toml, never read through a
    symlink: the worktree is the agent's ground, and a link could point anywhere), and of
    its toolchains' inputs: a lock missing, uncommitted or that cannot be prepared."""
    path = file if file is not None else open_repo(repo_dir).top / POLICY_FILE
    origin = str(file) if file is not None else POLICY_FILE
    issues = [_SYMLINK] if path.is_symlink() else []
    digest = None
    if file is not None or not issues:  # a FILE named on the command line is the user's
        report = check_policy_text(read_regular_file(path, follow=file is not None), origin)
        issues += report.issues
        digest = report.loaded.digest if report.loaded is not None else None
        if report.loaded is not None:
            issues += _report_issues(report.loaded.policy)
            issues += _toolchain_issues(repo_dir, report.loaded.policy)
    return PolicyChecked(
        file=str(path), valid=not issues,
        errors=tuple(CheckedIssue(**i.to_json(), line=i.line(origin)) for i in issues),
        digest=digest if not issues else None,
    )  # fmt: skip


def _report_issues(policy: Policy) -> list[PolicyIssue]:
    """A check whose `report` its `cmd` cannot give (the gate would BLOCK on it)."""
    return [PolicyIssue(f"checks[{i}].report", problem)
            for i, c in enumerate(policy.checks)
            if c.report and (problem := report_problem(c.report, c.cmd))]  # fmt: skip


def _toolchain_issues(repo_dir: Path, policy: Policy) -> list[PolicyIssue]:
    """What `oms toolchain prepare` would refuse once this policy is on the default branch
    (nothing to say outside a repository: a FILE checked on its own)."""
    if not policy.toolchains:
        return []
    try:
        repo = open_repo(repo_dir)
    except UsageError:
        return []
    try:
        branch, commit = default_branch_ref(repo)
    except UsageError:
        branch, commit = "the default branch", None
    found = input_problems(repo, policy, branch, commit, worktree=True)
    return [PolicyIssue(f"toolchains[{p.index}].lock", p.message) for p in found]


# -- show -------------------------------------------------------------------------------


def _store_mark(repo: Repo) -> tuple[EvidenceStore, Mark] | None:
    try:
        store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    except NotInitialised:
        return None
    return store, trusted_mark(store, repo)


def show_policy(repo_dir: Path, ref: str | None) -> PolicyShown:
    """The effective policy (defaults filled) at `ref`, else at the default branch's trusted
    mark (at its tip only when there is no evidence log, hence no mark, yet)."""
    repo = open_repo(repo_dir)
    found = _store_mark(repo)
    mark = None if found is None else found[1]
    if ref is not None:
        name, commit = ref, resolve_commit(repo, ref)
    elif mark is not None:
        name, commit = mark.ref, mark.commit
    else:
        name, commit = default_branch_ref(repo)
    loaded = read_policy_at(repo, commit)
    return PolicyShown(origin=loaded.origin, ref=name, commit=commit, digest=loaded.digest,
                       policy=policy_json(loaded.policy),
                       mark=None if mark is None else mark.to_json())  # fmt: skip


# -- trust ------------------------------------------------------------------------------

TRUST_QUESTION = b"Trust the default branch's tip for the policy and plan? Type 'yes': "
TRUST_HEADER = "oms: the default branch's tip asks to be trusted for the policy and plan"


def _trusted_paths(repo: Repo, *commits: str) -> list[str]:
    """oms.toml and the lock files the toolchains name, at either commit."""
    locks = {t.lock for c in commits for t in read_policy_at(repo, c).policy.toolchains}
    return [POLICY_FILE, *sorted(locks - {POLICY_FILE})]


def trust_prompt(mark: Mark, count: int, diff: str) -> list[str]:
    lines = [
        f"default branch {mark.ref}: trusted mark {mark.commit} ({mark.by}, entry {mark.seq})",
        f"tip {mark.tip}: {count} commit(s) after the mark, judged by no one",
        "",
        "What changes for the gates (oms.toml and the lock files it names):",
        "",
    ]
    shown = diff.splitlines() or ["(no change to oms.toml or its lock files)"]
    return [sanitize(x) for x in [*lines, *shown, "",
            "From now on the gates read the policy and plan at the tip."]]  # fmt: skip


def trust_policy(repo_dir: Path, ask: Callable[[list[str], bytes], Any]) -> PolicyTrusted:
    """Show the policy's diff from the trusted mark to the default branch's tip at the
    terminal (`ask`) and, on a human's yes, record a `policy.trust` entry at the tip."""
    repo = open_repo(repo_dir)
    found = _store_mark(repo)
    if found is None:
        raise NotInitialised("no evidence log for this repository; run `oms init`")
    store, mark = found
    loaded = read_policy_at(repo, mark.tip)  # a tip whose policy fails is refused, not trusted
    if mark.commit == mark.tip:
        return PolicyTrusted(ref=mark.ref, commit=mark.tip, previous=mark.commit, seq=None,
                             commits=0, changed=(), digest=loaded.digest)  # fmt: skip
    paths = _trusted_paths(repo, mark.commit, mark.tip)
    diff = git(repo, "diff", "--no-color", "--no-ext-diff", "--no-textconv", mark.commit,
               mark.tip, "--", *paths).decode("utf-8", "replace")  # fmt: skip
    names = git(repo, "diff", "--name-only", "-z", mark.commit, mark.tip, "--", *paths)
    count = int(git(repo, "rev-list", "--count", f"{mark.commit}..{mark.tip}"))
    who = ask(trust_prompt(mark, count, diff), TRUST_QUESTION)  # Blocked without a yes
    note = f"trusted at a terminal by {who.name} (uid {who.uid}) after its policy diff"
    new = record_trust(store, repo, mark.ref, mark.tip, "terminal", note)
    return PolicyTrusted(ref=mark.ref, commit=new.commit, previous=mark.commit, seq=new.seq,
                         commits=count, digest=loaded.digest,
                         changed=tuple(n.decode("utf-8", "replace")
                                       for n in names.split(b"\0") if n))  # fmt: skip
