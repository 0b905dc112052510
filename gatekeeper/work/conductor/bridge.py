"""The conductor bridge's seven tools: what the conductor (a read-only model) may ask oms.

Four data tools (`propose_goal`, `prepare_dispatch`, `advise_dispatch`, `propose_dispatch`)
and three fixed controls (`manage_worker`, `start_team`, `process_result`). Each one:
  - is bound to one conductor session (a `conductors` row that is neither dead nor stopped);
  - re-reads its authority at call time (goal, ticket, lease, the default branch's policy,
    the attempt budget), never the conductor's memory;
  - is nonce-bound: a used nonce is refused before anything runs, and the fence claims it;
  - returns bounded status and opaque ids only (a lease token never leaves oms: `tokens`).
Nothing here approves, merges, releases or grants authority; a worker starts only from a
dispatch that an advisor approved for its exact intent digest and that oms accepted.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from gatekeeper.agent.workspace import new_run_id
from gatekeeper.digest import Sha256Digest
from gatekeeper.errors import Blocked, NotFound, OmsError, Unavailable, UsageError
from gatekeeper.work import budget, roles, verify
from gatekeeper.work import dispatch as dispatching
from gatekeeper.work import payloads as p
from gatekeeper.work.conductor import deliver, sessions, tokens, waiter, workers
from gatekeeper.work.conductor import intents as m
from gatekeeper.work.conductor.model import new_id
from gatekeeper.work.fence import (
    LEASABLE,
    AttemptsExhausted,
    LeaseRefused,
    NonceReplayed,
    StaleVersion,
    Work,
    WrongState,
    refuse_parked,
    token_digest,
)
from gatekeeper.work.model import DispatchPlan
from gatekeeper.work.providers import adapter
from gatekeeper.work.providers.base import ProviderRequest, Role, RoleUnavailable
from gatekeeper.work.transfers import approved_transfer

# The conductor's session policy (issue 18): the human started the conductor at a terminal,
# so an interactive claude-code/codex role is eligible (`roles.require(unattended=False)`);
# an undeclared auth or billing, or credit billing not explicitly enabled, still fails closed.
SESSION_POLICY = "operator_originated_oms_managed_interactive"
ENDED = ("dead", "stopped")
PLAN_FIELDS = tuple(DispatchPlan.model_fields)

TOOLS = ("propose_goal", "prepare_dispatch", "advise_dispatch", "propose_dispatch",
         "manage_worker", "start_team", "process_result")  # fmt: skip


class TeamIncomplete(Blocked):
    """Some of a team's workers did not start; the message names those that did."""


class IntentRefused(Blocked):
    """The intent is not (or no longer) what was advised, or its authority has changed."""


# -- authority at call time -----------------------------------------------------------------


def _session(work: Work, conductor: str) -> sessions.Conductor:
    c = sessions.get(work, conductor)
    if c.state in ENDED:
        raise Blocked(f"conductor session {conductor} is {c.state}; its bridge answers nothing")
    return c


def _fresh(work: Work, nonce: str) -> None:
    """Refuse a used nonce before anything runs (the fence claims it again, atomically)."""
    if work.db.read("SELECT 1 FROM nonces WHERE nonce = ?", nonce):
        raise NonceReplayed(f"nonce {nonce} was used already; nothing changed")


def _eligible(work: Work, name: str, authority: str) -> Role:
    role = roles.require(roles.resolve(work.loaded, name), unattended=False)
    if role.authority != authority:
        raise RoleUnavailable(f"role {role.name} is {role.authority}; this needs a "
                              f"{authority} role")  # fmt: skip
    return role


def _runnable(role: Role) -> None:
    """The worker role has a way to run: an unattended interactive Claude Code worker in its
    pane under `oms agent run` (roles.check with worker_pane: workers.run_worker's end rule),
    any other through its provider adapter, which refuses an engine without one (and an
    attended interactive role: it asks at its pane, so it is no conductor's worker)."""
    if role.transport == "interactive" and roles.check(role, unattended=True,
                                                       worker_pane=True).eligible:  # fmt: skip
        return
    adapter(role)


