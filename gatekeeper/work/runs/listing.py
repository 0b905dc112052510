"""`oms run list` / `oms_runs`: the newest runs, read from `work.db` as they are stored.

A list changes nothing, so it opens the database to read only (`WorkDb.reader`: no key, no
trusted mark, no policy, no run model) and takes the few columns it shows. A database that
is not there yet or has an older schema is opened as every work command opens it (`Work`),
which makes or migrates it, or refuses as it does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gatekeeper.errors import UsageError
from gatekeeper.repo.git import open_repo
from gatekeeper.work.db import WorkDb

MAX_LIST = 100
SHOWN_OBJECTIVE = 200


@contextmanager
def reading(repo_dir: Path) -> Iterator[WorkDb]:
    """The repository's `work.db`, to read from."""
    db = WorkDb.reader(open_repo(repo_dir).repo_id)
    if db is None:
        from gatekeeper.work.fence import Work

        db = Work.open(repo_dir).db
    try:
        yield db
    finally:
        db.close()


def _counts(db: WorkDb, run_id: str) -> dict[str, int]:
    a = db.read("SELECT COUNT(*) FROM run_artifacts WHERE run = ?", run_id)
    e = db.read("SELECT COUNT(*) FROM run_events WHERE run = ?", run_id)
    return {"artifacts": int(a[0][0]), "events": int(e[0][0])}


def list_runs(
    repo_dir: Path, limit: int = 20, detail: str = "summary"
) -> tuple[dict[str, Any], int]:
    """The newest runs of the repository, newest first (`Runs.recent`'s order)."""
    if not 1 <= limit <= MAX_LIST:
        raise UsageError(f"limit is 1 to {MAX_LIST}")
    if detail not in ("summary", "full"):
        raise UsageError("detail is summary or full")
    with reading(repo_dir) as db:
        rows = []
        for r in db.read("SELECT * FROM runs ORDER BY updated DESC, id LIMIT ?", limit):
            row: dict[str, Any] = {"run_id": r["id"], "kind": r["kind"], "mode": r["mode"],
                                   "status": r["state"], "updated": r["updated"],
                                   "stop_reason": r["stop_reason"]}  # fmt: skip
            if detail == "full":
                row.update(objective=r["objective"][:SHOWN_OBJECTIVE],
                           roles=json.loads(r["roles"]), ticket=r["ticket"],
                           counts=_counts(db, r["id"]))  # fmt: skip
            rows.append(row)
        return {"runs": rows}, 0
