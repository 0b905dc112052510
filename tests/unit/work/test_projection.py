"""work.db is a projection of the signed log: every `work.*` entry carries the rows its
transition set and the seq of the last committed entry before it; the fold of the committed
entries is compared with every row. A row edited, added or deleted behind the fence is
tampered, by its object; an entry whose transaction never committed is interrupted, and a
later entry's `after` skips it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.work import (
    Clock,
    Walk,
    dump,
    initialised_work,
    new_ticket,
    nonce,
    outcome,
    tamper_db,
)

from evidence import Draft
from gatekeeper.work import payloads as p
from gatekeeper.work.audit import MEMO_FILE, chain, consistency, doctor_check
from gatekeeper.work.db import WorkDb
from gatekeeper.work.fence import Work
from gatekeeper.work.rebuild import CannotRebuild, rebuild
from gatekeeper.work.runs.store import NewArtifact, Runs


class Crash(Exception):
    """Stands for the process dying between the append and the commit."""


@pytest.fixture
def failed(git_repo: Path, oms_home: Path) -> Iterator[Walk]:
    """A ticket whose verify FAILED: retryable, its verification finished FAILED."""
    with initialised_work(git_repo, Clock()) as w:
        walk = new_ticket(w).leased().running().ran().verifying()
        w.finish_verify(w.begin_verify(walk.id, nonce()), outcome("FAILED"))
        yield walk


def _vid(work: Work, ticket: str) -> str:
    (row,) = work.db.read("SELECT id FROM verifications WHERE ticket = ?", ticket)
    return str(row["id"])


def test_every_new_entry_carries_its_rows_and_the_last_committed_seq(failed: Walk) -> None:
    work = failed.work
    entries = work.store.entries(p.WORK_KINDS)
    seqs = [e.seq for e in entries]
    records = [p.KINDS_BY_KIND[e.kind].of(e) for e in entries]
    assert all(r.v == p.REPLAYABLE and r.changes is not None for r in records)
    assert [r.after for r in records] == [None, *seqs[:-1]]
    fin = records[-1]
    assert fin.changes is not None and fin.changes.removeprefix("sha256:") in entries[-1].blobs
    rows = p.ChangeSet.model_validate_json(work.store.blobs.get(fin.changes[7:])).rows
    ticket = next(r for r in rows if r.table == "tickets")
    assert ticket.key == (failed.id,) and ticket.row is not None
    assert (ticket.row["state"], ticket.row["version"]) == ("retryable", fin.version)
    assert {r.table for r in rows} >= {"tickets", "verifications", "leases", "attempts"}
    found = consistency(work)
    assert found.ok and found.tampered == () and found.legacy_rows == 0


# Each field of work state edited behind the fence: (SQL, the object it names).
TAMPERS = [
    ("UPDATE tickets SET state = 'completed', human_hold = 1 WHERE id = :t", "tickets {t}"),
    ("UPDATE verifications SET decision = 'READY_FOR_HUMAN' WHERE ticket = :t",
     "verifications {v}"),
    ("UPDATE tickets SET version = version + 1 WHERE id = :t", "tickets {t}"),
    ("UPDATE tickets SET attempts = 0 WHERE id = :t", "tickets {t}"),
    ("UPDATE tickets SET human_hold = 1 WHERE id = :t", "tickets {t}"),
    ("UPDATE attempts SET outcome = 'READY_FOR_HUMAN' WHERE ticket = :t", "attempts {t}/1"),
    ("UPDATE dispatches SET attempt = 2 WHERE ticket = :t", "dispatches {d}"),
    ("UPDATE leases SET state = 'active', expires = 4e9 WHERE ticket = :t", "leases {l}"),
    ("UPDATE goals SET state = 'done'", "goals {g}"),
    ("DELETE FROM attempts WHERE ticket = :t", "attempts {t}/1"),
    ("INSERT INTO goals (id, version, objective, stop_when, horizon, state, created, updated) "
     "VALUES ('g-forged', 1, 'o', 's', '12h', 'open', 'x', 'x')", "goals g-forged"),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "names"), TAMPERS)
def test_a_field_edited_in_work_db_is_tampered_and_names_its_object(
    failed: Walk, sql: str, names: str
) -> None:
    work = failed.work
    (d,) = work.db.read("SELECT id, lease FROM dispatches WHERE ticket = ?", failed.id)
    ids = {"t": failed.id, "v": _vid(work, failed.id), "d": d["id"], "l": d["lease"],
           "g": failed.ticket.goal}  # fmt: skip
    conn = sqlite3.connect(work.db.path)
    try:
        with conn:
            conn.execute(sql, {"t": failed.id})
    finally:
        conn.close()
    found = consistency(work)
    assert not found.ok and found.mismatches == ()
    assert [t.object for t in found.tampered] == [names.format(**ids)]
    extra = doctor_check(work.repo)
    assert extra is not None and extra.tampered and extra.section["ok"] is False
    assert extra.problems == (f"work.db is tampered: {found.tampered[0].problem}",)


def test_a_verify_finish_killed_before_its_commit_is_interrupted_and_skipped(
    git_repo: Path, oms_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repro: READY appended, the process gone before the commit; the rerun FAILED."""
    with initialised_work(git_repo, Clock()) as work:
        walk = new_ticket(work).leased().running().ran().verifying()
        v = work.begin_verify(walk.id, nonce())
        real = work.store.append

        def append_then_die(draft: Draft) -> object:
            real(draft)
            raise Crash

        with monkeypatch.context() as m, pytest.raises(Crash):
            m.setattr(work.store, "append", append_then_die)
            work.finish_verify(v, outcome("READY_FOR_HUMAN"))
        killed = work.store.head() - 1
        done = work.finish_verify(v, outcome("FAILED"))
        assert done.state == "retryable"
        entries = work.store.entries(p.WORK_KINDS)
        fin = p.VerifyFinished.of(entries[-1])
        assert fin.after == killed - 1 and killed not in chain(entries, {})
        assert entries[-1].seq in chain(entries, {entries[-1].seq: fin.nonce})
        found = consistency(work)
        assert found.ok and [c.seq for c in found.interrupted] == [killed]


