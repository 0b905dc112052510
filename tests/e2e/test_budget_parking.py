"""A worker's spending bound and an expired login park its lane (issue 31): the real
`oms conductor worker` path (`workers.run_worker`, what a worker pane runs), real `oms agent
run` (bwrap) with `--egress api`, the real broker and scanners, real git, the real log.

The executor is a scripted `command:` provider (`egress = "api"`) that speaks to the broker
as a CLI would: streamed `POST $ANTHROPIC_BASE_URL/v1/messages`, writing start and end
markers (with the statuses it got) in its workspace, then exiting 1 as a CLI whose model
refused it does. The provider is a loopback stand-in, since a real one cannot be contacted
here: `tests/support/fake_models.py` (SSE with `usage`), or pytest-httpserver answering 401.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from pytest_httpserver import HTTPServer
from support.conductor import dispatched, recorded_worker
from support.fake_models import fake_anthropic
from support.repos import git, make_repo

from gatekeeper.gates.records import init
from gatekeeper.work import api, roles
from gatekeeper.work.budget import BudgetSpent
from gatekeeper.work.conductor import view, workers
from gatekeeper.work.dispatch import _plan, dispatch
from gatekeeper.work.fence import Work, new_nonce
from gatekeeper.work.model import Spent

PY = "/usr/bin/python3"
pytestmark = pytest.mark.skipif(
    not os.access("/usr/bin/bwrap", os.X_OK) or not os.access(PY, os.X_OK),
    reason="needs /usr/bin/bwrap and /usr/bin/python3",
)
KEY = "sk-ant-test-real-" + "b" * 24
# Two streamed model requests, as a CLI's turn would make; the statuses go in end.marker.
IMPL = r"""
import json, os, urllib.error, urllib.request
open("start.marker", "w").write("oms-budget-start\n")
got = []
for i in range(2):
    body = {"model": "claude-x", "max_tokens": 8, "stream": True,
            "messages": [{"role": "user", "content": "step %d" % i}]}
    req = urllib.request.Request(os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"],
                                          "anthropic-version": "2023-06-01",
                                          "content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            r.read()
            got.append(r.status)
    except urllib.error.HTTPError as e:
        got.append(e.code)
open("end.marker", "w").write("oms-budget-end %s\n" % json.dumps(got))
raise SystemExit(1)
"""


def policy(budget: str) -> str:
    return f"""version = 1

[roles.impl]
provider = "command:impl"
model = "scripted"
auth = "api-key"
billing = "none"
transport = "exec"
authority = "worktree-write"
unattended = true

[providers.impl]
cmd = ["{PY}", "impl.py"]
egress = "api"

[conductor.budget]
{budget}
"""


@pytest.fixture
def lab_of(tmp_path: Path, oms_env: dict[str, str],
           monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:  # fmt: skip
    opened: list[Work] = []

    def make(budget: str, upstream: str) -> Work:
        repo = make_repo(tmp_path / "repo", {"oms.toml": policy(budget), "impl.py": IMPL},
                         env=oms_env)  # fmt: skip
        init(repo)
        monkeypatch.setenv("OMS_WORK_DIR", str(tmp_path / "work"))
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("OMS_EGRESS_UPSTREAM_ANTHROPIC", upstream)
        for k in ("GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL", "GIT_TERMINAL_PROMPT"):
            monkeypatch.setenv(k, oms_env[k])
        opened.append(Work.open(repo))
        return opened[-1]

    yield make
    for w in opened:
        w.close()


def attempt(work: Work, ticket: str | None = None) -> tuple[str, str]:
    """A ticket leased (its token kept by oms), dispatched to `impl`, and run by a recorded
    worker as its pane would: (ticket, dispatch)."""
    d = dispatched(work, "impl", ticket)
    wid = recorded_worker(work, SimpleNamespace(id=d.ticket, dispatch=d.id))  # type: ignore[arg-type]
    assert workers.run_worker(work, wid) == 1
    return d.ticket, d.id


def markers(work: Work, dispatch: str) -> list[int]:
    """The statuses the contained script saw, from the markers oms collected (so it ran)."""
    run = work.dispatch(dispatch).run
    assert run is not None and run.candidate is not None
    assert git(work.repo.top, "show", f"{run.candidate}:start.marker") == "oms-budget-start\n"
    end = git(work.repo.top, "show", f"{run.candidate}:end.marker")
    assert end.startswith("oms-budget-end ")
    return list(json.loads(end.removeprefix("oms-budget-end ")))


def parked_events(work: Work) -> list[dict[str, object]]:
    rows = work.db.read("SELECT body FROM events WHERE kind = 'hook.parked'")
    return [json.loads(r["body"]) for r in rows]


def test_a_budget_of_one_request_refuses_the_second_and_parks_the_lane(lab_of: object) -> None:
    with fake_anthropic("true") as fake:
        work = lab_of("ticket_requests = 1", fake.url)  # type: ignore[operator]
        ticket, did = attempt(work)
        assert len(fake.model_requests()) == 1  # the second never left
    assert markers(work, did) == [200, 403]
    t = work.ticket(ticket)
    want = "budget spent: the ticket used 1 of 1 requests"
    assert t.health == "parked" and (t.reason or "").startswith(want)
    assert t.state == "retryable"  # the attempt is used; the reason says why
    d = work.dispatch(did)
    assert (d.reason or "").startswith(want)
    # What the run spent, from the fake's SSE usage (1 input + 1 output), in oms' state
    # and in the run's evidence; the dispatch's budget snapshot as it was made.
    assert d.run is not None and d.run.spend == Spent(requests=1, tokens=2)
    [end] = [e for e in work.store.entries("agent.run.end") if e.data["run_id"] == d.run_id]
    assert end.data["spend"]["requests"] == 1 and end.data["spend"]["tokens"] == 2
    assert end.data["spend"]["stopped"]["event"] == "budget"
    assert d.envelope.budget is not None and d.envelope.budget.ticket_requests == 1
    assert d.envelope.budget.ticket_spent == Spent()
    [seen] = parked_events(work)  # the broker's publish and the worker's, recorded once
    assert seen["event"] == "budget" and str(seen["reason"]).startswith(want)
    # The HUD says why and suggests the human's resume, not a dispatch that would only stop
    # again; the resume itself is refused while the budget is spent.
    [hint] = [n for n in view.snapshot(work)["next"] if n["what"].startswith(ticket)]
    assert want in hint["what"] and hint["command"] == f"oms ticket resume {ticket}"
    with pytest.raises(BudgetSpent, match="nothing changed"):
        api.resume(work.repo.top, ticket, None)
    # Nothing retries into a spent budget: the next dispatch is refused before it starts.
    role = roles.require(roles.resolve(work.loaded, "impl"), unattended=True)
    with pytest.raises(BudgetSpent, match="budget spent: the ticket used 1 of 1 requests"):
        _plan(work, role, None, ticket)


def test_the_budget_counts_every_attempt_of_the_ticket(lab_of: object) -> None:
    with fake_anthropic("true") as fake:
        work = lab_of("ticket_requests = 3\ngoal_tokens = 1_000", fake.url)  # type: ignore[operator]
        ticket, first = attempt(work)
        assert markers(work, first) == [200, 200]
        assert work.ticket(ticket).health == "healthy"
        _, second = attempt(work, ticket)
        assert len(fake.model_requests()) == 3
    assert markers(work, second) == [200, 403]
    snap = work.dispatch(second).envelope.budget
    assert snap is not None and snap.ticket_spent == Spent(requests=2, tokens=4)
    assert snap.goal_spent == Spent(requests=2, tokens=4)
    t = work.ticket(ticket)
    assert t.health == "parked"
    assert (t.reason or "").startswith("budget spent: the ticket used 3 of 3 requests")


def test_oms_dispatch_holds_its_run_to_the_budget_too(lab_of: object) -> None:
    with fake_anthropic("true") as fake:
        work = lab_of("ticket_requests = 1", fake.url)  # type: ignore[operator]
        goal = work.create_goal("ship it", "tickets done", "until-empty", new_nonce())
        ticket = work.add_ticket(goal.id, "spend", b"talk to the model", new_nonce()).id
        lease, _ = work.lease_ticket(ticket, work.ticket(ticket).version, new_nonce())
        out = dispatch(work.repo.top, ticket, lease.token, "impl", new_nonce())
        assert len(fake.model_requests()) == 1
    assert markers(work, out["dispatch"]["id"]) == [200, 403]
    assert out["dispatch"]["reason"].startswith("budget spent: the ticket used 1 of 1 requests")
    assert out["ticket"]["state"] == "retryable"


def test_a_401_from_the_provider_parks_the_lane_saying_how_to_fix_it(
    lab_of: object, httpserver: HTTPServer
) -> None:
    httpserver.expect_request("/v1/messages", method="POST").respond_with_json(
        {"type": "error", "error": {"type": "authentication_error",
                                    "message": "invalid x-api-key"}}, status=401)  # fmt: skip
    work = lab_of("", httpserver.url_for("/").rstrip("/"))  # type: ignore[operator]
    ticket, did = attempt(work)
    # The provider was asked once: the second request was not sent with the refused key.
    assert len([r for r, _ in httpserver.log if r.path == "/v1/messages"]) == 1
    assert markers(work, did) == [401, 401]
    want = ("the anthropic API key was refused (401): replace it in "
            "$OMS_HOME/providers/anthropic or ANTHROPIC_API_KEY, then resume")  # fmt: skip
    t = work.ticket(ticket)
    assert (t.health, t.reason) == ("parked", want)
    assert work.dispatch(did).reason == want
    [seen] = parked_events(work)
    assert (seen["event"], seen["status"], seen["reason"]) == ("login", 401, want)


@pytest.fixture(autouse=True)
def _no_leftover_workspaces(tmp_path: Path) -> Iterator[None]:
    yield
    shutil.rmtree(tmp_path / "work", ignore_errors=True)
