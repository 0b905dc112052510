"""`oms doctor` checks work.db against the evidence log: a `work` section only when the
repository has a work.db; a transitions row deleted or changed, or a row the log's committed
entries did not set so, makes it not ready and tampered (exit 3), naming the seq or the
object; a transition interrupted between its append and its commit is a warning.
"""

from __future__ import annotations

import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.repos import commit_policy
from support.work import facts, new_ticket, nonce, open_work, outcome

from evidence import Draft

OmsJson = Callable[..., tuple[int, dict[str, Any]]]
RunOms = Callable[..., subprocess.CompletedProcess[str]]
EXIT_OK, EXIT_TAMPERED = 0, 3


class Crash(Exception):
    pass


@pytest.fixture
def repo(git_repo: Path, oms_json: OmsJson, oms_env: dict[str, str]) -> Path:
    assert oms_json(["init", "--repo", git_repo])[0] == EXIT_OK
    commit_policy(git_repo, env=oms_env)  # a plan: without one the doctor is not ready
    return git_repo


def _some_work(oms_json: OmsJson, repo: Path) -> None:
    code, goal = oms_json(["goal", "create", "--repo", repo, "--objective", "o",
                           "--stop-when", "s"])  # fmt: skip
    assert code == EXIT_OK, goal
    code, added = oms_json(["ticket", "add", "--repo", repo, "--goal", goal["goal"]["id"],
                            "--title", "t"])  # fmt: skip
    assert code == EXIT_OK, added
    code, leased = oms_json(["ticket", "lease", added["ticket"]["id"], "--repo", repo,
                             "--expected-version", "1", "--nonce", "nonce-doctor-01"])  # fmt: skip
    assert code == EXIT_OK, leased


def _db(oms_home: Path) -> Path:
    (found,) = oms_home.glob("repos/*/work.db")
    return found


def _tamper(oms_home: Path, sql: str) -> int:
    """Change one transitions row (the lease's, the last one) behind the fence; its seq."""
    conn = sqlite3.connect(_db(oms_home))
    try:
        with conn:
            (seq,) = conn.execute("SELECT max(seq) FROM transitions").fetchone()
            conn.execute(sql, (seq,))
        return int(seq)
    finally:
        conn.close()


def test_an_agreeing_work_db_is_ready(repo: Path, oms_json: OmsJson) -> None:
    _some_work(oms_json, repo)
    code, report = oms_json(["doctor", "--repo", repo])
    assert code == EXIT_OK, report["problems"]
    work = report["work"]
    assert (work["ok"], work["transitions"], work["entries"]) == (True, 3, 3)
    assert work["mismatches"] == [] and work["interrupted"] == []
    keys = list(report)
    assert keys.index("evidence") < keys.index("work") < keys.index("kernel_memory")


# One tamper through the real doctor; every kind of mismatch is in tests/unit/work/test_audit.py.
@pytest.mark.parametrize(
    ("sql", "says"),
    [("DELETE FROM transitions WHERE seq = ?", "is in the log but not in transitions")],
)  # fmt: skip
def test_a_tampered_work_db_is_not_ready_and_names_the_seq(
    repo: Path, oms_json: OmsJson, run_oms: RunOms, oms_home: Path, sql: str, says: str
) -> None:
    _some_work(oms_json, repo)
    seq = _tamper(oms_home, sql)
    code, report = oms_json(["doctor", "--repo", repo])
    assert code == EXIT_TAMPERED and report["ready"] is False
    assert report["work"]["ok"] is False
    assert [m["seq"] for m in report["work"]["mismatches"]] == [seq]
    # the tail's row gone, the log no longer sees its transition committed: the rows it set
    # are not proven either
    problem, *unproven = report["problems"]
    assert unproven and all(u.startswith("work.db is tampered: ") for u in unproven)
    assert problem.startswith(f"work.db and the evidence log disagree: seq {seq} ")
    assert says in problem
    proc = run_oms(["doctor", "--repo", str(repo)])
    assert proc.returncode == EXIT_TAMPERED and f"seq {seq}" in proc.stdout
    assert "MISMATCHED" in proc.stdout


def test_an_interrupted_transition_is_a_warning(
    repo: Path, oms_json: OmsJson, run_oms: RunOms, oms_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    work = open_work(repo)
    try:
        walk = new_ticket(work).leased().running()
        assert walk.lease is not None and walk.dispatch is not None
        real = work.store.append

        def append_then_die(draft: Draft) -> object:
            real(draft)
            raise Crash  # the process dies between the append and the commit

        monkeypatch.setattr(work.store, "append", append_then_die)
        with pytest.raises(Crash):
            work.record_run(walk.dispatch, walk.lease.token, facts(), nonce())
        monkeypatch.undo()
        seq = work.store.head() - 1
    finally:
        work.close()
    code, report = oms_json(["doctor", "--repo", repo])
    assert code == EXIT_OK, report["problems"]
    assert report["ready"] is True and report["work"]["ok"] is True
    assert [c["seq"] for c in report["work"]["interrupted"]] == [seq]
    assert report["work"]["interrupted"][0]["kind"] == "work.dispatch.run"
    assert "never committed" in report["work"]["warning"]


def test_a_failed_verify_edited_to_ready_in_work_db_is_tampered(
    repo: Path, oms_json: OmsJson, run_oms: RunOms, oms_home: Path
) -> None:
    """The repro: a FAILED verify edited in work.db to `completed` with a READY decision.
    The log says otherwise: the doctor says tampered (exit 3) and names both objects."""
    work = open_work(repo)
    try:
        walk = new_ticket(work).leased().running().ran().verifying()
        v = work.begin_verify(walk.id, nonce())
        work.finish_verify(v, outcome("FAILED"))
    finally:
        work.close()
    assert oms_json(["doctor", "--repo", repo])[0] == EXIT_OK
    conn = sqlite3.connect(_db(oms_home))
    try:
        with conn:
            conn.execute("UPDATE tickets SET state = 'completed', human_hold = 1 WHERE id = ?",
                         (walk.id,))  # fmt: skip
            conn.execute("UPDATE verifications SET decision = 'READY_FOR_HUMAN' WHERE id = ?",
                         (v.id,))  # fmt: skip
    finally:
        conn.close()
    code, report = oms_json(["doctor", "--repo", repo])
    assert code == EXIT_TAMPERED and report["ready"] is False
    objects = [t["object"] for t in report["work"]["tampered"]]
    assert objects == [f"tickets {walk.id}", f"verifications {v.id}"]
    assert all(p.startswith("work.db is tampered: ") for p in report["problems"])
    proc = run_oms(["doctor", "--repo", str(repo)])
    assert proc.returncode == EXIT_TAMPERED and "2 TAMPERED" in proc.stdout
    assert f"tickets {walk.id}" in proc.stdout
    # rebuilt from the log, work.db says what the log proves again
    code, out = oms_json(["reconcile", "work", "--repo", repo])
    assert code == EXIT_OK and out["rebuilt"]["unconfirmed"] is None, out
    assert oms_json(["doctor", "--repo", repo])[0] == EXIT_OK
    code, shown = oms_json(["ticket", "show", walk.id, "--repo", repo])
    assert (shown["ticket"]["state"], shown["ticket"]["verification"]["decision"]) == (
        "retryable", "FAILED")  # fmt: skip
