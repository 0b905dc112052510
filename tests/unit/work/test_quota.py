"""Quota: a provider's usage-limit response read for its reset (`gatekeeper.agent.quota`),
recorded in-process as ONE `hook.quota` observation that parks the worker's lane by health
(its sessions and running ticket, reason `quota until <reset>`), and the watchdog: not yet
reset → reported `waiting`, nothing changed; past the reset → `resumable`, health
`healthy` again, once. A repeat of the same quota changes nothing; the hook route cannot
carry one (the agent cannot forge it).

A real git repository in tmp_path, `oms init`ed, with a test clock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path

import pytest
from support.conductor import recorded_worker
from support.work import Clock, initialised_work, new_ticket, snapshot

from gatekeeper.agent.quota import DEFAULT_WAIT_S, MAX_WAIT_S, iso, quota_seen, reset_of
from gatekeeper.errors import NotFound, UsageError
from gatekeeper.work.conductor.model import new_id
from gatekeeper.work.events import hooks
from gatekeeper.work.fence import Work
from gatekeeper.work.watchdog import watchdog

NOW = 1_800_000_000.0


def test_the_reset_comes_from_the_headers_that_say_it() -> None:
    at = datetime.fromtimestamp(NOW + 300, UTC)
    assert reset_of({"Retry-After": "42"}, NOW) == (NOW + 42, "retry-after")
    assert reset_of({"retry-after": format_datetime(at, usegmt=True)}, NOW) == (
        NOW + 300, "retry-after")  # fmt: skip
    anthropic = {"anthropic-ratelimit-requests-reset": iso(NOW + 900),
                 "anthropic-ratelimit-requests-remaining": "5",
                 "anthropic-ratelimit-tokens-reset": iso(NOW + 120),
                 "anthropic-ratelimit-tokens-remaining": "0"}  # fmt: skip
    assert reset_of(anthropic, NOW) == (NOW + 120, "anthropic-ratelimit-tokens-reset")
    openai = {"x-ratelimit-reset-requests": "1m30s", "x-ratelimit-remaining-requests": "0",
              "x-ratelimit-reset-tokens": "20ms"}  # fmt: skip
    assert reset_of(openai, NOW) == (NOW + 90, "x-ratelimit-reset-requests")
    assert reset_of({"x-ratelimit-reset-tokens": "soon; rm -rf /"}, NOW) == (
        NOW + DEFAULT_WAIT_S, "default")  # fmt: skip
    assert reset_of({"retry-after": "999999999"}, NOW) == (NOW + MAX_WAIT_S, "retry-after")
    assert quota_seen("openai", 200, {"retry-after": "5"}, NOW) is None
    assert quota_seen("openai", 529, {}, NOW) is None  # 529 is Anthropic's alone
    assert quota_seen(None, 429, {}, NOW) is None
    seen = quota_seen("anthropic", 529, {"retry-after": "5"}, NOW)
    assert seen == {"event": "quota", "provider": "anthropic", "status": 529, "reset": iso(NOW + 5),
                    "source": "retry-after", "observed": iso(NOW)}  # fmt: skip
    hooks.QuotaObservation.model_validate(seen)


@pytest.fixture
def clock() -> Clock:
    return Clock(time.time())


@pytest.fixture
def work(git_repo: Path, oms_home: Path, clock: Clock) -> Iterator[Work]:
    with initialised_work(git_repo, clock) as w:
        yield w


def quota(reset: float, observed: float) -> hooks.QuotaObservation:
    return hooks.QuotaObservation.model_validate(
        {"event": "quota", "provider": "anthropic", "status": 429, "reset": iso(reset),
         "source": "retry-after", "observed": iso(observed)})  # fmt: skip


def health(work: Work, wid: str) -> tuple[str, str | None, list[str]]:
    t = work.db.read("SELECT t.health, t.reason FROM tickets t JOIN workers w ON w.ticket = t.id "
                     "WHERE w.id = ?", wid)[0]  # fmt: skip
    s = work.db.read("SELECT s.health FROM sessions s JOIN workers w ON w.dispatch = s.dispatch "
                     "WHERE w.id = ?", wid)  # fmt: skip
    return t["health"], t["reason"], [r["health"] for r in s]


def test_a_quota_parks_the_lane_until_its_reset_then_the_watchdog_makes_it_resumable(
    work: Work, clock: Clock
) -> None:
    walk = new_ticket(work, "hits its quota").leased(ttl_s=86_400).running()
    wid = recorded_worker(work, walk)
    hooks.observe(work, wid, hooks.Observation.model_validate({
        "client": "claude-code", "event": "SessionStart", "session": "s-quota",
        "observed": iso(clock()), "input_sha256": "2" * 64}))  # fmt: skip
    stall = work.loaded.policy.conductor.stall_after_s
    reset = clock() + stall + 600  # the CLI waits longer than a session may be quiet
    got = hooks.observe_quota(work, wid, quota(reset, clock()))
    assert got.new and got.kind == "hook.quota" and got.batch is not None
    assert health(work, wid) == ("parked", f"quota until {iso(reset)}", ["parked"])
    assert work.ticket(walk.id).state == "running"  # health only
    [event] = work.db.read("SELECT kind, body FROM events WHERE key = ?", got.key)
    assert event["kind"] == "hook.quota" and iso(reset) in event["body"]
    # The same quota seen again (a later response, the same reset): nothing changes.
    before = snapshot(work)
    again = hooks.observe_quota(work, wid, quota(reset, clock() + 5))
    assert (again.key, again.new) == (got.key, False) and snapshot(work) == before
    # A worker that does not exist: refused, nothing changes.
    with pytest.raises(NotFound):
        hooks.observe_quota(work, new_id("w"), quota(reset, clock()))
    assert snapshot(work) == before
    # Not yet reset (quiet past stall_after_s): reported waiting, not stalled; nothing written.
    clock.advance(stall + 60)
    waiting = watchdog(work)
    assert [(q["worker"], q["did"]) for q in waiting["quotas"]] == [(wid, "waiting")]
    assert waiting["evidence_seq"] is None and snapshot(work) == before
    # Past the reset: resumable, healthy again, one watchdog entry; a second pass: nothing.
    clock.advance(600)
    passed = watchdog(work)
    assert [(q["worker"], q["did"]) for q in passed["quotas"]] == [(wid, "resumable")]
    assert passed["evidence_seq"] is not None
    assert health(work, wid) == ("healthy", None, ["healthy"])
    lane = [tuple(r) for r in work.db.read("SELECT state, version FROM quotas")]
    assert lane == [("resumable", 2)]
    # A second pass: the lane is done. (Its now-healthy session may be quiet by the test
    # clock, which runs ahead of the wall clock its rows are stamped with.)
    second = watchdog(work)
    assert second["quotas"] == [] and work.ticket(walk.id).health == "healthy"
    assert [tuple(r) for r in work.db.read("SELECT state, version FROM quotas")] == lane


def test_the_hook_route_cannot_carry_a_quota(work: Work) -> None:
    forged = quota(NOW + 60, NOW).model_dump_json().encode()
    with pytest.raises(UsageError):
        hooks.parse(forged)
    assert hooks.parse_quota(forged).reset == iso(NOW + 60)


def stop(**fields: object) -> bytes:
    doc = {
        "event": "budget",
        "provider": "openai",
        "status": 403,
        "scope": "goal",
        "measure": "tokens",
        "spent": 1200,
        "limit": 1000,
        "observed": iso(NOW),
        **fields,
    }
    return json.dumps({k: v for k, v in doc.items() if v is not None}).encode()


def test_a_stop_parks_the_lane_with_its_reason_once_and_a_quota_does_not_replace_it(
    work: Work, clock: Clock
) -> None:
    walk = new_ticket(work, "spends its budget").leased(ttl_s=86_400).running()
    wid = recorded_worker(work, walk)
    parsed = hooks.parse_quota(stop())
    assert isinstance(parsed, hooks.ParkObservation)
    got = hooks.observe_parked(work, wid, parsed)
    assert got.new and got.kind == "hook.parked" and got.batch is not None  # wakes the conductor
    want = ("budget spent: the goal used 1200 of 1000 tokens; raise [conductor.budget] "
            "goal_tokens in the trusted policy, then resume")  # fmt: skip
    assert health(work, wid)[:2] == ("parked", want)
    assert work.ticket(walk.id).state == "running"  # health only, until the run ends
    # The same stop seen later (the worker's own record after the broker's): nothing changes.
    before = snapshot(work)
    again = hooks.observe_parked(work, wid, hooks.ParkObservation.model_validate_json(
        stop(observed=iso(NOW + 30))))  # fmt: skip
    assert (again.key, again.new) == (got.key, False) and snapshot(work) == before
    # A quota afterwards is recorded, but the reason a human must act on stays.
    hooks.observe_quota(work, wid, quota(clock() + 600, clock()))
    assert health(work, wid)[:2] == ("parked", want)


def test_a_stop_is_typed_and_the_hook_route_cannot_carry_one() -> None:
    with pytest.raises(UsageError):
        hooks.parse(stop())
    with pytest.raises(UsageError):  # a budget stop that does not say what was spent
        hooks.parse_quota(stop(measure=None))
    with pytest.raises(UsageError):  # no free text: the reason is composed outside
        hooks.parse_quota(stop(reason="attach and type yes"))
    login = hooks.parse_quota(stop(event="login", status=401, scope=None, measure=None,
                                   spent=None, limit=None))  # fmt: skip
    assert isinstance(login, hooks.ParkObservation)
    assert login.reason.startswith("the openai API key was refused (401): replace it in "
                                   "$OMS_HOME/providers/openai or OPENAI_API_KEY")  # fmt: skip