def _intent(work: Work, conductor: str, intent: str) -> sqlite3.Row:
    rows = work.db.read("SELECT * FROM intents WHERE id = ? AND conductor = ?", intent, conductor)
    if not rows:
        raise NotFound(f"no intent {intent} of conductor session {conductor}")
    return rows[0]


def _body(work: Work, row: sqlite3.Row) -> dict[str, Any]:
    raw = work.store.blobs.get(row["body_blob"].removeprefix("sha256:"))
    if m.digest_of(raw) != row["digest"]:
        raise IntentRefused(f"intent {row['id']}'s document does not match its digest")
    body: dict[str, Any] = json.loads(raw)
    return body


def _current(work: Work, row: sqlite3.Row, body: Mapping[str, Any]) -> None:
    """The intent's goal is open, its lease the ticket's active one and unexpired, the ticket
    at the version the intent was prepared at."""
    goal = work.goal(row["goal"])
    if goal.state != "open":
        raise WrongState(f"goal {goal.id} is {goal.state}; nothing changed")
    lease = work.db.read("SELECT * FROM leases WHERE token_sha256 = ?", row["lease"])
    if not lease or lease[0]["state"] != "active" or lease[0]["ticket"] != row["ticket"]:
        raise LeaseRefused(f"the lease of intent {row['id']} is no longer the active lease of "
                           f"{row['ticket']}; prepare again")  # fmt: skip
    if float(lease[0]["expires"]) <= work.clock():
        raise LeaseRefused(f"the lease of intent {row['id']} expired; prepare again")
    t = work.ticket(row["ticket"])
    if t.version != body["ticket_version"] or t.state != "leased":
        raise StaleVersion(f"ticket {t.id} changed since intent {row['id']} was prepared "
                           f"(now {t.state}, version {t.version}); prepare again")  # fmt: skip


def _record(tx: Any, kind: type[p.WorkRecord], obj: str, oid: str, ticket: str | None,
            goal: str, before: str | None, after: str, version: int, nonce: str,
            lease: str | None = None, **detail: p.Small) -> None:  # fmt: skip
    tx.record = kind(object=obj, id=oid, ticket=ticket, goal=goal, from_state=before,
                     to_state=after, version=version, nonce=nonce, lease=lease,
                     detail=dict(detail))  # fmt: skip
    tx.target = oid
    tx.subject = f"oms-ticket:{ticket}" if ticket else f"oms-goal:{goal}"


# -- 1. propose_goal --------------------------------------------------------------------------


def propose_goal(work: Work, conductor: str, req: m.ProposeGoal) -> dict[str, Any]:
    """A durable goal, before any dispatch (the core's `create_goal`)."""
    _session(work, conductor)
    _fresh(work, req.nonce)
    goal = work.create_goal(req.objective, req.stop_when, req.horizon, req.nonce)
    return {"goal": goal.id, "state": goal.state, "version": goal.version}


# -- 2. prepare_dispatch ------------------------------------------------------------------------


