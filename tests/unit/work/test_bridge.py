"""The conductor bridge's tools in-process: goal -> prepare -> advise -> propose, and every
refusal changing nothing (the whole work.db and the evidence log, `snapshot`).

One `oms init`ed repository for the module (real git, the runs lab's scripted `command:`
roles); the advisor is a scripted `command:` provider run under the real `oms agent run`
(bwrap), read-only, answering the advice schema (or not, when the task says `[garbage]`).
Each test makes its own goal and ticket, so the tests do not see each other's state.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.bridge import bridge_lab, new_session
from support.runs import NEEDS, RunLab, module_env
from support.work import Clock, nonce, open_work, snapshot

from gatekeeper.errors import Blocked, NotFound, Unavailable, UsageError
from gatekeeper.work.conductor import bridge as b
from gatekeeper.work.conductor import sessions, tokens, waiter, workers
from gatekeeper.work.conductor.intents import AdviceRefused
from gatekeeper.work.fence import LeaseRefused, NonceReplayed, StaleVersion, Work
from gatekeeper.work.providers.base import RoleUnavailable

pytestmark = pytest.mark.skipif(not NEEDS, reason="needs /usr/bin/bwrap and /usr/bin/python3")


@dataclass
class Lab:
    lab: RunLab
    conductor: str

    @property
    def repo(self) -> Path:
        return self.lab.repo


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("bridge")
    with pytest.MonkeyPatch.context() as mp:
        env = module_env(root, mp)
        runs = bridge_lab(root, env)
        work = open_work(runs.repo)
        try:
            cid = new_session(work)
        finally:
            work.close()
        yield Lab(runs, cid)


@pytest.fixture
def work(lab: Lab, monkeypatch: pytest.MonkeyPatch) -> Iterator[Work]:
    for k in ("HOME", "OMS_HOME", "OMS_WORK_DIR"):
        monkeypatch.setenv(k, lab.lab.env[k])
    w = open_work(lab.repo, Clock(time.time()))
    try:
        yield w
    finally:
        w.close()


def call(work: Work, lab: Lab, tool: str, **args: Any) -> dict[str, Any]:
    return b.call(work, lab.conductor, tool, {"nonce": nonce(), **args})


def ticket_of(work: Work, lab: Lab) -> tuple[str, str]:
    goal = call(work, lab, "propose_goal", objective="ship it", stop_when="when shipped",
                horizon="until-empty")["goal"]  # fmt: skip
    return goal, work.add_ticket(goal, "a ticket", b"the body", nonce()).id


def prepared(work: Work, lab: Lab, task: str = "implement feature()") -> dict[str, Any]:
    goal, ticket = ticket_of(work, lab)
    out = call(work, lab, "prepare_dispatch", goal=goal, ticket=ticket, role="implementer",
               task=task)  # fmt: skip
    return {**out, "goal": goal, "ticket": ticket}


def advised(work: Work, lab: Lab, task: str = "implement feature()") -> dict[str, Any]:
    got = prepared(work, lab, task)
    advice = call(work, lab, "advise_dispatch", intent=got["intent"], digest=got["digest"])
    return {**got, "advice": advice}


def refused(work: Work, exc: type[Exception], fn: Any, *args: Any, **kwargs: Any) -> str:
    before = snapshot(work)
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    assert snapshot(work) == before, "a refusal changed state"
    return str(info.value)


# -- the happy path --------------------------------------------------------------------------


def test_goal_prepare_advise_propose_makes_a_started_dispatch_and_hides_the_lease(
    work: Work, lab: Lab
) -> None:
    got = advised(work, lab)
    assert got["advice"]["verdict"] == "approve" and got["advice"]["state"] == "advised"
    assert got["advice"]["reasons"] == [f"advised {got['digest']}"]  # it read this digest
    out = call(work, lab, "propose_dispatch", intent=got["intent"], digest=got["digest"])
    assert out["state"] == "accepted" and out["intent"] == got["intent"]
    d = work.dispatch(out["dispatch"])
    assert d.state == "started" and d.ticket == got["ticket"] and d.envelope.role == "implementer"
    assert work.ticket(got["ticket"]).state == "running"
    (row,) = work.db.read("SELECT * FROM intents WHERE id = ?", got["intent"])
    assert row["state"] == "accepted" and row["dispatch"] == d.id
    assert row["advised_digest"] == row["digest"] == got["digest"]
    assert row["conductor"] == lab.conductor
    # The intent document is the evidence blob its digest names; the lease token is only oms'.
    body = json.loads(work.store.blobs.get(row["body_blob"].removeprefix("sha256:")))
    assert body["task"] == "implement feature()" and body["lease"] == d.envelope.lease
    assert body["session_policy"] == b.SESSION_POLICY and body["base"] == d.envelope.base
    token = tokens.held(work.repo.repo_id, got["ticket"])
    assert token not in json.dumps([got, out]) and "lease-" not in json.dumps([got, out])
    kinds = [e.kind for e in work.store.entries(["work.intent"])
             if e.data.get("id") == got["intent"]]  # fmt: skip
    assert len(kinds) == 3  # prepared, advised, accepted


def test_prepare_attaches_a_ticket_of_another_goal_only_when_told_where_it_is(
    work: Work, lab: Lab
) -> None:
    """A GitHub ticket sits in the standing goal; the conductor brings it into the goal the
    human made with `attach_from`, fenced on the ticket's goal and version: the move and
    the lease, each recorded. Without it, or naming the wrong goal, nothing changes."""
    standing = work.create_goal("GitHub issues", "never", "until-empty", nonce()).id
    ticket = work.add_ticket(standing, "#7 from GitHub", b"its text", nonce()).id
    human = call(work, lab, "propose_goal", objective="the frontend", stop_when="it ships",
                 horizon="until-empty")["goal"]  # fmt: skip
    args = {"goal": human, "ticket": ticket, "role": "implementer", "task": "do #7"}
    refused(work, Blocked, call, work, lab, "prepare_dispatch", **args)
    refused(work, Blocked, call, work, lab, "prepare_dispatch", **args, attach_from=human)
    refused(work, RoleUnavailable, call, work, lab, "prepare_dispatch",
            **{**args, "role": "planner"}, attach_from=standing)  # fmt: skip
    out = call(work, lab, "prepare_dispatch", **args, attach_from=standing)
    assert out["state"] == "prepared"
    t = work.ticket(ticket)
    assert t.goal == human and t.state == "leased" and work.tickets(goal=standing) == []
    (moved,) = [e for e in work.store.entries(["work.ticket.move"]) if e.data["id"] == ticket]
    assert moved.data["goal"] == human and moved.data["detail"] == {"from_goal": standing}


def test_a_replayed_nonce_changes_nothing_and_is_refused(work: Work, lab: Lab) -> None:
    n = nonce()
    args = {"objective": "o", "stop_when": "s", "horizon": "12h", "nonce": n}
    b.call(work, lab.conductor, "propose_goal", args)
    refused(work, NonceReplayed, b.call, work, lab.conductor, "propose_goal", args)
    goal, ticket = ticket_of(work, lab)
    prep = {"goal": goal, "ticket": ticket, "role": "implementer", "task": "t", "nonce": nonce()}
    got = b.call(work, lab.conductor, "prepare_dispatch", prep)
    refused(work, NonceReplayed, b.call, work, lab.conductor, "prepare_dispatch", prep)
    advise = {"intent": got["intent"], "digest": got["digest"], "nonce": n}  # a used nonce
    refused(work, NonceReplayed, b.call, work, lab.conductor, "advise_dispatch", advise)


# -- refusals ----------------------------------------------------------------------------------


def test_a_changed_intent_after_advice_is_refused(work: Work, lab: Lab) -> None:
    got = advised(work, lab)
    other = "sha256:" + "0" * 64
    msg = refused(work, Blocked, call, work, lab, "propose_dispatch", intent=got["intent"],
                  digest=other)  # fmt: skip
    assert "not the one advised" in msg
    # The intent itself changed after its advice (its digest is no longer the advised one).
    with work.db.mutation() as conn:
        conn.execute("UPDATE intents SET digest = ? WHERE id = ?", (other, got["intent"]))
    refused(work, Blocked, call, work, lab, "propose_dispatch", intent=got["intent"], digest=other)
    assert work.ticket(got["ticket"]).state == "leased"


def test_an_expired_or_stale_lease_is_refused(work: Work, lab: Lab) -> None:
    got = advised(work, lab)
    assert isinstance(work.clock, Clock)
    work.clock.advance(work.lease_ttl_s + 1)  # expired
    msg = refused(work, LeaseRefused, call, work, lab, "propose_dispatch",
                  intent=got["intent"], digest=got["digest"])  # fmt: skip
    assert "expired" in msg
    # Stale: the ticket was leased again meanwhile (recovery); the intent's lease is gone.
    t = work.ticket(got["ticket"])
    work.lease_ticket(t.id, t.version, nonce())
    refused(work, LeaseRefused, call, work, lab, "propose_dispatch", intent=got["intent"],
            digest=got["digest"])  # fmt: skip
    # A prepared intent whose lease went stale the same way is not advised either.
    other = prepared(work, lab)
    work.clock.advance(work.lease_ttl_s + 1)
    t = work.ticket(other["ticket"])
    work.lease_ticket(t.id, t.version, nonce())
    refused(work, LeaseRefused, call, work, lab, "advise_dispatch", intent=other["intent"],
            digest=other["digest"])  # fmt: skip


def test_a_changed_ticket_version_is_refused(work: Work, lab: Lab) -> None:
    got = prepared(work, lab)
    with work.db.mutation() as conn:
        conn.execute("UPDATE tickets SET version = version + 1 WHERE id = ?", (got["ticket"],))
    refused(work, StaleVersion, call, work, lab, "advise_dispatch", intent=got["intent"],
            digest=got["digest"])  # fmt: skip


def test_a_read_only_or_unknown_role_is_refused(work: Work, lab: Lab) -> None:
    goal, ticket = ticket_of(work, lab)
    for role in ("planner", "grader", "nosuchrole"):
        refused(work, RoleUnavailable, call, work, lab, "prepare_dispatch", goal=goal,
                ticket=ticket, role=role, task="t")  # fmt: skip
    assert work.ticket(ticket).state == "pending"


def test_an_advisor_answering_outside_the_schema_is_refused(work: Work, lab: Lab) -> None:
    """The advisor did run: its own `oms agent run` entries are the only ones added (a run
    is always recorded); the db and every `work.*` record stay as they were."""
    got = prepared(work, lab, "do it [garbage]")
    db, head, _ = snapshot(work)
    with pytest.raises(AdviceRefused):
        call(work, lab, "advise_dispatch", intent=got["intent"], digest=got["digest"])
    assert snapshot(work)[0] == db
    added = [work.store.entry(seq).kind for seq in range(head, work.store.head())]
    assert added == ["agent.run.start", "agent.run.end"]
    # With no advice, nothing can be proposed.
    refused(work, Blocked, call, work, lab, "propose_dispatch", intent=got["intent"],
            digest=got["digest"])  # fmt: skip


def test_an_advice_other_than_approve_is_never_proposed(work: Work, lab: Lab) -> None:
    got = advised(work, lab, "do it [revise]")
    assert got["advice"]["verdict"] == "revise"
    msg = refused(work, Blocked, call, work, lab, "propose_dispatch", intent=got["intent"],
                  digest=got["digest"])  # fmt: skip
    assert "revise, not approve" in msg
    # Nor is the same intent advised again until an advisor says yes: prepare a revised one.
    msg = refused(work, Blocked, call, work, lab, "advise_dispatch", intent=got["intent"],
                  digest=got["digest"])  # fmt: skip
    assert "only a prepared intent is advised, once" in msg


def test_bad_input_unknown_fields_and_other_sessions_are_refused(work: Work, lab: Lab) -> None:
    goal, ticket = ticket_of(work, lab)
    good = {"goal": goal, "ticket": ticket, "role": "implementer", "task": "t"}
    for bad in ({**good, "role": "--help"}, {**good, "extra": 1}, {**good, "task": ""},
                {**good, "ticket": "../x"}, {**good, "task": "x" * 9000}):  # fmt: skip
        refused(work, UsageError, call, work, lab, "prepare_dispatch", **bad)
    refused(work, UsageError, call, work, lab, "merge", ticket=ticket)
    # A conductor's nonce has no ':', so it can never be one of oms' derived `N:lease`.
    refused(work, UsageError, b.call, work, lab.conductor, "prepare_dispatch",
            {**good, "nonce": "abcdefgh:lease"})  # fmt: skip
    refused(work, NotFound, b.call, work, "c-" + "0" * 12, "prepare_dispatch",
            {**good, "nonce": nonce()})  # fmt: skip
    other = new_session(work)
    c = sessions.get(work, other)
    sessions.move(work, other, c.version, "stopped", nonce())
    refused(work, Blocked, b.call, work, other, "prepare_dispatch", {**good, "nonce": nonce()})


def test_a_team_of_nine_or_of_unaccepted_dispatches_is_refused(work: Work, lab: Lab) -> None:
    ids = [f"d-{i:012x}" for i in range(9)]
    refused(work, UsageError, call, work, lab, "start_team", dispatches=ids)
    refused(work, UsageError, call, work, lab, "start_team", dispatches=[])
    refused(work, NotFound, call, work, lab, "start_team", dispatches=ids[:2])


def test_a_team_of_accepted_dispatches_starts_one_worker_each(
    work: Work, lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`workers.start_worker` (the panes, tested in test_conductor_panes) stood in for here."""
    got = advised(work, lab)
    d = call(work, lab, "propose_dispatch", intent=got["intent"], digest=got["digest"])
    started: list[tuple[str, str | None]] = []

    def start(w: Work, did: str, n: str, team: str | None = None) -> workers.WorkerView:
        started.append((did, team))
        return workers.WorkerView("w-" + "1" * 12, did, got["ticket"], team, "starting", 1,
                                  None, None)  # fmt: skip

    monkeypatch.setattr(workers, "start_worker", start)
    out = call(work, lab, "start_team", dispatches=[d["dispatch"]])
    assert started == [(d["dispatch"], out["team"])] and out["goal"] == got["goal"]
    (row,) = work.db.read("SELECT * FROM teams WHERE id = ?", out["team"])
    assert json.loads(row["dispatches"]) == [d["dispatch"]] and row["conductor"] == lab.conductor


