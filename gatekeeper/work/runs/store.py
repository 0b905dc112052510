"""Runs in `work.db`, every change fenced like the core's (`Work.fenced`).

`create` and `step` are each ONE `BEGIN IMMEDIATE` transaction that claims a nonce, checks
the run's expected version, writes the run row, its new artifacts and events, and appends
ONE evidence entry (`work.run.create` / `work.run.step`) that names the artifacts' blobs;
a refusal changes nothing. An artifact's bytes are an evidence blob (content-addressed,
durable before the transaction starts); its row says which entry attached it.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gatekeeper.errors import Blocked, NotFound, UsageError
from gatekeeper.work import payloads as p
from gatekeeper.work.fence import StaleVersion, Work, new_nonce
from gatekeeper.work.runs.model import (
    MAX_ARTIFACT_BYTES,
    RUN_ID_RE,
    TERMINAL,
    Artifact,
    ArtifactKind,
    Gate,
    Mode,
    Run,
    RunEvent,
    RunKind,
    RunState,
)

_UNSET: Any = object()


class RunFinished(Blocked):
    """The run is completed, failed or aborted: its state no longer changes."""


class ForeignRun(Blocked):
    """An agent run asked about a run it did not start: it acts only on its own runs."""


def new_run_id() -> str:
    return f"r-{secrets.token_hex(6)}"


def checked_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not RUN_ID_RE.fullmatch(run_id):
        raise UsageError(f"not a run id (r- and 12 hex digits): {run_id!r}"[:200])
    return run_id


@dataclass(frozen=True)
class NewArtifact:
    """An artifact to attach in a step: its bytes become an evidence blob."""

    kind: ArtifactKind
    data: bytes
    summary: str
    media_type: str = "text/markdown"
    role: str | None = None


@dataclass(frozen=True)
class Stepped:
    """What a step wrote: the run as it is now, and the refs of the artifacts it attached."""

    run: Run
    refs: tuple[str, ...]
    seq: int


class Runs:
    """The runs of one repository, on the `Work` (database, evidence store, policy) it holds."""

    def __init__(self, work: Work) -> None:
        self.work = work

    # -- changes ------------------------------------------------------------------------------

    def create(self, kind: RunKind, mode: Mode, objective: str, constraints: Sequence[str],
               roles: Mapping[str, str], *, step: str, parent: str | None = None,
               nonce: str | None = None,
               requested_by: Sequence[Mapping[str, Any]] = ()) -> Run:  # fmt: skip
        """A new run; `requested_by` (the agent run that asked, as subjects) is named by its
        `work.run.create` entry, which is what `started_by` reads back."""
        rid = new_run_id()
        nonce = nonce or new_nonce()
        with self.work.fenced(nonce, "run.create") as tx:
            tx.run("INSERT INTO runs (id, kind, mode, version, state, step, objective, "
                   "constraints, roles, parent, created, updated) "
                   "VALUES (?, ?, ?, 1, 'created', ?, ?, ?, ?, ?, ?, ?)",
                   rid, kind, mode, step, objective, json.dumps(list(constraints)),
                   json.dumps(dict(roles), sort_keys=True), parent, tx.now, tx.now)  # fmt: skip
            tx.record = p.RunCreated(object="run", id=rid, from_state=None, to_state="created",
                                     version=1, nonce=nonce,
                                     detail={"kind": kind, "mode": mode, "step": step,
                                             "roles": json.dumps(dict(roles), sort_keys=True),
                                             "parent": parent})  # fmt: skip
            tx.subject, tx.target = f"oms-run:{rid}", rid
            tx.requested_by = tuple(requested_by)
        return self.get(rid)

    def step(self, run: Run, *, state: RunState | None = None, step: str | None = None,
             gate: Gate | None = _UNSET, stop_reason: str | None = _UNSET,
             artifacts: Sequence[NewArtifact] = (),
             events: Sequence[tuple[str, Mapping[str, Any]]] = (),
             goal: str | None = None, ticket: str | None = None, cycles: int = 0,
             nonce: str | None = None) -> Stepped:  # fmt: skip
        """One fenced change of `run`, which must still be at `run.version`. A run in a
        terminal state takes artifacts and events (a summon onto a finished run) but never
        a new state, step or gate."""
        nonce = nonce or new_nonce()
        blobs = []
        for a in artifacts:
            if len(a.data) > MAX_ARTIFACT_BYTES:
                raise UsageError(f"a {a.kind} artifact is larger than {MAX_ARTIFACT_BYTES} bytes")
            blobs.append(self.work.store.blobs.put(a.data))
        refs: list[str] = []
        with self.work.fenced(nonce, "run.step") as tx:
            row = tx.one("SELECT * FROM runs WHERE id = ?", run.id)
            if row is None:
                raise NotFound(f"no run {run.id}")
            if row["version"] != run.version:
                raise StaleVersion(f"run {run.id} is at version {row['version']}, not "
                                   f"{run.version}; nothing changed")  # fmt: skip
            changes = state is not None or step is not None or gate is not _UNSET
            if row["state"] in TERMINAL and changes:
                raise RunFinished(f"run {run.id} is {row['state']}; its state no longer changes")
            new_state = state or row["state"]
            version = row["version"] + 1
            gate_json = row["gate"]
            if gate is not _UNSET:
                gate_json = json.dumps(gate.to_json(), sort_keys=True) if gate else None
            reason = row["stop_reason"] if stop_reason is _UNSET else stop_reason
            tx.run("UPDATE runs SET version = ?, state = ?, step = ?, gate = ?, stop_reason = ?, "
                   "goal = COALESCE(?, goal), ticket = COALESCE(?, ticket), "
                   "cycles = cycles + ?, updated = ? WHERE id = ?",
                   version, new_state, step or row["step"], gate_json, reason, goal, ticket,
                   cycles, tx.now, run.id)  # fmt: skip
            counts = self._counts(tx.conn, run.id)
            for a in artifacts:
                counts[a.kind] = counts.get(a.kind, 0) + 1
                refs.append(f"{a.kind}-{counts[a.kind]}")
            first_n = self._next_event(tx.conn, run.id)

            def rows(seq: int) -> None:
                for ref, a, blob in zip(refs, artifacts, blobs, strict=True):
                    tx.run("INSERT INTO run_artifacts (run, ref, kind, blob, bytes, media_type, "
                           "role, summary, seq, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           run.id, ref, a.kind, f"sha256:{blob}", len(a.data), a.media_type,
                           a.role, a.summary, seq, tx.now)  # fmt: skip
                for i, (kind, data) in enumerate(events):
                    tx.run("INSERT INTO run_events (run, n, kind, data, seq, created) "
                           "VALUES (?, ?, ?, ?, ?, ?)", run.id, first_n + i, kind,
                           json.dumps(dict(data), sort_keys=True), seq, tx.now)  # fmt: skip

            tx.after.append(rows)
            detail: dict[str, p.Small] = {
                "step": step or row["step"], "gate": gate_json, "stop_reason": reason,
                "artifacts": ",".join(refs) or None,
                "events": ",".join(k for k, _ in events) or None,
                "goal": goal, "ticket": ticket,
            }  # fmt: skip
            tx.record = p.RunStepped(object="run", id=run.id, from_state=row["state"],
                                     to_state=new_state, version=version, nonce=nonce,
                                     ticket=row["ticket"] or ticket, goal=row["goal"] or goal,
                                     detail=detail)  # fmt: skip
            tx.subject, tx.target = f"oms-run:{run.id}", run.id
            tx.blobs = tuple(dict.fromkeys(blobs))
        assert tx.seq is not None  # set by the fence once it committed
        return Stepped(self.get(run.id), tuple(refs), tx.seq)

    @staticmethod
    def _counts(conn: sqlite3.Connection, rid: str) -> dict[str, int]:
        rows = conn.execute("SELECT kind, COUNT(*) FROM run_artifacts WHERE run = ? "
                            "GROUP BY kind", (rid,)).fetchall()  # fmt: skip
        return {r[0]: int(r[1]) for r in rows}

    @staticmethod
    def _next_event(conn: sqlite3.Connection, rid: str) -> int:
        row = conn.execute("SELECT COALESCE(MAX(n), 0) FROM run_events WHERE run = ?",
                           (rid,)).fetchone()  # fmt: skip
        return int(row[0]) + 1

    # -- reads --------------------------------------------------------------------------------

    def get(self, run_id: str) -> Run:
        checked_run_id(run_id)
        rows = self.work.db.read("SELECT * FROM runs WHERE id = ?", run_id)
        if not rows:
            raise NotFound(f"no run {run_id} in this repository")
        return _run(rows[0])

    def started_by(self, run_id: str) -> frozenset[str]:
        """Who asked for run `run_id`, as the signed log says: the subjects of its
        `work.run.create` entry other than the run itself (empty for no such run, or a run
        started with no requester, such as at the CLI)."""
        rows = self.work.db.read("SELECT seq FROM transitions WHERE object = ? AND kind = ?",
                                 checked_run_id(run_id), p.RunCreated.KIND)  # fmt: skip
        if len(rows) != 1:
            return frozenset()
        entry = self.work.store.entry(int(rows[0]["seq"]))
        names = {s.name for s in entry.subject}
        own = f"oms-run:{run_id}"
        if entry.kind != p.RunCreated.KIND or own not in names:
            return frozenset()  # the index names another entry: it proves nothing
        return frozenset(names - {own})

    def recent(self, limit: int = 20) -> list[Run]:
        rows = self.work.db.read("SELECT * FROM runs ORDER BY updated DESC, id LIMIT ?",
                                 max(1, limit))  # fmt: skip
        return [_run(r) for r in rows]

    def next_ref(self, run_id: str, kind: str) -> str:
        """The ref the next `kind` artifact of the run gets (exact while its version holds)."""
        rows = self.work.db.read("SELECT COUNT(*) FROM run_artifacts WHERE run = ? AND kind = ?",
                                 run_id, kind)  # fmt: skip
        return f"{kind}-{int(rows[0][0]) + 1}"

    def artifacts(self, run_id: str) -> list[Artifact]:
        rows = self.work.db.read("SELECT * FROM run_artifacts WHERE run = ? ORDER BY seq, ref",
                                 run_id)  # fmt: skip
        return [_artifact(r) for r in rows]

    def artifact(self, run_id: str, ref: str) -> Artifact:
        """An artifact recorded on this run, and nothing else."""
        rows = self.work.db.read("SELECT * FROM run_artifacts WHERE run = ? AND ref = ?",
                                 run_id, ref)  # fmt: skip
        if not rows:
            raise NotFound(f"run {run_id} has no artifact {ref!r}"[:200])
        return _artifact(rows[0])

    def content(self, a: Artifact) -> bytes:
        return self.work.store.blobs.get(a.blob.removeprefix("sha256:"))

    def events(self, run_id: str, last: int | None = None) -> list[RunEvent]:
        if last is None:
            rows = self.work.db.read("SELECT * FROM run_events WHERE run = ? ORDER BY n", run_id)
        else:
            rows = self.work.db.read("SELECT * FROM (SELECT * FROM run_events WHERE run = ? "
                                     "ORDER BY n DESC LIMIT ?) ORDER BY n", run_id,
                                     max(0, last))  # fmt: skip
        return [RunEvent(n=r["n"], kind=r["kind"], data=json.loads(r["data"]), seq=r["seq"],
                         created=r["created"]) for r in rows]  # fmt: skip

    def counts(self, run_id: str) -> dict[str, int]:
        a = self.work.db.read("SELECT COUNT(*) FROM run_artifacts WHERE run = ?", run_id)
        e = self.work.db.read("SELECT COUNT(*) FROM run_events WHERE run = ?", run_id)
        return {"artifacts": int(a[0][0]), "events": int(e[0][0])}


def _run(r: sqlite3.Row) -> Run:
    return Run(
        id=r["id"], kind=r["kind"], mode=r["mode"], version=r["version"], state=r["state"],
        step=r["step"], objective=r["objective"],
        constraints=tuple(json.loads(r["constraints"])), roles=json.loads(r["roles"]),
        gate=Gate.model_validate_json(r["gate"]) if r["gate"] else None,
        stop_reason=r["stop_reason"], goal=r["goal"], ticket=r["ticket"], parent=r["parent"],
        cycles=r["cycles"], created=r["created"], updated=r["updated"],
    )  # fmt: skip


def _artifact(r: sqlite3.Row) -> Artifact:
    return Artifact(ref=r["ref"], kind=r["kind"], blob=r["blob"], bytes=r["bytes"],
                    media_type=r["media_type"], role=r["role"], summary=r["summary"],
                    seq=r["seq"], created=r["created"])  # fmt: skip