def prepare_dispatch(work: Work, conductor: str, req: m.PrepareDispatch) -> dict[str, Any]:
    """Lease the ticket (the token kept by oms), and record the intent document: goal,
    ticket, lease digest, attempt, role/model/engine, capabilities, acceptance, base, task.
    With `attach_from` (the goal the ticket is in now), the ticket is first attached to
    `goal`: how the conductor brings a GitHub ticket into the goal the human made."""
    _session(work, conductor)
    _fresh(work, req.nonce)
    goal = work.goal(req.goal)
    if goal.state != "open":
        raise WrongState(f"goal {goal.id} is {goal.state}; nothing changed")
    t = work.ticket(req.ticket)
    if t.goal != goal.id and t.goal != req.attach_from:
        raise Blocked(f"ticket {t.id} is not goal {goal.id}'s; nothing changed")
    if t.state not in LEASABLE:
        raise WrongState(f"ticket {t.id} is {t.state}; only a pending, retryable or parked "
                         "ticket is dispatched; nothing changed")  # fmt: skip
    refuse_parked(t.id, t.state, t.health, t.reason)  # a human resumes it, not the conductor
    if t.attempts + 1 > work.max_attempts:
        raise AttemptsExhausted(f"ticket {t.id} has used all {work.max_attempts} attempts; "
                                "nothing changed")  # fmt: skip
    role = _eligible(work, req.role, "worktree-write")
    _runnable(role)  # refused here, before anything changes
    transfer = approved_transfer(
        work, role, Sha256Digest.parse(req.transfer) if req.transfer else None
    )
    plan = dispatching._plan(work, role, transfer, t.id)
    if t.goal != goal.id:  # every refusal above changed nothing; now the attach, then the lease
        t = work.move_ticket(t.id, t.goal, goal.id, t.version, f"{req.nonce}:attach")
    lease, leased = work.lease_ticket(t.id, t.version, f"{req.nonce}:lease")
    tokens.keep(work.repo.repo_id, t.id, lease.token)
    body = {
        "v": 1, "session_policy": SESSION_POLICY, "conductor": conductor, "goal": goal.id,
        "ticket": t.id, "ticket_version": leased.version, "lease": token_digest(lease.token),
        "lease_expires": lease.expires, "attempt": t.attempts + 1, "task": req.task,
        **plan.to_json(),
    }  # fmt: skip
    raw = m.canonical(body)
    blob = work.store.blobs.put(raw)
    digest = m.digest_of(raw)
    iid = new_id("i")
    with work.fenced(req.nonce, "intent.prepare") as tx:
        tx.run("INSERT INTO intents (id, conductor, goal, ticket, lease, version, state, role, "
               "body_blob, digest, created, updated) VALUES (?, ?, ?, ?, ?, 1, 'prepared', ?, "
               "?, ?, ?, ?)", iid, conductor, goal.id, t.id, body["lease"], role.name,
               f"sha256:{blob}", digest, tx.now, tx.now)  # fmt: skip
        _record(tx, p.IntentRecorded, "intent", iid, t.id, goal.id, None, "prepared", 1,
                req.nonce, lease=body["lease"], digest=digest, attempt=body["attempt"],
                role=role.name, conductor=conductor)  # fmt: skip
        tx.blobs = (blob,)
    return {"intent": iid, "state": "prepared", "digest": digest,
            "ticket_version": leased.version}  # fmt: skip


# -- 3. advise_dispatch -------------------------------------------------------------------------


def advise_dispatch(work: Work, conductor: str, req: m.AdviseDispatch) -> dict[str, Any]:
    """A fresh advisor's verdict on exactly this intent (its digest), schema-validated."""
    _session(work, conductor)
    _fresh(work, req.nonce)
    row = _intent(work, conductor, req.intent)
    if row["state"] != "prepared":  # advised once: no asking again until an advisor approves
        raise WrongState(f"intent {row['id']} is {row['state']}; only a prepared intent is "
                         "advised, once (prepare a revised intent); nothing changed")  # fmt: skip
    if req.digest != row["digest"]:
        raise IntentRefused(f"digest {req.digest} is not intent {row['id']}'s; nothing changed")
    body = _body(work, row)
    _current(work, row, body)
    role = _eligible(work, work.loaded.policy.conductor.advisor, "read-only")
    under = approved_transfer(
        work, role, Sha256Digest.parse(req.transfer) if req.transfer else None
    )
    doc = m.advice_document(row["id"], row["digest"], body)
    got = adapter(role)(ProviderRequest(work.repo.top, body["base"], role, new_run_id(), doc,
                                        output_schema=m.ADVICE_SCHEMA,
                                        loaded=work.loaded))  # fmt: skip
    if got.timed_out or got.exit_code != 0:
        how = "timed out" if got.timed_out else f"exit {got.exit_code}"
        raise Unavailable(f"the advisor {role.name} failed ({how}); nothing recorded")
    advice = m.parse_advice(got.output)
    with work.fenced(req.nonce, "intent.advise") as tx:
        now = tx.one("SELECT * FROM intents WHERE id = ?", row["id"])
        if now is None or now["version"] != row["version"] or now["digest"] != row["digest"]:
            raise StaleVersion(f"intent {row['id']} changed while it was advised; nothing changed")
        version = int(row["version"]) + 1
        tx.run("UPDATE intents SET state = 'advised', version = ?, advised_digest = ?, "
               "advice = ?, updated = ? WHERE id = ?", version, row["digest"],
               json.dumps(advice.model_dump(mode="json")), tx.now, row["id"])  # fmt: skip
        _record(tx, p.IntentRecorded, "intent", row["id"], row["ticket"], row["goal"],
                row["state"], "advised", version, req.nonce, lease=row["lease"],
                verdict=advice.verdict, advised_digest=row["digest"], advisor=role.name,
                agent_run_seq=got.evidence_seq, transfer=under,
                output_sha256=m.digest_of(got.output.encode()))  # fmt: skip
    return {"intent": row["id"], "state": "advised", "verdict": advice.verdict,
            "reasons": list(advice.reasons), "advised_digest": row["digest"]}  # fmt: skip