def test_the_doctor_remembers_its_fold_and_refuses_a_forged_memo(failed: Walk) -> None:
    work = failed.work
    memo = work.db.path.parent / MEMO_FILE
    assert doctor_check(work.repo) is not None and memo.is_file()
    kept = json.loads(memo.read_text())
    assert json.loads(kept["body"])["seq"] == work.store.head() - 1
    # edit a row and forge the memo to agree with it: the signature fails, the fold is redone
    tamper_db(work, "UPDATE tickets SET state = 'completed' WHERE id = ?", failed.id)
    body = json.loads(kept["body"])
    body["rows"] = {k: "0" * 64 for k in body["rows"]}
    memo.write_text(json.dumps({"body": json.dumps(body), "sig": kept["sig"]}))
    extra = doctor_check(work.repo)
    assert extra is not None and extra.tampered
    assert [t["object"] for t in extra.section["tampered"]] == [f"tickets {failed.id}"]


def test_the_fold_goes_on_from_the_memo(failed: Walk) -> None:
    work = failed.work
    assert doctor_check(work.repo) is not None
    Walk(work, work.ticket(failed.id)).leased()  # one more transition after the memo
    extra = doctor_check(work.repo)
    assert extra is not None and not extra.tampered, extra.problems
    tamper_db(work, "UPDATE leases SET expires = 1 WHERE state = 'active'")
    extra = doctor_check(work.repo)
    assert extra is not None and extra.tampered


def _legacy_draft(self: Work, tx: Any) -> Draft:
    """What an oms before this change appended: the record alone (version 1)."""
    return Draft.of(tx.record, subject=p.subject(tx.subject), blobs=tx.blobs,
                    policy=self.loaded.digest)  # fmt: skip


