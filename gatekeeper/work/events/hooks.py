"""Provider-hook observations → typed events: what a worker's `oms hook …` saw, recorded.

Inside a worker's agent run, each `oms hook claude-code|codex EVENT` call publishes ONE
bounded observation to the broker outside (`gatekeeper.agent.observe`), which runs this
module's `main` outside with the worker id of the RUN (never of the payload). `observe`
records it in one fenced transaction: the typed event (`hook.session`, `hook.activity`,
`hook.completion-observed`) under a stable key, the provider session's row (activity and
health, bound to the worker's dispatch), one conductor notification batch, and one
`work.events` entry. A retry of the same observation changes nothing and answers the same
receipt key. A completion (Stop) is an observation and nothing more: the ticket stays where
it is; only the dispatch-bound receipt moves it to `verifying`.

The body holds the event name, the session id, the tool name and timestamps: never the
prompt, the tool's input or its output.

`hook.quota` comes from the broker itself (`gatekeeper.agent.observe.QuotaReport`, run with
`--quota`), never from the agent: `observe_quota` parks the worker's lane by health until
the provider's reset; the watchdog makes it `resumable` once the reset has passed.
`hook.parked` comes the same way when the broker stopped the run's model traffic (its
`[conductor.budget]` spent, or the provider refusing oms' key): `observe_parked` parks the
lane with a reason a human can act on; nothing resumes it but a human.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import rfc8785
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gatekeeper.agent.budget import budget_reason, login_reason
from gatekeeper.errors import Blocked, NotFound, UsageError, refusal
from gatekeeper.work import payloads as p
from gatekeeper.work.conductor.model import WORKER_ID_RE
from gatekeeper.work.events import outbox
from gatekeeper.work.fence import NonceReplayed, Work

MAX_OBSERVATION_BYTES = 4 << 10
SESSION_RE = r"^[A-Za-z0-9._:-]{1,128}$"
TOOL_RE = r"^[A-Za-z0-9._:/-]{0,128}$"
TIME_RE = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z$"
# The hook events oms installs, and the typed event kind each becomes.
KIND_OF = {
    "SessionStart": "hook.session",
    "PreToolUse": "hook.activity",
    "PostToolUse": "hook.activity",
    "SubagentStop": "hook.activity",
    "Stop": "hook.completion-observed",
}
ACTIVITY_OF = {"hook.session": "working", "hook.activity": "working",
               "hook.completion-observed": "done"}  # fmt: skip


class Observation(BaseModel):
    """What the hook inside publishes: bounded, typed, no free text."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    client: Literal["claude-code", "codex"]
    event: Literal["SessionStart", "PreToolUse", "PostToolUse", "SubagentStop", "Stop"]
    session: str = Field(pattern=SESSION_RE)
    tool: str = Field(default="", pattern=TOOL_RE)
    observed: str = Field(pattern=TIME_RE)  # the hook's own clock, UTC
    input_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")  # tells two same-second calls apart

    @property
    def kind(self) -> str:
        return KIND_OF[self.event]


class QuotaObservation(BaseModel):
    """What the egress broker OUTSIDE saw: a provider's usage-limit answer to a worker's
    run (never sent by the agent: the hook route cannot reach it). No body text."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    event: Literal["quota"]
    provider: Literal["anthropic", "openai"]
    status: int = Field(ge=400, le=599)
    reset: str = Field(pattern=TIME_RE)  # when the limit resets, UTC
    source: str = Field(pattern=r"^[a-z0-9-]{1,64}$")  # the header that said so, or "default"
    observed: str = Field(pattern=TIME_RE)

    @property
    def kind(self) -> str:
        return "hook.quota"


class ParkObservation(BaseModel):
    """What the egress broker OUTSIDE saw: it stopped a worker's model traffic, its budget
    spent (`scope`, `measure`, `spent`, `limit`) or its key refused (`provider`, `status`).
    Typed numbers and names: the reason is composed here, never taken from the payload."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    event: Literal["budget", "login"]
    provider: Literal["anthropic", "openai"]
    status: int = Field(ge=400, le=599)
    scope: Literal["ticket", "goal"] | None = None
    measure: Literal["requests", "tokens"] | None = None
    spent: int | None = Field(default=None, ge=0, le=10**15)
    limit: int | None = Field(default=None, ge=1, le=10**15)
    observed: str = Field(pattern=TIME_RE)

    @property
    def kind(self) -> str:
        return "hook.parked"

    @property
    def reason(self) -> str:
        if self.event == "login":
            return login_reason(self.provider, self.status)
        if self.scope is None or self.measure is None or self.spent is None or not self.limit:
            raise UsageError("a budget stop names its scope, measure, spent and limit")
        return budget_reason(self.scope, self.measure, self.spent, self.limit)


