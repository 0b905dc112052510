"""`oms hud`: one read-only frame of canonical state.

The state is made in process through the fence (a goal, tickets, a conductor session,
events with one pending notification batch); the view is read in process, and the real
CLI is run twice (`--json`, and plain `--once`) to prove that it writes nothing — the
work.db and the evidence log are byte-identical after — and that untrusted text reaches
the terminal sanitised.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.oms import parse_single_json, run_oms
from support.repos import commit_on
from support.work import initialised_work, new_ticket, nonce

from gatekeeper.work import payloads as p
from gatekeeper.work.conductor import sessions
from gatekeeper.work.conductor.view import snapshot
from gatekeeper.work.events import outbox

EVIL = "fix \x1b[2J\x1b]0;pwned\x07 it \u202e now"


def test_the_hud_shows_state_and_next_actions_and_writes_nothing(
    git_repo: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with initialised_work(git_repo) as work:
        pending = new_ticket(work, EVIL)
        verifying = new_ticket(work, "b ticket").leased().running().ran().verifying()
        conductor = sessions.create(work, "/nonexistent/sock", "oms-test", ["claude"], nonce())
        with work.fenced(nonce(), "events.test") as tx:
            # Keys as long as a real sync's: the batch's list is far over the display width.
            issues = [outbox.TypedEvent(f"gh:octo/widgets:issue:{n}:2026-12-02T12:00:00Z",
                                        "gh.issue", {"n": n}) for n in range(12)]  # fmt: skip
            outbox.notify(tx, outbox.record(tx, issues))
            tx.record = p.EventsProjected(object="events", id="test", from_state=None,
                                          to_state="projected", version=1,
                                          nonce="n-test-1")  # fmt: skip
            tx.target, tx.subject = "events", "oms-events:test"
        data = snapshot(work)
        db_path, log_path = work.db.path, work.store.log_path
    assert data["conductor"]["id"] == conductor.id and data["conductor"]["state"] == "starting"
    assert data["events"] == {"count": 13}  # the 12 and the receipt's own
    assert data["batches"]["pending"] == 2
    assert sorted(b["events"] for b in data["batches"]["shown"]) == [1, 12]
    assert data["ticket_counts"] == {"pending": 1, "verifying": 1}
    assert {t["id"] for t in data["tickets"]} == {pending.id, verifying.id}
    nexts = {n["what"]: n["command"] for n in data["next"]}
    assert nexts[f"{verifying.id}: receipt filed"] == f"oms verify {verifying.id}"
    assert f"{pending.id}: pending" in nexts
    assert "2 notification batch(es) pending" in nexts

    db, log = db_path.read_bytes(), log_path.read_bytes()
    proc = run_oms(["hud", "--repo", str(git_repo), "--json"], env=oms_env)
    got = parse_single_json(proc)
    assert proc.returncode == 0 and got["events"] == {"count": 13}
    proc = run_oms(["hud", "--repo", str(git_repo), "--once"], env=oms_env)
    assert proc.returncode == 0, proc.stderr
    assert f"ticket {pending.id} pending" in proc.stdout
    assert "\x1b" not in proc.stdout and "\u202e" not in proc.stdout and "\x07" not in proc.stdout
    assert "\\u001b[2J" in proc.stdout  # shown, not obeyed
    assert db_path.read_bytes() == db and log_path.read_bytes() == log


def test_without_a_conductor_role_the_hud_shows_verdicts_and_the_gates_next_steps(
    git_repo: Path, oms_env: dict[str, str], tmp_path: Path
) -> None:
    with initialised_work(git_repo):
        pass
    # A candidate that adds the policy file is BLOCKED before anything runs: one verdict.
    commit_on(git_repo, "agent/x", {"oms.toml": "version = 1\n"}, env=oms_env,
              index=tmp_path / "index")  # fmt: skip
    judged = run_oms(["process-result", "--repo", str(git_repo), "--candidate", "agent/x",
                      "--json"], env=oms_env, timeout=300)  # fmt: skip
    verdict = parse_single_json(judged)
    assert verdict["decision"] == "BLOCKED", verdict

    got = parse_single_json(run_oms(["hud", "--repo", str(git_repo), "--json"], env=oms_env))
    [shown] = got["gates"]["verdicts"]
    assert shown["decision"] == "BLOCKED" and shown["seq"] == verdict["evidence_seq"]
    assert got["gates"]["evidence"] == "intact" and got["conductor_role"] is False
    commands = [n["command"] for n in got["next"]]
    assert "oms conductor start" not in commands
    assert any(c.startswith("oms process-result") for c in commands), commands
    once = run_oms(["hud", "--repo", str(git_repo), "--once"], env=oms_env)
    assert once.returncode == 0, once.stderr
    assert f"verdict #{shown['seq']} BLOCKED {shown['commit']}" in once.stdout
    assert "oms conductor start" not in once.stdout
