"""`oms run list` reads work.db without the fence: the same runs, in the same order, as the
`Runs` store holds; a database that is missing or older is opened as every command opens it.

A real git repository in tmp_path, `oms init`ed; runs made with `Runs` directly.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.work import initialised_work

from gatekeeper.errors import UsageError
from gatekeeper.work.db import SCHEMA_VERSION, WorkDb, WorkDbUnavailable, db_path
from gatekeeper.work.fence import Work
from gatekeeper.work.runs.listing import list_runs
from gatekeeper.work.runs.store import Runs


@pytest.fixture
def work(git_repo: Path, oms_home: Path) -> Iterator[Work]:
    with initialised_work(git_repo) as w:
        yield w


def test_the_list_is_the_stores_newest_runs_with_their_columns(work: Work) -> None:
    runs = Runs(work)
    made = [runs.create("orchestrate", "implement", f"Goal {i}", (), {"implementer": "dev"},
                        step="start") for i in range(3)]  # fmt: skip
    listed, code = list_runs(work.repo.top, 2, "full")
    assert code == 0
    want = runs.recent(2)
    assert [r["run_id"] for r in listed["runs"]] == [r.id for r in want]
    assert {r.id for r in want} <= {r.id for r in made}
    first, run = listed["runs"][0], want[0]
    assert first == {"run_id": run.id, "kind": "orchestrate", "mode": "implement",
                     "status": run.state, "updated": run.updated, "stop_reason": None,
                     "objective": run.objective, "roles": {"implementer": "dev"},
                     "ticket": None, "counts": runs.counts(run.id)}  # fmt: skip


def test_the_reader_reads_only_a_current_database(work: Work) -> None:
    repo_id = work.repo.repo_id
    db = WorkDb.reader(repo_id)
    assert db is not None
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            db.conn.execute("DELETE FROM runs")
    finally:
        db.close()
    conn = sqlite3.connect(db_path(repo_id))
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    assert WorkDb.reader(repo_id) is None  # another schema: opened as `Work` opens it,
    with pytest.raises(WorkDbUnavailable, match="this oms knows up to"):  # refused as it is
        list_runs(work.repo.top)


def test_no_database_yet_is_made_as_every_command_makes_it(git_repo: Path, work: Work) -> None:
    path = db_path(work.repo.repo_id)
    work.close()
    path.unlink()
    assert WorkDb.reader(work.repo.repo_id) is None
    assert list_runs(git_repo)[0] == {"runs": []}
    assert path.is_file()


@pytest.mark.parametrize(("limit", "detail"), [(0, "summary"), (101, "summary"), (5, "all")])
def test_bad_limits_and_details_are_refused(work: Work, limit: int, detail: str) -> None:
    with pytest.raises(UsageError):
        list_runs(work.repo.top, limit, detail)