class ObservationRefused(Blocked):
    """The observation does not bind to this worker (another dispatch's session), or the
    worker has published as many as it may."""


# What wakes the conductor: a worker's completion seen and a usage limit. Session and tool
# activity are recorded (health, the HUD) but wake nobody: a worker's every tool call would
# otherwise be a conductor turn.
NOTIFYING = frozenset({"hook.completion-observed", "hook.quota", "hook.parked"})
# A run cannot flood the store, the log or the conductor: past this, nothing more is kept.
MAX_OBSERVATIONS_PER_WORKER = 2000


@dataclass(frozen=True)
class ObservationReceipt:
    key: str
    kind: str
    new: bool  # False: a retry; nothing changed
    batch: str | None

    def to_json(self) -> dict[str, Any]:
        return {"receipt": self.key, "kind": self.kind, "new": self.new, "batch": self.batch}


def parse(data: bytes) -> Observation:
    if len(data) > MAX_OBSERVATION_BYTES:
        raise UsageError(f"an observation is at most {MAX_OBSERVATION_BYTES} bytes")
    try:
        return Observation.model_validate_json(data)
    except ValidationError as exc:
        where = ", ".join(".".join(map(str, e["loc"])) or "body" for e in exc.errors()[:3])
        raise UsageError(f"not an observation (check {where})") from None


def parse_quota(data: bytes) -> QuotaObservation | ParkObservation:
    """The broker's own observation: a quota, or a stop of the run's model traffic."""
    if len(data) > MAX_OBSERVATION_BYTES:
        raise UsageError(f"an observation is at most {MAX_OBSERVATION_BYTES} bytes")
    try:
        doc = json.loads(data)
        if isinstance(doc, dict) and doc.get("event") in ("budget", "login"):
            park = ParkObservation.model_validate(doc)
            _ = park.reason  # a budget stop names all it needs (UsageError else)
            return park
        return QuotaObservation.model_validate_json(data)
    except ValueError as exc:  # pydantic's ValidationError, json's JSONDecodeError
        errors = exc.errors()[:3] if isinstance(exc, ValidationError) else []
        where = ", ".join(".".join(map(str, e["loc"])) or "body" for e in errors) or "body"
        raise UsageError(f"not a quota observation (check {where})") from None


Observed = Observation | QuotaObservation | ParkObservation


def receipt_key(worker: str, obs: Observed) -> str:
    """Stable: the same observation of the same worker always has this key."""
    # A quota is the same fact for the same reset, whenever (and by which header) it is seen;
    # a stop, the same fact whenever it is seen.
    skip = {"hook.quota": {"observed", "source"}, "hook.parked": {"observed"}}.get(obs.kind)
    fact = obs.model_dump(exclude=skip)
    canon = bytes(rfc8785.dumps({"worker": worker, **fact}))
    return f"{obs.kind}:{worker}:{hashlib.sha256(canon).hexdigest()[:32]}"


class _Seen(Exception):
    """Inside the transaction: the key was there already; roll back, answer the receipt."""