def test_a_team_whose_second_worker_cannot_start_says_which_one_did(
    work: Work, lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No partial success shown as success: the first worker runs on (its dispatch is
    accepted work), the call is refused, and the refusal names the one that started."""
    goal = call(work, lab, "propose_goal", objective="two at once", stop_when="both done",
                horizon="until-empty")["goal"]  # fmt: skip
    dispatches = []
    for title in ("first", "second"):
        ticket = work.add_ticket(goal, title, b"body", nonce()).id
        got = call(work, lab, "prepare_dispatch", goal=goal, ticket=ticket,
                   role="implementer", task=f"do the {title}")  # fmt: skip
        call(work, lab, "advise_dispatch", intent=got["intent"], digest=got["digest"])
        dispatches.append(call(work, lab, "propose_dispatch", intent=got["intent"],
                               digest=got["digest"])["dispatch"])  # fmt: skip

    def start(w: Work, did: str, n: str, team: str | None = None) -> workers.WorkerView:
        if did == dispatches[1]:
            raise Unavailable("tmux is gone")
        return workers.WorkerView("w-" + "4" * 12, did, "t-" + "0" * 12, team, "running", 2,
                                  None, None)  # fmt: skip

    monkeypatch.setattr(workers, "start_worker", start)
    with pytest.raises(b.TeamIncomplete) as info:
        call(work, lab, "start_team", dispatches=dispatches)
    message = str(info.value)
    assert "1 of 2 workers started (w-444444444444)" in message
    assert f"not started: {dispatches[1]}: tmux is gone" in message


def test_a_worker_is_managed_only_by_the_conductor_whose_team_it_is_in(
    work: Work, lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = advised(work, lab)
    d = call(work, lab, "propose_dispatch", intent=got["intent"], digest=got["digest"])
    wid = "w-" + "5" * 12

    def start(w: Work, did: str, n: str, team: str | None = None) -> workers.WorkerView:
        with w.db.mutation() as conn:  # the row a pane's start writes, without the pane
            conn.execute(
                "INSERT INTO workers (id, dispatch, ticket, team, version, state, "
                "socket, session, created, updated) VALUES (?, ?, ?, ?, 1, "
                "'running', 's', 's', 'now', 'now')",
                (wid, did, got["ticket"], team),
            )
        return workers.get(w, wid)

    monkeypatch.setattr(workers, "start_worker", start)
    call(work, lab, "start_team", dispatches=[d["dispatch"]])
    controlled: list[str] = []
    monkeypatch.setattr(
        workers,
        "control",
        lambda w, worker, action, n: controlled.append(worker) or workers.get(w, worker),
    )
    other = new_session(work)
    refused(work, NotFound, b.call, work, other, "manage_worker",
            {"worker": wid, "action": "stop", "nonce": nonce()})  # fmt: skip
    assert controlled == []
    call(work, lab, "manage_worker", worker=wid, action="observe")
    assert controlled == [wid]


def test_process_result_refuses_a_ticket_that_is_not_verifying(work: Work, lab: Lab) -> None:
    _, ticket = ticket_of(work, lab)
    refused(work, Blocked, call, work, lab, "process_result", ticket=ticket)
    refused(work, NotFound, call, work, lab, "manage_worker", worker="w-" + "2" * 12,
            action="observe")  # fmt: skip


def test_a_notification_read_is_consumed_only_after_the_call_succeeds(
    work: Work, lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`waiter.consume` (tested in test_waiter) stood in for here."""
    consumed: list[tuple[str, str]] = []

    def consume(w: Work, conductor: str, batch: str, n: str) -> dict[str, Any]:
        consumed.append((conductor, batch))
        return {}

    monkeypatch.setattr(waiter, "consume", consume)
    batch = "n-" + "3" * 12
    out = call(work, lab, "propose_goal", objective="o", stop_when="s", horizon="24h",
               notification=batch)  # fmt: skip
    assert out["notification"] == "consumed" and consumed == [(lab.conductor, batch)]
    refused(work, UsageError, call, work, lab, "propose_goal", objective="", stop_when="s",
            horizon="24h", notification=batch)  # fmt: skip
    # The controls take no notification.
    refused(work, UsageError, call, work, lab, "start_team", dispatches=["d-" + "1" * 12],
            notification=batch)  # fmt: skip
    assert len(consumed) == 1