# -- 4. propose_dispatch ------------------------------------------------------------------------


def _accept(work: Work, row: sqlite3.Row, dispatch_id: str, nonce: str) -> None:
    with work.fenced(nonce, "intent.accept") as tx:
        now = tx.one("SELECT * FROM intents WHERE id = ?", row["id"])
        if now is None or now["version"] != row["version"]:
            raise StaleVersion(f"intent {row['id']} changed meanwhile; nothing changed")
        version = int(row["version"]) + 1
        tx.run("UPDATE intents SET state = 'accepted', version = ?, dispatch = ?, updated = ? "
               "WHERE id = ?", version, dispatch_id, tx.now, row["id"])  # fmt: skip
        _record(tx, p.IntentRecorded, "intent", row["id"], row["ticket"], row["goal"],
                "advised", "accepted", version, nonce, lease=row["lease"],
                dispatch=dispatch_id, digest=row["digest"])  # fmt: skip


def _begun(work: Work, row: sqlite3.Row, body: Mapping[str, Any]) -> str | None:
    """The dispatch this intent already began (a crash between the fence and the accept)."""
    rows = work.db.read("SELECT id, envelope FROM dispatches WHERE lease = ? AND ticket = ?",
                        row["lease"], row["ticket"])  # fmt: skip
    for r in rows:
        if json.loads(r["envelope"]).get("run_id") == body["run_id"]:
            return str(r["id"])
    return None


def propose_dispatch(work: Work, conductor: str, req: m.ProposeDispatch) -> dict[str, Any]:
    """The advised intent becomes a dispatch: `begin_dispatch` persists the envelope (the
    ticket `running`) before any delivery; the intent is `accepted`. No worker starts."""
    _session(work, conductor)
    _fresh(work, req.nonce)
    row = _intent(work, conductor, req.intent)
    if row["state"] != "advised":
        raise WrongState(f"intent {row['id']} is {row['state']}, not advised; nothing changed")
    advice = json.loads(row["advice"] or "{}")
    if advice.get("verdict") != "approve":
        raise IntentRefused(f"the advisor's verdict on intent {row['id']} is "
                            f"{advice.get('verdict')}, not approve; nothing changed")  # fmt: skip
    if not (req.digest == row["digest"] == row["advised_digest"]):
        raise IntentRefused(f"intent {row['id']} is not the one advised (digest differs); "
                            "nothing changed")  # fmt: skip
    body = _body(work, row)
    begun = _begun(work, row, body)
    if begun is not None:  # the envelope is persisted already: only the accept is missing
        _accept(work, row, begun, req.nonce)
        return {"dispatch": begun, "intent": row["id"], "state": "accepted"}
    _current(work, row, body)
    role = _eligible(work, body["role"], "worktree-write")
    if (role.provider, role.engine, role.model) != (body["provider"], body["engine"],
                                                    body["model"]):  # fmt: skip
        raise IntentRefused(f"role {role.name} changed in the policy since intent {row['id']} "
                            "was prepared; prepare again")  # fmt: skip
    if work.base() != body["base"]:
        raise IntentRefused("the default branch moved since the intent was prepared; "
                            "prepare again")  # fmt: skip
    token = tokens.held(work.repo.repo_id, row["ticket"])
    if token_digest(token) != row["lease"]:
        raise LeaseRefused(f"oms holds another lease of {row['ticket']} than intent "
                           f"{row['id']}'s; prepare again")  # fmt: skip
    plan = DispatchPlan.model_validate({k: body[k] for k in PLAN_FIELDS if k in body})
    snap = budget.snapshot(work, row["ticket"])  # as it is now, when the dispatch is made
    budget.require_left(snap)
    plan = plan.model_copy(update={"budget": snap})
    d = work.begin_dispatch(row["ticket"], token, plan, req.nonce,
                            min_left_s=dispatching.LEASE_MARGIN_S + 1)  # fmt: skip
    _accept(work, row, d.id, f"{req.nonce}:accept")
    return {"dispatch": d.id, "intent": row["id"], "state": "accepted"}