def _project(work: Work, worker: str, obs: Observed, prefix: str, op: str,
             fields: dict[str, p.Small], apply: Callable[[Any, Any], None],
             detail: dict[str, p.Small]) -> ObservationReceipt:  # fmt: skip
    """One observation of `worker` recorded: one fenced tx writing its event (`fields` plus
    the worker's ids), `apply` (the session or quota rows), one notification batch and one
    `work.events` entry; nothing at all when it was recorded before (its key and nonce are
    derived from the observation, so a retry replays both)."""
    if not isinstance(worker, str) or not WORKER_ID_RE.fullmatch(worker):
        raise UsageError(f"not a worker id: {worker!r}"[:200])
    key = receipt_key(worker, obs)
    nonce = f"{prefix}-" + key.rsplit(":", 1)[1]
    seen = ObservationReceipt(key, obs.kind, False, None)
    if work.db.read("SELECT 1 FROM events WHERE key = ?", key):
        return seen
    try:
        with work.fenced(nonce, op) as tx:
            w = tx.one("SELECT * FROM workers WHERE id = ?", worker)
            if w is None:
                raise NotFound(f"no worker {worker}")
            kept = tx.one("SELECT COUNT(*) AS n FROM events WHERE kind LIKE 'hook.%' AND "
                          "json_extract(body, '$.worker') = ?", worker)  # fmt: skip
            if kept is not None and kept["n"] >= MAX_OBSERVATIONS_PER_WORKER:
                raise ObservationRefused(f"worker {worker} has published "
                                         f"{MAX_OBSERVATIONS_PER_WORKER} observations; no "
                                         "more are recorded")  # fmt: skip
            body = {"worker": worker, "dispatch": w["dispatch"], "ticket": w["ticket"],
                    **fields, "recorded": tx.now}  # fmt: skip
            if not outbox.record(tx, [outbox.TypedEvent(key, obs.kind, body)]):
                raise _Seen
            apply(tx, w)
            batch = outbox.notify(tx, [key]) if obs.kind in NOTIFYING else None
            tx.record = p.EventsProjected(object="events", id=key[:200], ticket=w["ticket"],
                                          from_state=None, to_state=obs.kind, version=1,
                                          nonce=nonce,
                                          detail={"worker": worker, **detail, "batch": batch,
                                                  "events": 1})  # fmt: skip
            tx.target = worker
            tx.subject = f"oms-ticket:{w['ticket']}"
    except (_Seen, NonceReplayed):
        return seen
    return ObservationReceipt(key, obs.kind, True, batch)


def observe(work: Work, worker: str, obs: Observation) -> ObservationReceipt:
    """Record `obs` for `worker` (the run's worker): one fenced tx, or nothing on a retry."""
    fields: dict[str, p.Small] = {"client": obs.client, "event": obs.event,
                                  "session": obs.session, "tool": obs.tool or None,
                                  "observed": obs.observed}  # fmt: skip
    return _project(work, worker, obs, "hook", "hook.observe", fields,
                    lambda tx, w: _session(tx, w, obs),
                    {"session": obs.session, "event": obs.event})  # fmt: skip


def quota_reason(reset: str) -> str:
    return f"quota until {reset}"


def observe_quota(work: Work, worker: str, q: QuotaObservation) -> ObservationReceipt:
    """Record a usage limit the broker saw for `worker`'s run: one fenced tx writing the
    `hook.quota` event, the worker's quota lane (`waiting` until `q.reset`), its provider
    sessions' and its running ticket's health `parked` (reason `quota until <reset>`), one
    notification batch and one `work.events` entry. Health only: the CLI waits or fails as
    it does; oms signals no process for quota. The same observation again changes nothing.
    """
    fields: dict[str, p.Small] = {"provider": q.provider, "status": q.status,
                                  "reset": q.reset, "source": q.source,
                                  "observed": q.observed}  # fmt: skip
    return _project(work, worker, q, "quota", "hook.quota", fields, lambda tx, w: _park(tx, w, q),
                    {"reset": q.reset, "status": q.status})  # fmt: skip


def observe_parked(work: Work, worker: str, stop: ParkObservation) -> ObservationReceipt:
    """Record the broker's stop of `worker`'s model traffic: one fenced tx writing the
    `hook.parked` event, its provider sessions' and its running ticket's health `parked`
    with the stop's reason (`budget spent: …`, `the … API key was refused …`), one
    notification batch and one `work.events` entry. The same stop again changes nothing."""
    fields: dict[str, p.Small] = {"event": stop.event, "provider": stop.provider,
                                  "status": stop.status, "reason": stop.reason,
                                  "observed": stop.observed}  # fmt: skip
    return _project(work, worker, stop, "parked", "hook.parked", fields,
                    lambda tx, w: _park_lane(tx, w, stop.reason),
                    {"event": stop.event, "status": stop.status})  # fmt: skip


