"""The implement steps: the implementer through the core's ticket, lease, dispatch and
receipt; then `oms verify` (the result gate decides).

DESIGN.md "Orchestration": nothing in a run bypasses the core. The run owns one goal and one
ticket, created once (after the plan gate is passed, so the ticket's body is the approved
plan) and recorded on the run before anything is leased, so a refusal later never creates
a second one. Each attempt is a fresh lease and one `dispatch` under the implementer's
transfer (re-checked there by `approved_transfer`); the ticket's state after it decides the
run's: `verifying` (a receipt), `retryable` (the next advance is the next attempt) or
`blocked` (the run fails). `verify` is the core's result gate and one grade; its verdict is
final and nothing here turns a failure into a pass.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gatekeeper.work import roles
from gatekeeper.work.dispatch import dispatch
from gatekeeper.work.fence import LEASABLE, RECOVERABLE, Work, new_nonce
from gatekeeper.work.model import MAX_BODY_BYTES, Ticket
from gatekeeper.work.providers.base import Role, RoleUnavailable
from gatekeeper.work.runs import engine, gates, mapping
from gatekeeper.work.runs.engine import Progress, step
from gatekeeper.work.runs.gates import Cleared
from gatekeeper.work.runs.model import Run
from gatekeeper.work.runs.store import NewArtifact, Runs
from gatekeeper.work.verify import verify as core_verify

Events = list[tuple[str, Mapping[str, Any]]]
PLAN_RULE = "runs.autopilot"
TITLE_CHARS = 120


def approved_plan(runs: Runs, run: Run) -> tuple[str | None, str]:
    """The plan the implementer works to: the latest `plan` artifact (ref, text)."""
    plans = [x for x in runs.artifacts(run.id) if x.kind == "plan"]
    if not plans:
        return None, ""
    return plans[-1].ref, runs.content(plans[-1]).decode("utf-8", "replace")


def implementer(work: Work, run: Run) -> Role:
    """The run's implementer, eligible unattended and able to write (refused before a lease
    is taken, so a role that cannot run never leaves the ticket leased)."""
    role = roles.require(mapping.role_of(work.loaded, run.roles, "implementer"), unattended=True)
    if role.authority != "worktree-write":
        raise RoleUnavailable(f"role {role.name} is read-only; an implement run's implementer "
                              "is a worktree-write role")  # fmt: skip
    return role


def _title(run: Run) -> str:
    first = next((ln.strip() for ln in run.objective.splitlines() if ln.strip()), run.id)
    return first[:TITLE_CHARS]


def ticket_body(runs: Runs, run: Run) -> tuple[str | None, bytes]:
    """The goal text and the approved plan, within the core's body bound (a longer plan is
    cut, saying so: the whole plan stays the run's artifact)."""
    ref, text = approved_plan(runs, run)
    head = f"{run.objective}\n\n## Approved plan ({ref or 'none: no planner in this run'})\n\n"
    body = (head + text).encode()
    if len(body) > MAX_BODY_BYTES:
        note = f"\n\n(cut here: the whole plan is artifact {ref} of run {run.id})".encode()
        body = body[: MAX_BODY_BYTES - len(note)].decode("utf-8", "ignore").encode() + note
    return ref, body


def _ticket_created(work: Work, runs: Runs, run: Run, events: Events) -> Progress:
    """The run's goal and ticket, once: the goal text and the approved plan as the body."""
    goal = work.create_goal(run.objective, "the ticket is completed by the result gate",
                            "until-empty", new_nonce())  # fmt: skip
    ref, body = ticket_body(runs, run)
    ticket = work.add_ticket(goal.id, _title(run), body, new_nonce())
    return engine.move(runs, run, "implementing", "implement", goal=goal.id, ticket=ticket.id,
                       events=[*events, ("ticket_created", {"goal": goal.id,
                                                            "ticket": ticket.id,
                                                            "plan": ref})])  # fmt: skip


def _purpose(runs: Runs, run: Run, what: str) -> str:
    """The manifest's purpose: the goal and the approved plan's summary (scanned too)."""
    plans = [x for x in runs.artifacts(run.id) if x.kind == "plan"]
    plan = f"plan {plans[-1].ref}: {plans[-1].summary}" if plans else "no plan"
    return f"oms run {run.id} ({run.mode}), {what}: {run.objective}\n\n{plan}"


def dispatch_artifact(got: Mapping[str, Any]) -> NewArtifact:
    d = got["dispatch"]
    summary = (f"dispatch {d['id']} attempt {d['attempt']}: {d['state']}, exit "
               f"{d['exit_code']}, candidate {d['candidate'] or 'none'}")  # fmt: skip
    return NewArtifact(kind="log", data=json.dumps(got, sort_keys=True, indent=1).encode(),
                       summary=summary[:300], media_type="application/json",
                       role="implementer")  # fmt: skip