# -- 5. manage_worker ---------------------------------------------------------------------------


def manage_worker(work: Work, conductor: str, req: m.ManageWorker) -> dict[str, Any]:
    _session(work, conductor)
    _fresh(work, req.nonce)
    if not work.db.read("SELECT 1 FROM workers w JOIN teams t ON t.id = w.team "
                        "WHERE w.id = ? AND t.conductor = ?", req.worker, conductor):  # fmt: skip
        raise NotFound(f"no worker {req.worker} of conductor session {conductor}")
    view = workers.control(work, req.worker, req.action, req.nonce)
    return {"worker": view.id, "state": view.state, "version": view.version,
            "dispatch": view.dispatch, "ticket": view.ticket}  # fmt: skip


# -- 6. start_team ------------------------------------------------------------------------------


def start_team(work: Work, conductor: str, req: m.StartTeam) -> dict[str, Any]:
    """A team: 1..8 accepted (`started`) dispatches of one goal, each in its own pane. A
    worker that cannot start refuses the call (TeamIncomplete), naming those that did."""
    _session(work, conductor)
    _fresh(work, req.nonce)
    ids = list(req.dispatches)
    if not 1 <= len(ids) <= m.MAX_TEAM:
        raise UsageError(f"a team is 1 to {m.MAX_TEAM} dispatches, not {len(ids)}")
    if len(set(ids)) != len(ids):
        raise UsageError("a dispatch is named twice in the team")
    goals: set[str] = set()
    for did in ids:
        d = work.dispatch(did)
        if d.state != "started":
            raise WrongState(f"dispatch {did} is {d.state}, not started; nothing changed")
        if not work.db.read("SELECT 1 FROM intents WHERE dispatch = ? AND conductor = ? AND "
                            "state = 'accepted'", did, conductor):  # fmt: skip
            raise Blocked(f"dispatch {did} was not accepted through this conductor's bridge")
        if work.db.read("SELECT 1 FROM workers WHERE dispatch = ?", did):
            raise WrongState(f"dispatch {did} has a worker already; nothing changed")
        goals.add(work.ticket(d.ticket).goal)
    if len(goals) != 1:
        raise Blocked("a team's dispatches belong to one goal; these belong to "
                      f"{len(goals)}")  # fmt: skip
    goal = goals.pop()
    team = new_id("team")
    with work.fenced(req.nonce, "team.start") as tx:
        tx.run("INSERT INTO teams (id, conductor, goal, dispatches, created) VALUES "
               "(?, ?, ?, ?, ?)", team, conductor, goal, json.dumps(ids), tx.now)  # fmt: skip
        _record(tx, p.TeamStarted, "team", team, None, goal, None, "started", 1, req.nonce,
                size=len(ids), conductor=conductor)  # fmt: skip
    started, failed = [], []
    for i, did in enumerate(ids):
        try:
            started.append(workers.start_worker(work, did, f"{req.nonce}:w{i}", team))
        except OmsError as exc:  # the others still start: each is its own accepted dispatch
            failed.append(f"{did}: {exc.message}")
    if failed:
        begun = ", ".join(w.id for w in started) or "none"
        raise TeamIncomplete(f"team {team}: {len(started)} of {len(ids)} workers started "
                             f"({begun}); not started: {'; '.join(failed)}"[:600])  # fmt: skip
    return {"team": team, "goal": goal,
            "workers": [{"worker": w.id, "dispatch": w.dispatch, "state": w.state}
                        for w in started]}  # fmt: skip