def _park_lane(tx: Any, w: Any, reason: str) -> None:
    """The worker's sessions and its running ticket parked by health, with `reason`: a
    quota's (which its reset lifts) or a stop's (which waits for a human); either replaces
    an earlier quota's, never a stop's."""
    tx.run("UPDATE sessions SET health = 'parked', version = version + 1, updated = ? WHERE "
           "dispatch = ? AND health IN ('healthy', 'stalled')", tx.now, w["dispatch"])  # fmt: skip
    t = tx.one("SELECT * FROM tickets WHERE id = ?", w["ticket"])
    if (
        t is not None
        and t["state"] == "running"
        and (
            t["health"] in ("healthy", "stalled")
            or (t["health"] == "parked" and (t["reason"] or "").startswith("quota until "))
        )
    ):
        tx.run("UPDATE tickets SET health = 'parked', reason = ?, version = version + 1, "
               "updated = ? WHERE id = ? AND version = ?", reason[:500], tx.now, t["id"],
               t["version"])  # fmt: skip


def _park(tx: Any, w: Any, q: QuotaObservation) -> None:
    """The worker's quota lane `waiting` until the reset (a later reset replaces an earlier
    one), its sessions and its running ticket parked by health (never another state)."""
    row = tx.one("SELECT * FROM quotas WHERE worker = ?", w["id"])
    if row is None:
        tx.run("INSERT INTO quotas (worker, ticket, dispatch, version, state, provider, status, "
               "reset, created, updated) VALUES (?, ?, ?, 1, 'waiting', ?, ?, ?, ?, ?)",
               w["id"], w["ticket"], w["dispatch"], q.provider, q.status, q.reset, tx.now,
               tx.now)  # fmt: skip
    else:
        tx.run("UPDATE quotas SET state = 'waiting', provider = ?, status = ?, reset = ?, "
               "version = version + 1, updated = ? WHERE worker = ? AND version = ?",
               q.provider, q.status, q.reset, tx.now, w["id"], row["version"])  # fmt: skip
    _park_lane(tx, w, quota_reason(q.reset))


def _session(tx: Any, w: Any, obs: Observation) -> None:
    """The provider session's row: created bound to the worker's dispatch, then its activity
    and health (an observation is a sign of life: `healthy`)."""
    activity = ACTIVITY_OF[obs.kind]
    row = tx.one("SELECT * FROM sessions WHERE id = ?", obs.session)
    if row is None:
        tx.run("INSERT INTO sessions (id, dispatch, provider, version, activity, health, "
               "created, updated) VALUES (?, ?, ?, 1, ?, 'healthy', ?, ?)",
               obs.session, w["dispatch"], obs.client, activity, tx.now, tx.now)  # fmt: skip
        return
    if row["dispatch"] != w["dispatch"]:
        raise ObservationRefused(f"session {obs.session} belongs to another dispatch; "
                                 "nothing changed")  # fmt: skip
    tx.run("UPDATE sessions SET activity = ?, health = 'healthy', version = version + 1, "
           "updated = ? WHERE id = ? AND version = ?", activity, tx.now, obs.session,
           row["version"])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """OUTSIDE, started by the broker's observe route: `python -m gatekeeper.work.events.
    hooks --repo TOP --worker W` with the observation on stdin; the receipt on stdout. With
    `--quota` (only the broker's own response watch passes it) a quota observation."""
    ap = argparse.ArgumentParser(prog="oms-observe")
    ap.add_argument("--repo", required=True, type=Path)
    ap.add_argument("--worker", required=True)
    ap.add_argument("--quota", action="store_true", help="the broker's quota observation")
    args = ap.parse_args(argv)
    try:
        data = sys.stdin.buffer.read(MAX_OBSERVATION_BYTES + 1)
        quota = parse_quota(data) if args.quota else None
        obs = None if quota is not None else parse(data)
        work = Work.open(args.repo)
        try:
            if isinstance(quota, ParkObservation):
                out = observe_parked(work, args.worker, quota)
            elif quota is not None:
                out = observe_quota(work, args.worker, quota)
            else:
                assert obs is not None  # nosec B101 (parsed above)
                out = observe(work, args.worker, obs)
        finally:
            work.close()
    except Exception as exc:
        err = refusal(exc)
        sys.stdout.write(json.dumps({"error": err.kind, "message": err.message[:300]}) + "\n")
        return err.exit_code
    sys.stdout.write(json.dumps(out.to_json()) + "\n")
    return 0


if __name__ == "__main__":  # pragma: no cover - run by the broker as a module
    sys.exit(main())
