"""`oms trust report --day YYYY-MM-DD`: a review of one closed UTC day's verdicts, per role.

Review only: it grants nothing, and says so (`"authority": "none"`). It is built only
from protected verdicts: a `work.verify.finish` entry counts when its `result_seq` names
a `result` entry of the gate bound to the same ticket, attempt, commit and decision,
written before it and asked for under the same lease, whose policy is the entry's own;
the executor's role and engine come from the `work.dispatch.start` entry of the same
dispatch, and a grade from a `grade` entry bound to the same verify. Only a committed
transition counts (`audit.chain`: a finish a later work entry skips, or the tail finish no
`transitions` row confirms, never happened), and one finish per verification (the last
committed). Anything else is listed as excluded, never counted. The log is audited first:
a broken chain is exit 3.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from evidence import Entry, EvidenceStore, TamperDetected, state_root
from evidence.audit import audit
from gatekeeper.errors import Tampered, UsageError
from gatekeeper.gates.result.payloads import ResultRecord
from gatekeeper.repo.git import open_repo
from gatekeeper.work import payloads as p
from gatekeeper.work.audit import chain
from gatekeeper.work.db import WorkDb, db_path
from gatekeeper.work.grade import GradeRecord

DAY_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
COUNTS = ("ready", "failed", "blocked", "parked", "grade_pass", "grade_fail", "grade_uncertain",
          "disagreements")  # fmt: skip
NEVER_COMMITTED = "its transition never committed (oms stopped between the append and the commit)"
_DECISION_COUNT = {"READY_FOR_HUMAN": "ready", "FAILED": "failed", "BLOCKED": "blocked"}


class NotBound(Exception):
    """A verify entry that does not bind to a protected verdict: excluded, with why."""


def closed_day(text: str, today: date | None = None) -> date:
    """A UTC day before today; UsageError for another spelling or an open day."""
    if not DAY_RE.match(text):
        raise UsageError(f"--day must be YYYY-MM-DD, not {text[:40]!r}")
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise UsageError(f"--day {text} is not a date") from None
    now = today or datetime.now(UTC).date()
    if day >= now:
        raise UsageError(f"{text} is not a closed UTC day yet (today is {now.isoformat()}); "
                         "a trust report covers closed days only")  # fmt: skip
    return day


@dataclass(frozen=True)
class Log:
    """The audited log, read once, by seq."""

    entries: Sequence[Entry]

    def at(self, seq: object, kind: str, before: int) -> Entry:
        if not isinstance(seq, int) or isinstance(seq, bool) or not 0 <= seq < before:
            raise NotBound(f"names no earlier {kind} entry ({seq!r})")
        entry = self.entries[seq]
        if entry.kind != kind:
            raise NotBound(f"seq {seq} is {entry.kind}, not {kind}")
        return entry

    def dispatch_start(self, dispatch: object, before: int) -> p.WorkRecord:
        for e in self.entries[:before]:
            if e.kind == p.DispatchStarted.KIND and e.data.get("id") == dispatch:
                return p.DispatchStarted.of(e)
        raise NotBound(f"no dispatch start for {dispatch!r}")


def _lease_named(entry: Entry, lease: str | None) -> bool:
    hexd = (lease or "").removeprefix("sha256:")
    return any(s.name == "oms-lease" and s.digest.get("sha256") == hexd for s in entry.subject)


def bound_verdict(log: Log, entry: Entry) -> dict[str, Any]:
    """The report's row for one `work.verify.finish` entry; NotBound when it is not a
    protected verdict (see the module's docstring)."""
    fin = p.VerifyFinished.of(entry)
    d = fin.detail
    res_entry = log.at(d.get("result_seq"), ResultRecord.KIND, entry.seq)
    res = ResultRecord.of(res_entry)
    if (res.ticket, res.attempt, res.candidate) != (fin.ticket, d.get("attempt"), d.get("commit")):
        raise NotBound(f"result {res_entry.seq} is about another ticket, attempt or commit")
    if res.decision.value != d.get("decision"):
        raise NotBound(f"result {res_entry.seq} decided {res.decision.value}, not the verify's")
    if res_entry.policy != res.policy_digest or not _lease_named(res_entry, fin.lease):
        raise NotBound(f"result {res_entry.seq} is not under the verify's lease and policy")
    start = log.dispatch_start(d.get("dispatch"), entry.seq)
    if (start.ticket, start.detail.get("attempt"), start.lease) != (fin.ticket, d.get("attempt"),
                                                                   fin.lease):  # fmt: skip
        raise NotBound(f"dispatch {d.get('dispatch')!r} is another ticket's, attempt or lease")
    grade = _grade(log, entry, fin)
    return {"ticket": fin.ticket, "attempt": d.get("attempt"), "lease": fin.lease,
            "commit": res.candidate, "decision": res.decision.value, "grade": grade,
            "role": start.detail.get("role"), "engine": start.detail.get("engine"),
            "policy_digest": res.policy_digest, "plan_digest": res.plan_digest,
            "result_seq": res_entry.seq, "verify_seq": entry.seq,
            "parked": fin.to_state == "parked"}  # fmt: skip


def _grade(log: Log, entry: Entry, fin: p.WorkRecord) -> str | None:
    d = fin.detail
    if d.get("grade_seq") is None:
        if d.get("grade") is not None:
            raise NotBound("a grade without its grade entry")
        return None
    rec = GradeRecord.of(log.at(d.get("grade_seq"), GradeRecord.KIND, entry.seq))
    if (rec.ticket, rec.attempt, rec.commit, rec.result_seq, rec.grade) != (
        fin.ticket, d.get("attempt"), d.get("commit"), d.get("result_seq"), d.get("grade")
    ):  # fmt: skip
        raise NotBound(f"grade {d.get('grade_seq')} is another verify's")
    return rec.grade


def tally(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per executor role: decisions, parked verifies, grades, and grades that disagree with
    the verdict (pass on a non-READY verdict, fail on a READY one)."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        c = out.setdefault(str(r["role"]), dict.fromkeys(COUNTS, 0))
        c[_DECISION_COUNT[r["decision"]]] += 1
        c["parked"] += int(r["parked"])
        if r["grade"] is not None:
            c[f"grade_{r['grade']}"] += 1
            ready = r["decision"] == "READY_FOR_HUMAN"
            c["disagreements"] += int((r["grade"] == "pass") != ready and r["grade"] != "uncertain")
    return out


def _held(repo_id: str) -> dict[int, str]:
    """work.db's `transitions` (seq -> nonce): what confirms the log's tail entry."""
    if not db_path(repo_id).is_file():
        return {}
    db = WorkDb.open(repo_id)
    try:
        return {
            int(r["seq"]): str(r["nonce"]) for r in db.read("SELECT seq, nonce FROM transitions")
        }
    finally:
        db.close()


def _finishes(log: Log, held: Mapping[int, str], excluded: list[dict[str, Any]]) -> list[Entry]:
    """The committed `work.verify.finish` entries, the last one per verification; the others
    go to `excluded` (legacy entries, which carry no chain, count as before)."""
    work = [e for e in log.entries if e.kind in p.WORK_KINDS]
    on = chain(work, held)
    last: dict[str, Entry] = {}
    for e in work:
        if e.kind != p.VerifyFinished.KIND:
            continue
        try:
            fin = p.VerifyFinished.of(e)
        except TamperDetected as exc:
            excluded.append({"verify_seq": e.seq, "reason": str(exc)[:300]})
            continue
        if fin.replayable and e.seq not in on:
            excluded.append({"verify_seq": e.seq, "reason": NEVER_COMMITTED})
            continue
        if fin.id in last:
            why = f"a later finish of verification {fin.id} replaces it"
            excluded.append({"verify_seq": last[fin.id].seq, "reason": why})
        last[fin.id] = e
    return sorted(last.values(), key=lambda e: e.seq)


def trust_report(repo_dir: Path, day_text: str, today: date | None = None) -> dict[str, Any]:
    """The report's JSON (see the module's docstring)."""
    day = closed_day(day_text, today)
    repo = open_repo(repo_dir)
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    checked = audit(store)
    if not checked.intact:
        raise Tampered(f"the evidence log does not verify (seq {checked.first_bad_seq}: "
                       f"{checked.reason}); no report from a broken chain")  # fmt: skip
    log = Log(store.entries())
    rows: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for entry in _finishes(log, _held(repo.repo_id), excluded):
        if not entry.time.startswith(day.isoformat()):
            continue
        try:
            rows.append(bound_verdict(log, entry))
        except (NotBound, TamperDetected) as exc:
            excluded.append({"verify_seq": entry.seq, "reason": str(exc)[:300]})
    excluded.sort(key=lambda x: x["verify_seq"])
    return {"day": day.isoformat(), "closed": True, "authority": "none",
            "verdicts": [{k: v for k, v in r.items() if k != "parked"} for r in rows],
            "by_role": tally(rows), "excluded": excluded}  # fmt: skip