# -- 7. process_result --------------------------------------------------------------------------


def process_result(work: Work, conductor: str, req: m.ProcessResult) -> dict[str, Any]:
    """The installed gate on a `verifying` ticket (result gate + one grade); a
    READY_FOR_HUMAN ticket is delivered when `[conductor] remote` is set. On a `completed`
    ticket whose delivery is not `confirmed` (it stopped, or `oms verify` completed it), the
    delivery resumes; the gate does not run again. Never approves."""
    _session(work, conductor)
    _fresh(work, req.nonce)
    t = work.ticket(req.ticket)
    resume = (
        t.state == "completed"
        and bool(work.loaded.policy.conductor.remote)
        and not work.db.read(
            "SELECT 1 FROM deliveries WHERE ticket = ? AND state = 'confirmed'", t.id
        )
    )
    if t.state != "verifying" and not resume:
        raise WrongState(f"ticket {t.id} is {t.state}, not verifying; nothing changed")
    if not work.db.read("SELECT 1 FROM intents WHERE ticket = ? AND conductor = ? AND "
                        "state = 'accepted'", t.id, conductor):  # fmt: skip
        raise Blocked(f"ticket {t.id} was not dispatched through this conductor's bridge")
    if resume:
        shipped = deliver.deliver_ticket(work, t.id, f"{req.nonce}:deliver")
        return {"ticket": t.id, "state": t.state, "decision": "READY_FOR_HUMAN",
                "delivery": str(shipped["delivery"]["state"])}  # fmt: skip
    data, _code = verify.verify(work.repo.top, t.id, req.nonce)
    state = data["ticket"]["state"]
    decision = data["verdict"]["decision"]
    delivery: str | None = None
    if (decision == "READY_FOR_HUMAN" and state == "completed"
            and work.loaded.policy.conductor.remote):  # fmt: skip
        shipped = deliver.deliver_ticket(work, t.id, f"{req.nonce}:deliver")
        delivery = str(shipped.get("delivery", {}).get("state"))
    return {"ticket": t.id, "state": state, "decision": decision, "delivery": delivery}


HANDLERS: dict[str, tuple[type[Any], Any]] = {
    "propose_goal": (m.ProposeGoal, propose_goal),
    "prepare_dispatch": (m.PrepareDispatch, prepare_dispatch),
    "advise_dispatch": (m.AdviseDispatch, advise_dispatch),
    "propose_dispatch": (m.ProposeDispatch, propose_dispatch),
    "manage_worker": (m.ManageWorker, manage_worker),
    "start_team": (m.StartTeam, start_team),
    "process_result": (m.ProcessResult, process_result),
}


def call(work: Work, conductor: str, tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """One tool call: `args` validated by the tool's strict model, then the tool."""
    if tool not in HANDLERS:
        raise UsageError(f"the bridge has no tool {tool[:40]!r}")
    model, fn = HANDLERS[tool]
    try:
        req = model.model_validate(dict(args))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "input"
        raise UsageError(f"{tool}: {where}: {first['msg']}"[:300]) from None
    out: dict[str, Any] = fn(work, conductor, req)
    batch = getattr(req, "notification", None)
    if batch is not None:  # after the tool's own change: a refusal above consumed nothing
        try:
            waiter.consume(work, conductor, batch, f"{req.nonce}:notification")
            out["notification"] = "consumed"
        except OmsError as exc:
            out["notification"] = f"{exc.kind}: {exc.message}"[: m.MAX_REASON_CHARS]
    return out