def test_a_log_of_legacy_entries_audits_as_before(
    git_repo: Path, oms_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries written before this change (version 1, no change set) prove no rows: the
    rows they alone set are counted as legacy, not tampered; a later entry proves its own."""
    with initialised_work(git_repo, Clock()) as work:
        with monkeypatch.context() as m:
            m.setattr(Work, "_replayable", _legacy_draft)
            walk = new_ticket(work).leased().running().ran().verifying()
            work.finish_verify(work.begin_verify(walk.id, nonce()), outcome("FAILED"))
        assert all(p.KINDS_BY_KIND[e.kind].of(e).v == 1
                   for e in work.store.entries(p.WORK_KINDS))  # fmt: skip
        found = consistency(work)
        assert found.ok and found.tampered == () and found.legacy_rows > 0, found
        Walk(work, work.ticket(walk.id)).leased()  # the first version-2 entry
        assert consistency(work).ok
        tamper_db(work, "UPDATE tickets SET state = 'completed' WHERE id = ?", walk.id)
        assert [t.object for t in consistency(work).tampered] == [f"tickets {walk.id}"]


# -- rebuilt from the log ---------------------------------------------------------------------


def _projected(db_file: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table a rebuild restores exactly (nonces: only which nonces were used)."""
    rows = dump(db_file)
    rows["nonces"] = sorted((r[0],) for r in rows["nonces"])
    return rows


@pytest.mark.parametrize("how", ["tampered", "damaged", "lost"])
def test_work_db_is_rebuilt_from_the_log(failed: Walk, how: str) -> None:
    """A rebuild gives back every row; when work.db is gone, nothing confirms the tail entry,
    which is left out and named (fail closed)."""
    work = failed.work
    before_tail = _projected(work.db.path)
    Walk(work, work.ticket(failed.id)).leased()
    whole = _projected(work.db.path)
    tail = work.store.head() - 1
    work.db.close()
    path = work.db.path
    if how == "tampered":
        tamper_db(work, "UPDATE tickets SET state = 'completed' WHERE id = ?", failed.id)
    elif how == "damaged":
        path.write_bytes(b"not a database" * 100)
    else:
        path.unlink()
    done = rebuild(work.repo)
    got = _projected(path)
    assert got == (whole if how == "tampered" else before_tail)
    assert done.unconfirmed == (None if how == "tampered" else tail)
    assert (done.kept is None) == (how == "lost")
    work.db = WorkDb.open(work.repo.repo_id)
    found = consistency(work)
    assert found.ok and found.tampered == () and found.mismatches == ()
    assert [c.seq for c in found.interrupted] == ([] if how == "tampered" else [tail])


def test_a_log_of_legacy_entries_is_not_rebuilt(
    git_repo: Path, oms_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with initialised_work(git_repo, Clock()) as work:
        with monkeypatch.context() as m:
            m.setattr(Work, "_replayable", _legacy_draft)
            new_ticket(work)
        before = dump(work.db.path)
        with pytest.raises(CannotRebuild, match="written before they carried their rows"):
            rebuild(work.repo)
        assert dump(work.db.path) == before


def test_rows_that_name_their_own_entry_fold_and_rebuild(git_repo: Path, oms_home: Path) -> None:
    """A run step's artifacts and events carry the seq of the entry recording them, unknown
    until it is appended: the change set holds a placeholder, the fold and rebuild the seq."""
    with initialised_work(git_repo, Clock()) as work:
        runs = Runs(work)
        run = runs.create("orchestrate", "implement", "Add a feature", (), {}, step="start")
        plan = NewArtifact(kind="plan", data=b"p", summary="s")
        stepped = runs.step(run, step="plan", events=(("noted", {"n": 1}),), artifacts=(plan,))
        rows = work.db.read("SELECT seq FROM run_artifacts UNION ALL SELECT seq FROM run_events")
        assert [r["seq"] for r in rows] == [stepped.seq] * 2
        assert consistency(work).ok, consistency(work)
        Walk(work, new_ticket(work).ticket).leased()  # the tail is another entry
        whole = _projected(work.db.path)
        work.db.close()
        rebuild(work.repo)
        assert _projected(work.db.path) == whole
        work.db = WorkDb.open(work.repo.repo_id)