def _dispatched(work: Work, runs: Runs, run: Run, role: Role, cleared: Cleared,
                ticket: Ticket) -> Progress:  # fmt: skip
    lease, _ = work.lease_ticket(ticket.id, ticket.version, new_nonce())
    gates.use_up(work, cleared)  # the approval is spent as the context leaves, not after
    got = dispatch(work.repo.top, ticket.id, lease.token, role.name, new_nonce(),
                   transfer=cleared.transfer)  # fmt: skip
    art = dispatch_artifact(got)
    d, t = got["dispatch"], got["ticket"]
    events: Events = [*cleared.events(),
                      ("dispatched", {"dispatch": d["id"], "attempt": d["attempt"],
                                      "state": d["state"], "ticket_state": t["state"],
                                      "transfer": cleared.transfer})]  # fmt: skip
    if t["state"] == "verifying":
        return engine.move(runs, run, "verifying", "verify", artifacts=[art], events=events)
    if t["state"] == "retryable":
        return engine.move(runs, run, "implementing", "implement", artifacts=[art],
                           events=events)  # fmt: skip
    return engine.fail(runs, run, f"the ticket {ticket.id} is {t['state']}: "
                       f"{t['reason'] or d['reason'] or 'no result'}", artifacts=[art],
                       events=events)  # fmt: skip


@step("implement")
def implement(work: Work, runs: Runs, run: Run) -> Progress:
    """Past the plan gate, then the ticket once, then the implementer's transfer gate, then
    one attempt through the core."""
    events: Events = []
    if run.gate is not None and run.gate.kind == "plan":
        if not gates.auto_passes(work, run.gate):
            return Progress(run, False)  # only a human at a terminal passes it
        events.append(("approval_auto_approved", {"gate": "plan", "rule": PLAN_RULE,
                                                  "artifact": run.gate.artifact}))  # fmt: skip
    role = implementer(work, run)
    if run.ticket is None:
        return _ticket_created(work, runs, run, events)
    ticket = work.ticket(run.ticket)
    if ticket.state not in LEASABLE + RECOVERABLE:
        return engine.fail(runs, run, f"the ticket {ticket.id} is {ticket.state}; an implement "
                           "step leases only a pending or retryable ticket")  # fmt: skip
    cleared = engine.through_transfer(work, runs, run, role, "implementer", "implement",
                                      _purpose(runs, run, "implementer implements"))  # fmt: skip
    if isinstance(cleared, Progress):
        return cleared
    return _dispatched(work, runs, run, role, cleared, ticket)


def grader(work: Work) -> Role:
    """The `[work] grader` role (the core's verify checks the rest: engine, authority)."""
    return roles.resolve(work.loaded, work.loaded.policy.work.grader)


def verdict_artifact(got: Mapping[str, Any]) -> NewArtifact:
    v, grade = got["verdict"], got.get("grade")
    summary = (f"result gate: {v.get('decision')}; grade: "
               f"{grade['grade'] if grade else got.get('grade_problem') or 'none'}; ticket "
               f"{got['ticket']['state']}")  # fmt: skip
    return NewArtifact(kind="report", data=json.dumps(got, sort_keys=True, indent=1).encode(),
                       summary=summary[:300], media_type="application/json",
                       role="verifier")  # fmt: skip


@step("verify")
def verify(work: Work, runs: Runs, run: Run) -> Progress:
    """The grader's transfer gate, then the core's `verify` of the run's ticket; its
    ticket state decides the run's. The lease the receipt was filed under must still be
    live (the core refuses a verify without it)."""
    assert run.ticket is not None, "a verify step follows a receipt"
    if work.lease_left(run.ticket) <= 0:
        # the lease ran out (a long wait at the grader's gate): the core recovers the ticket
        # when it is leased again, as a new attempt; the run does not move the ticket itself
        return engine.move(runs, run, "implementing", "implement",
                           events=[("lease_expired", {"ticket": run.ticket})])  # fmt: skip
    role = grader(work)
    cleared = engine.through_transfer(work, runs, run, role, "verifier", "verify",
                                      _purpose(runs, run, "grader grades"))  # fmt: skip
    if isinstance(cleared, Progress):
        return cleared
    gates.use_up(work, cleared)
    got, _ = core_verify(work.repo.top, run.ticket, transfer=cleared.transfer)
    art = verdict_artifact(got)
    t = got["ticket"]
    events: Events = [*cleared.events(),
                      ("verified", {"decision": got["verdict"].get("decision"),
                                    "grade": (got.get("grade") or {}).get("grade"),
                                    "ticket_state": t["state"]})]  # fmt: skip
    if t["state"] == "completed":
        return engine.move(runs, run, "completed", "verify", artifacts=[art], events=events,
                           stop_reason="the result gate passed it: on human hold")  # fmt: skip
    if t["state"] == "retryable":
        return engine.move(runs, run, "implementing", "implement", artifacts=[art],
                           events=events)  # fmt: skip
    return engine.fail(runs, run, f"the ticket {run.ticket} is {t['state']}: "
                       f"{t['reason'] or 'the result gate did not pass it'}", artifacts=[art],
                       events=events)  # fmt: skip
