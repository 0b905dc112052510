"""`consistency()`: work.db's `transitions` against the log's `work.*` entries. A row changed
or deleted behind the fence is a mismatch named by its seq; an entry appended by a transition
that never committed (oms stopped in between) is an interrupted transition, and nothing else.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.work import (
    Clock,
    Walk,
    facts,
    initialised_work,
    new_ticket,
    nonce,
    snapshot,
    tamper_db,
)

from evidence import Draft
from gatekeeper.gates.records import init
from gatekeeper.repo.git import open_repo
from gatekeeper.work import payloads as p
from gatekeeper.work.audit import consistency, doctor_check
from gatekeeper.work.fence import Work


class Crash(Exception):
    """Stands for the process dying between the append and the commit."""


@pytest.fixture
def walk(git_repo: Path, oms_home: Path) -> Iterator[Walk]:
    """A ticket running under its lease: four transitions (goal, ticket, lease, dispatch)."""
    with initialised_work(git_repo, Clock()) as w:
        yield new_ticket(w).leased().running()


@pytest.fixture
def work(walk: Walk) -> Work:
    return walk.work


def test_an_untouched_db_and_log_agree(work: Work) -> None:
    found = consistency(work)
    assert found.ok and found.mismatches == () and found.interrupted == ()
    assert found.transitions == found.entries == 4  # goal, ticket, lease, dispatch
    assert found.to_json()["ok"] is True and "warning" not in found.to_json()


def test_a_deleted_transitions_row_is_a_mismatch_at_its_seq(work: Work) -> None:
    seq = work.transitions()[2]["seq"]
    tamper_db(work, "DELETE FROM transitions WHERE seq = ?", seq)
    found = consistency(work)
    assert not found.ok and [m.seq for m in found.mismatches] == [seq]
    assert "in the log but not in transitions" in found.mismatches[0].problem
    assert found.interrupted == ()


def test_a_changed_kind_is_a_mismatch_at_its_seq(work: Work) -> None:
    seq = work.transitions()[2]["seq"]
    tamper_db(work, "UPDATE transitions SET kind = 'work.ticket.add' WHERE seq = ?", seq)
    found = consistency(work)
    assert [m.seq for m in found.mismatches] == [seq]
    assert "is work.ticket.add in transitions but work.ticket.lease in the log" in (
        found.mismatches[0].problem)  # fmt: skip


def test_a_changed_nonce_is_a_mismatch(work: Work) -> None:
    row = work.transitions()[1]
    tamper_db(work, "INSERT INTO nonces (nonce, op, created) VALUES ('forged-nonce-1', 'x', 'y')")
    tamper_db(work, "UPDATE transitions SET nonce = 'forged-nonce-1' WHERE seq = ?", row["seq"])
    found = consistency(work)
    assert [m.seq for m in found.mismatches] == [row["seq"]]
    assert "another nonce" in found.mismatches[0].problem


def test_a_row_whose_seq_is_not_in_the_log_is_a_mismatch(work: Work) -> None:
    row = work.transitions()[1]
    tamper_db(work, "UPDATE transitions SET seq = 9999 WHERE seq = ?", row["seq"])
    found = consistency(work)
    # the row now names a seq the log lacks, and its entry has no row
    assert sorted(m.seq for m in found.mismatches) == [row["seq"], 9999]
    assert any("missing from the log" in m.problem for m in found.mismatches)


def test_a_row_naming_a_non_work_entry_is_a_mismatch(work: Work) -> None:
    tamper_db(work, "UPDATE transitions SET seq = 0 WHERE seq = ?", work.transitions()[0]["seq"])
    found = consistency(work)
    assert any(m.seq == 0 and "genesis in the log" in m.problem for m in found.mismatches)


def test_a_crash_between_append_and_commit_is_an_interrupted_transition(
    walk: Walk, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = walk.work
    assert walk.lease is not None and walk.dispatch is not None
    real = work.store.append

    def append_then_die(draft: Draft) -> object:
        real(draft)  # durable in the log...
        raise Crash  # ...and the process is gone before the commit

    before = snapshot(work)[0]
    monkeypatch.setattr(work.store, "append", append_then_die)
    n = nonce()
    with pytest.raises(Crash):
        work.record_run(walk.dispatch, walk.lease.token, facts(), n)
    monkeypatch.undo()
    assert snapshot(work)[0] == before  # the db rolled back: nothing changed there
    found = consistency(work)
    assert found.ok  # a warning, not a mismatch
    (cut,) = found.interrupted
    assert (cut.seq, cut.kind, cut.nonce) == (work.store.head() - 1, p.DispatchRan.KIND, n)
    assert found.to_json()["warning"].startswith("a transition was recorded")
    assert found.mismatches == ()
    # the fence carries on: the same run recorded again with a fresh nonce
    work.record_run(walk.dispatch, walk.lease.token, facts(), nonce())
    assert consistency(work).interrupted == found.interrupted and consistency(work).ok


def test_the_doctor_section_is_absent_without_a_work_db(git_repo: Path, oms_home: Path) -> None:
    init(git_repo)
    assert doctor_check(open_repo(git_repo)) is None


def test_the_doctor_section_names_each_mismatch(work: Work) -> None:
    seq = work.transitions()[1]["seq"]
    tamper_db(work, "DELETE FROM transitions WHERE seq = ?", seq)
    found = doctor_check(work.repo)
    assert found is not None and found.name == "work" and found.section["ok"] is False
    (problem,) = found.problems
    assert problem.startswith(f"work.db and the evidence log disagree: seq {seq} ")
    assert found.remedy
