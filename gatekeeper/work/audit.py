"""The doctor's check that `work.db` and the evidence log agree (DESIGN.md "State": every
transition is also an evidence entry, written in the same critical section).

Each fenced transition appends one `work.*` entry and stores its seq, kind and nonce in
`transitions` before the transaction commits. So:
  - a `transitions` row whose seq is not in the log, or whose entry there has another kind,
    nonce or object, is a MISMATCH: the db or the log was changed behind the fence;
  - a `work.*` entry whose seq is not in `transitions` but whose nonce the db holds (in
    `nonces` or `transitions`) is a MISMATCH too: the row was deleted;
  - a `work.*` entry whose nonce the db does not hold is an INTERRUPTED transition: oms
    stopped between the append and the commit, so nothing changed in the db. The log keeps
    what was attempted; the doctor reports it (a warning, not "not ready").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from evidence import Entry, EvidenceError, EvidenceStore, state_root
from gatekeeper.gates.doctor import Extra
from gatekeeper.repo.git import Repo
from gatekeeper.work import payloads as p
from gatekeeper.work.db import WorkDb, WorkDbUnavailable, db_path
from gatekeeper.work.fence import Work

CHECK = "work"
REMEDY = "oms evidence audit --repo DIR, and compare the work.db of that repository with its log"
INTERRUPTED_WARNING = (
    "a transition was recorded in the evidence log but never committed to work.db (oms "
    "stopped in between): nothing changed; `oms ticket show` says where each ticket is"
)
_BY_KIND: dict[str, type[p.WorkRecord]] = {k.KIND: k for k in p.KINDS}


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Mismatch(_Frozen):
    seq: int
    problem: str


class Interrupted(_Frozen):
    seq: int
    kind: str
    nonce: str


class Consistency(_Frozen):
    transitions: int  # rows of `transitions`
    entries: int  # `work.*` entries in the log
    mismatches: tuple[Mismatch, ...]
    interrupted: tuple[Interrupted, ...]

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def to_json(self) -> dict[str, Any]:
        out = {"ok": self.ok, **self.model_dump(mode="json")}
        return {**out, "warning": INTERRUPTED_WARNING} if self.interrupted else out


def consistency(work: Work) -> Consistency:
    """Compare `work`'s `transitions` with its log's `work.*` entries."""
    return compare(work.db, work.store)


def compare(db: WorkDb, store: EvidenceStore) -> Consistency:
    rows = {int(r["seq"]): r for r in db.read("SELECT * FROM transitions")}
    held = {r["nonce"] for r in db.read("SELECT nonce FROM nonces")} | {
        r["nonce"] for r in rows.values()
    }
    head = store.head()
    bad: list[Mismatch] = []
    logged: dict[int, Entry] = {e.seq: e for e in store.entries(p.WORK_KINDS)}
    for seq in sorted(rows):
        row = rows[seq]
        entry = logged.get(seq) or (store.entry(seq) if 0 <= seq < head else None)
        if (problem := _row_problem(row, entry)) is not None:
            bad.append(Mismatch(seq=seq, problem=problem))
    cut: list[Interrupted] = []
    for seq, entry in sorted(logged.items()):
        if seq in rows:
            continue
        nonce = _nonce(entry)
        if nonce is not None and nonce not in held:
            cut.append(Interrupted(seq=seq, kind=entry.kind, nonce=nonce))
        else:
            why = "its nonce is in work.db" if nonce else "it does not fit its kind"
            bad.append(Mismatch(seq=seq, problem=f"seq {seq} ({entry.kind}) is in the log but "
                                f"not in transitions, and {why}"))  # fmt: skip
    return Consistency(transitions=len(rows), entries=len(logged),
                       mismatches=tuple(sorted(bad, key=lambda m: m.seq)),
                       interrupted=tuple(cut))  # fmt: skip


def _nonce(entry: Entry) -> str | None:
    try:
        return _BY_KIND[entry.kind].of(entry).nonce
    except EvidenceError:
        return None


def _row_problem(row: Any, entry: Entry | None) -> str | None:
    seq, kind = row["seq"], row["kind"]
    if entry is None:
        return f"seq {seq} ({kind}) is in transitions but missing from the log"
    if entry.kind != kind:
        return f"seq {seq} is {kind} in transitions but {entry.kind} in the log"
    try:
        rec = _BY_KIND[kind].of(entry)
    except (EvidenceError, KeyError):
        return f"seq {seq} ({kind}) in the log does not fit its kind"
    if rec.nonce != row["nonce"]:
        return f"seq {seq} ({kind}) has another nonce in the log than in transitions"
    if (rec.ticket or rec.goal or rec.id) != row["object"]:
        return f"seq {seq} ({kind}) names another object in the log than in transitions"
    return None


def doctor_check(repo: Repo, root: Path | None = None) -> Extra | None:
    """The doctor's `work` section: present only when the repository has a work.db.
    A mismatch is a problem (not ready); an interrupted transition a warning."""
    if not db_path(repo.repo_id, root).is_file():
        return None
    try:
        store = EvidenceStore.open(root or state_root(), repo.repo_id,
                                   common_dir=repo.common_dir, check_binding=False)  # fmt: skip
        db = WorkDb.open(repo.repo_id, root)
    except EvidenceError as exc:
        return _unusable(f"work.db cannot be checked against the log: {exc}")
    except WorkDbUnavailable as exc:
        return _unusable(f"work.db unusable: {exc.message}")
    try:
        found = compare(db, store)
    except EvidenceError as exc:
        return _unusable(f"work.db cannot be checked against the log: {exc}")
    finally:
        db.close()
    problems = tuple(f"work.db and the evidence log disagree: {m.problem}"
                     for m in found.mismatches)  # fmt: skip
    return Extra(name=CHECK, section=found.to_json(), problems=problems,
                 remedy=REMEDY if problems else None)  # fmt: skip


def _unusable(why: str) -> Extra:
    first = why.splitlines()[0] if why else "unknown"
    return Extra(name=CHECK, section={"ok": False, "error": first}, problems=(first,))
