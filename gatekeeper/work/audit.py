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

And work.db is a projection of the log (payloads.py, version 2): the committed entries,
found by their `after` chain, are folded (each one's change set replayed, in seq order) and
every row of work.db is compared with the fold. A row the fold holds otherwise, a row the
fold does not hold, or a row the fold holds that work.db lacks is TAMPERED, by its object.
A log that also holds legacy (version-1) entries proves only the rows a version-2 entry set
since: the others are counted as `legacy` and audited as before. The doctor folds from the
last committed entry it verified, remembered (signed) in `work-fold.json`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature
from pydantic import BaseModel, ConfigDict

from evidence import Entry, EvidenceError, EvidenceStore, state_root
from evidence.canonical import line_hash
from evidence.state import atomic_write
from gatekeeper.gates.doctor import Extra
from gatekeeper.repo.git import Repo
from gatekeeper.work import payloads as p
from gatekeeper.work.db import WorkDb, WorkDbUnavailable, db_path
from gatekeeper.work.fence import Work

CHECK = "work"
REMEDY = (
    "oms evidence audit --repo DIR; then rebuild work.db from the log: "
    "oms reconcile work --repo DIR"
)
INTERRUPTED_WARNING = (
    "a transition was recorded in the evidence log but never committed to work.db (oms "
    "stopped in between): nothing changed; `oms ticket show` says where each ticket is"
)
MEMO_FILE = "work-fold.json"  # the fold at the last committed entry the doctor verified


class _Frozen(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)


class Mismatch(_Frozen):
    seq: int
    problem: str


class Interrupted(_Frozen):
    seq: int
    kind: str
    nonce: str


class Tamper(_Frozen):
    object: str  # "<table> <key>", e.g. "tickets t-0123456789ab"
    problem: str


class Consistency(_Frozen):
    transitions: int  # rows of `transitions`
    entries: int  # `work.*` entries in the log
    mismatches: tuple[Mismatch, ...]
    interrupted: tuple[Interrupted, ...]
    tampered: tuple[Tamper, ...] = ()
    legacy_rows: int = 0  # rows no version-2 entry set (a log begun before this check)

    @property
    def ok(self) -> bool:
        return not self.mismatches and not self.tampered

    def to_json(self) -> dict[str, Any]:
        out = {"ok": self.ok, **self.model_dump(mode="json")}
        return {**out, "warning": INTERRUPTED_WARNING} if self.interrupted else out


def consistency(work: Work, memo: Path | None = None) -> Consistency:
    """Compare `work`'s `transitions` with its log's `work.*` entries, and its rows with
    the fold of the committed entries."""
    return compare(work.db, work.store, memo)


def compare(db: WorkDb, store: EvidenceStore, memo: Path | None = None) -> Consistency:
    rows = {int(r["seq"]): r for r in db.read("SELECT * FROM transitions")}
    entries = store.entries(p.WORK_KINDS)
    held = {seq: str(r["nonce"]) for seq, r in rows.items()}
    found = _index(db, store, rows, {e.seq: e for e in entries}, chain(entries, held))
    tampered, legacy = differences(db, replay(store, committed(entries, held), memo))
    return found.model_copy(update={"tampered": tampered, "legacy_rows": legacy})


def _index(db: WorkDb, store: EvidenceStore, rows: Mapping[int, Any], logged: Mapping[int, Entry],
           on_chain: frozenset[int]) -> Consistency:  # fmt: skip
    """`transitions` against the entries: mismatches, and interrupted transitions."""
    held = {r["nonce"] for r in db.read("SELECT nonce FROM nonces")} | {
        r["nonce"] for r in rows.values()
    }
    head = store.head()
    bad: list[Mismatch] = []
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
        if seq in on_chain:  # a later entry names it as committed
            why = "is in the log but not in transitions, and the log's chain says it committed"
            bad.append(Mismatch(seq=seq, problem=f"seq {seq} ({entry.kind}) {why}"))
        elif nonce is not None and nonce not in held:
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
        return p.KINDS_BY_KIND[entry.kind].of(entry).nonce
    except EvidenceError:
        return None


def _row_problem(row: Any, entry: Entry | None) -> str | None:
    seq, kind = row["seq"], row["kind"]
    if entry is None:
        return f"seq {seq} ({kind}) is in transitions but missing from the log"
    if entry.kind != kind:
        return f"seq {seq} is {kind} in transitions but {entry.kind} in the log"
    try:
        rec = p.KINDS_BY_KIND[kind].of(entry)
    except (EvidenceError, KeyError):
        return f"seq {seq} ({kind}) in the log does not fit its kind"
    if rec.nonce != row["nonce"]:
        return f"seq {seq} ({kind}) has another nonce in the log than in transitions"
    if (rec.ticket or rec.goal or rec.id) != row["object"]:
        return f"seq {seq} ({kind}) names another object in the log than in transitions"
    return None


# -- the fold: work.db replayed from the committed entries ----------------------------------


def _record(entry: Entry) -> p.WorkRecord | None:
    try:
        return p.KINDS_BY_KIND[entry.kind].of(entry)
    except (EvidenceError, KeyError):
        return None


def chain(entries: Sequence[Entry], held: Mapping[int, str]) -> frozenset[int]:
    """The seqs of the version-2 entries that committed: the `after` chain from the tail
    entry when its `transitions` row (in `held`, seq -> nonce) confirms it, else from the
    tail's `after`. An entry the chain skips never committed."""
    records = {e.seq: r for e in entries if (r := _record(e)) is not None and r.replayable}
    if not records:
        return frozenset()
    tail = max(records)
    at = tail if held.get(tail) == records[tail].nonce else records[tail].after
    found: set[int] = set()
    while at is not None and at in records and at not in found:
        found.add(at)
        nxt = records[at].after
        at = nxt if nxt is None or nxt < at else None
    return frozenset(found)


def committed(entries: Sequence[Entry], held: Mapping[int, str]) -> tuple[Entry, ...]:
    """The `work.*` entries whose transaction committed, in seq order: version 2 by the
    chain, legacy ones by their `transitions` row (as before)."""
    on = chain(entries, held)
    return tuple(e for e in sorted(entries, key=lambda e: e.seq)
                 if e.seq in on or (_legacy(e) and e.seq in held))  # fmt: skip


def _legacy(entry: Entry) -> bool:
    rec = _record(entry)
    return rec is None or not rec.replayable


@dataclass(frozen=True)
class Fold:
    """work.db as the committed entries up to `seq` set it: object -> the row's digest."""

    seq: int | None = None
    rows: Mapping[str, str] = field(default_factory=dict)
    legacy: bool = False  # a committed legacy entry: rows it alone set are not proven


def _object(table: str, key: Sequence[Any]) -> str:
    return f"{table} " + "/".join(str(k) for k in key)


def _digest(row: Mapping[str, Any]) -> str:
    return hashlib.sha256(rfc8785.dumps(dict(row))).hexdigest()


def replay(store: EvidenceStore, entries: Sequence[Entry], memo: Path | None = None) -> Fold:
    """Fold `entries` (committed, in seq order) from the remembered fold when it is still one
    of them, else from nothing; remember the result when `memo` is given."""
    start = _recall(memo, store, {e.seq for e in entries}) if memo else None
    fold = start or Fold()
    rows, legacy = dict(fold.rows), fold.legacy
    for entry in entries:
        if fold.seq is not None and entry.seq <= fold.seq:
            continue
        rec = _record(entry)
        if rec is None or not rec.replayable or rec.changes is None:
            legacy = True
            continue
        data = store.blobs.get(rec.changes.removeprefix("sha256:"))
        for r in p.ChangeSet.model_validate_json(data).rows:
            name = _object(r.table, r.key)
            if r.row is None:
                rows.pop(name, None)
                continue
            seq = entry.seq if r.row.get("seq") == p.PENDING else r.row.get("seq")
            rows[name] = _digest({**r.row, **({"seq": seq} if "seq" in r.row else {})})
    last = entries[-1].seq if entries else fold.seq
    out = Fold(seq=last, rows=rows, legacy=legacy)
    if memo is not None and out != start and last is not None:
        _remember(memo, store, out)
    return out


def differences(db: WorkDb, fold: Fold) -> tuple[tuple[Tamper, ...], int]:
    """Each row of work.db against the fold: (what is tampered, how many rows are legacy)."""
    bad: list[Tamper] = []
    seen: set[str] = set()
    legacy = 0
    for table, pk in db.keys.items():
        for row in db.read(f"SELECT * FROM {table}"):  # noqa: S608 # nosec B608 -- names from sqlite_master
            name = _object(table, [row[c] for c in pk])
            seen.add(name)
            want = fold.rows.get(name)
            if want is None and fold.legacy:
                legacy += 1
            elif want is None:
                bad.append(Tamper(object=name, problem=f"{name} is in work.db but no committed "
                                  "entry of the log set it"))  # fmt: skip
            elif want != _digest({k: row[k] for k in row.keys()}):
                bad.append(Tamper(object=name, problem=f"{name} in work.db differs from what "
                                  "the log's committed entries set"))  # fmt: skip
    bad += [Tamper(object=n, problem=f"{n} was set by the log but is missing from work.db")
            for n in sorted(set(fold.rows) - seen)]  # fmt: skip
    return tuple(bad), legacy


def _memo_body(fold: Fold, store: EvidenceStore) -> bytes:
    assert fold.seq is not None  # only a fold of some entry is remembered
    return bytes(rfc8785.dumps({"v": 1, "seq": fold.seq, "line": line_hash(store.line(fold.seq)),
                                "legacy": fold.legacy, "rows": dict(fold.rows)}))  # fmt: skip


def _remember(memo: Path, store: EvidenceStore, fold: Fold) -> None:
    """Signed with the log's key, so that a memo edited beside an edited work.db is refused
    (the fold then starts from nothing); without the key, nothing is remembered."""
    try:
        body = _memo_body(fold, store)
        sig = store.key.private.sign(body).hex()
        atomic_write(memo, json.dumps({"body": body.decode(), "sig": sig}).encode(), mode=0o600)
    except (EvidenceError, OSError):
        return


def _recall(memo: Path, store: EvidenceStore, seqs: set[int]) -> Fold | None:
    try:
        doc = json.loads(memo.read_bytes())
        body = str(doc["body"]).encode()
        store.key.public.verify(bytes.fromhex(doc["sig"]), body)
        got = json.loads(body)
        fold = Fold(seq=int(got["seq"]), rows=dict(got["rows"]), legacy=bool(got["legacy"]))
        ok = fold.seq in seqs and got["line"] == line_hash(store.line(int(got["seq"])))
    except (OSError, ValueError, KeyError, TypeError, InvalidSignature, EvidenceError):
        return None
    return fold if ok else None


def doctor_check(repo: Repo, root: Path | None = None) -> Extra | None:
    """The doctor's `work` section: present only when the repository has a work.db.
    A mismatch or a tampered row is a problem (not ready, exit 3); an interrupted transition
    a warning."""
    path = db_path(repo.repo_id, root)
    if not path.is_file():
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
        found = compare(db, store, path.parent / MEMO_FILE)
    except EvidenceError as exc:
        return _unusable(f"work.db cannot be checked against the log: {exc}")
    finally:
        db.close()
    problems = tuple(f"work.db and the evidence log disagree: {m.problem}"
                     for m in found.mismatches)  # fmt: skip
    problems += tuple(f"work.db is tampered: {t.problem}" for t in found.tampered)
    return Extra(name=CHECK, section=found.to_json(), problems=problems,
                 remedy=REMEDY if problems else None, tampered=bool(problems))  # fmt: skip


def _unusable(why: str) -> Extra:
    first = why.splitlines()[0] if why else "unknown"
    return Extra(name=CHECK, section={"ok": False, "error": first}, problems=(first,))
