"""The trusted mark: where on the default branch the policy and plan are read (DESIGN "State").

The mark is the newest commit, among those on the default branch (ancestors of its tip or
the tip itself), that a human trusted (`policy.trust`: at `oms init`, or with `oms policy
trust` at a terminal) or that the result gate judged READY_FOR_HUMAN. Commits after it,
even on the tip, were judged by no one: they are part of the next gate's range, never the
source of its policy. A log without any mark (set up before marks existed) trusts the tip
once, at its first run, and records that it did so ("first-run").

A small signed pointer under `$OMS_HOME/repos/<id>/` names the mark's entry for one tip, so
that a gate reads only the entries appended since; a pointer that is missing, unsigned,
for another tip, or names an entry that is not a mark on the branch is ignored and the
mark is found again from the log.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from cryptography.exceptions import InvalidSignature
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evidence import (
    Draft,
    Entry,
    EvidenceError,
    EvidenceStore,
    NotInitialised,
    Payload,
    TamperDetected,
    state_root,
)
from gatekeeper.errors import Blocked
from gatekeeper.repo.git import Repo, is_ancestor
from gatekeeper.repo.policy import read_policy_at
from gatekeeper.repo.refs import default_branch_ref
from policy import LoadedPolicy

POINTER_FILE = "trusted-mark.json"
MAX_POINTER_BYTES = 4096
POINTER_DOMAIN = b"oms trusted-mark pointer v1\n"
FIRST_RUN_NOTE = (
    "no trusted mark in the evidence log (set up before oms kept one): the default "
    "branch's tip at this first run is trusted; later commits are judged"
)
Sha = Annotated[str, Field(pattern=r"^[0-9a-f]{40}([0-9a-f]{24})?$")]
TrustedBy = Literal["init", "terminal", "first-run"]


class PolicyTrust(Payload):
    """`policy.trust`: the policy and plan may be read at `commit` of the default branch."""

    KIND: ClassVar[str] = "policy.trust"
    repo_id: str
    commit: Sha
    ref: Annotated[str, Field(max_length=1024)]
    by: TrustedBy
    note: Annotated[str, Field(max_length=4096)]


@dataclass(frozen=True)
class Mark:
    """The trusted mark on the default branch `ref` (tip `tip`), and the entry that made it:
    by "init", "terminal", "first-run", or "ready" (a READY_FOR_HUMAN verdict)."""

    ref: str
    tip: str
    commit: str
    seq: int
    by: str
    note: str = ""
    recorded: bool = False  # a first-run mark written by this call

    def to_json(self) -> dict[str, object]:
        return {"ref": self.ref, "commit": self.commit, "seq": self.seq, "by": self.by,
                "note": self.note, "tip": self.tip}  # fmt: skip


class VerdictSeen(BaseModel):
    """What the mark reads of a result gate's verdict (`result`): which commit of which
    repository, and the decision. A view, not the model: the transfer gate reads the mark
    too and stands apart from the result gate (tests pin the names to ResultRecord's)."""

    model_config = ConfigDict(defer_build=True, extra="ignore", frozen=True)
    KIND: ClassVar[str] = "result"
    READY: ClassVar[str] = "READY_FOR_HUMAN"
    repo_id: str
    candidate: Sha
    decision: str


@dataclass(frozen=True)
class _Marked:
    seq: int
    commit: str
    by: str
    note: str


def _marked(entry: Entry, repo_id: str) -> _Marked | None:
    """The commit an entry marks as trusted, if it is a mark of this repository."""
    if entry.kind == PolicyTrust.KIND:
        t = PolicyTrust.of(entry)
        return _Marked(entry.seq, t.commit, t.by, t.note) if t.repo_id == repo_id else None
    if entry.kind == VerdictSeen.KIND:
        r = _seen(entry)
        if r.decision == VerdictSeen.READY and r.repo_id == repo_id:
            return _Marked(entry.seq, r.candidate, "ready", f"verdict {entry.seq}")
    return None


def _seen(entry: Entry) -> VerdictSeen:
    try:
        return VerdictSeen.model_validate(entry.data)
    except ValidationError:
        raise TamperDetected(f"entry {entry.seq} (result) does not fit its model",
                             seq=entry.seq) from None  # fmt: skip


def _marks(store: EvidenceStore, repo_id: str, start: int = 0) -> list[_Marked]:
    found = (_marked(e, repo_id) for e in store.entries(_KINDS, start))
    return [m for m in found if m is not None]


_KINDS = (PolicyTrust.KIND, VerdictSeen.KIND)


def _newest(repo: Repo, tip: str, marks: Iterable[_Marked]) -> _Marked | None:
    """Among the marks on the branch (ancestors of `tip`), the one that descends from the
    others; of marks on one commit, or on two lines merged later, the latest entry."""
    best: _Marked | None = None
    on_branch: dict[str, bool] = {}
    for m in sorted(marks, key=lambda m: m.seq, reverse=True):
        if best is not None and (m.commit == best.commit
                                 or is_ancestor(repo, m.commit, best.commit)):  # fmt: skip
            continue
        if m.commit not in on_branch:
            on_branch[m.commit] = m.commit == tip or is_ancestor(repo, m.commit, tip)
        if on_branch[m.commit] and (best is None or is_ancestor(repo, best.commit, m.commit)):
            best = m
    return best


# -- the pointer ---------------------------------------------------------------------


def _pointer(store: EvidenceStore) -> Path:
    return store.dir.parent / POINTER_FILE


def _signed_body(tip: str, seq: int, scanned: int) -> bytes:
    # Its own prefix: a pointer's signature can never be read as a checkpoint's.
    doc = json.dumps({"tip": tip, "seq": seq, "scanned": scanned}, sort_keys=True)
    return POINTER_DOMAIN + doc.encode()


def _cached(store: EvidenceStore, repo: Repo, tip: str) -> tuple[_Marked, int] | None:
    """(mark, entries scanned) the pointer names for this tip, if every part checks out."""
    try:
        fd = os.open(_pointer(store), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            doc = json.loads(fh.read(MAX_POINTER_BYTES))
        seq, scanned = int(doc["seq"]), int(doc["scanned"])
        body = _signed_body(str(doc["tip"]), seq, scanned)
        store.key.public.verify(bytes.fromhex(str(doc["sig"])), body)
        if doc["tip"] != tip or not 0 <= seq < scanned <= store.head():
            return None
        mark = _marked(store.entry(seq), repo.repo_id)
        if mark is None or not (mark.commit == tip or is_ancestor(repo, mark.commit, tip)):
            return None
        return mark, scanned
    except (OSError, ValueError, KeyError, TypeError, InvalidSignature, EvidenceError):
        return None


def _remember(store: EvidenceStore, tip: str, seq: int, scanned: int) -> None:
    """Write the pointer atomically; one that cannot be written costs a read of the log."""
    path = _pointer(store)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        sig = store.key.private.sign(_signed_body(tip, seq, scanned)).hex()
        doc = {"tip": tip, "seq": seq, "scanned": scanned, "sig": sig}
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(json.dumps(doc).encode())
        os.replace(tmp, path)
    except (OSError, EvidenceError):
        return


# -- reading and moving the mark -------------------------------------------------------


def record_trust(store: EvidenceStore, repo: Repo, ref: str, commit: str, by: TrustedBy,
                 note: str) -> Mark:  # fmt: skip
    """A `policy.trust` entry for `commit` on `ref`: the mark, from now on."""
    payload = PolicyTrust(repo_id=repo.repo_id, commit=commit, ref=ref, by=by, note=note)
    subject = [{"name": f"git+file://{repo.top}", "digest": {"gitCommit": commit}}]
    entry = store.append(Draft.of(payload, subject=subject))
    _remember(store, commit, entry.seq, entry.seq + 1)
    return Mark(ref, commit, commit, entry.seq, by, note, recorded=True)


def find_mark(store: EvidenceStore, repo: Repo) -> Mark | None:
    """The trusted mark on the default branch, or None when the log has no mark on it."""
    ref, tip = default_branch_ref(repo)
    head = store.head()
    cached = _cached(store, repo, tip)
    if cached is not None:
        marks = [cached[0], *_marks(store, repo.repo_id, cached[1])]
    else:
        marks = _marks(store, repo.repo_id)
    best = _newest(repo, tip, marks)
    if best is None:
        if marks:
            raise Blocked(f"no trusted mark on the default branch {ref}: the commits oms trusted "
                          "are not on it; review it and run `oms policy trust`")  # fmt: skip
        return None
    if cached is None or cached[0].seq != best.seq or cached[1] != head:
        _remember(store, tip, best.seq, head)
    return Mark(ref, tip, best.commit, best.seq, best.by, best.note)


def trusted_mark(store: EvidenceStore, repo: Repo) -> Mark:
    """The mark the gates read the policy at; a log without any mark records the tip's as
    "first-run" (a repository set up before marks existed keeps working)."""
    found = find_mark(store, repo)
    if found is not None:
        return found
    ref, tip = default_branch_ref(repo)
    return record_trust(store, repo, ref, tip, "first-run", FIRST_RUN_NOTE)


def policy_commit(repo: Repo) -> str:
    """The commit the trusted policy is read at: the mark. In a repository without an
    evidence log, the default branch's tip: no gate runs there (each needs the log), and its
    first run records the mark."""
    try:
        store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    except NotInitialised:
        return default_branch_ref(repo)[1]
    return trusted_mark(store, repo).commit


def base_policy(repo: Repo) -> tuple[str, LoadedPolicy]:
    """(policy commit, its policy): the default branch's trusted mark, as for every gate."""
    commit = policy_commit(repo)
    return commit, read_policy_at(repo, commit)
