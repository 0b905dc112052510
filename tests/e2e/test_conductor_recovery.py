"""The watchdog respawns a dead conductor, once, with a `command:` conductor role (a scripted
stand-in for Claude Code, which needs a terminal and a login) on real tmux, oms' private
socket, under the real `oms agent run`.

A live conductor whose waiter died is left alone (only the waiter is marked failed). A
killed conductor is claimed by one pass and respawned as the SAME record in its tmux
session: exactly one new process; a second pass changes nothing. With no confirmation kept
for the repository the dead conductor becomes `stalled` with the reason and nothing starts;
a claimed respawn whose pane tmux refuses (tmux's spawn patched to refuse: the one stand-in
here) is `stalled` with the reason too.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.conductor import COMMAND_CONDUCTOR, NEEDS_TMUX, tmux_work, until
from support.repos import make_repo

from gatekeeper.gates.records import init
from gatekeeper.work.conductor import sessions, waiter
from gatekeeper.work.conductor.proc import ProcId
from gatekeeper.work.conductor.start import confirmed_path, start
from gatekeeper.work.conductor.tmux import Tmux, TmuxUnavailable, session_for
from gatekeeper.work.fence import Work, new_nonce
from gatekeeper.work.watchdog import watchdog

pytestmark = NEEDS_TMUX
POLICY = COMMAND_CONDUCTOR


@pytest.fixture
def work(
    tmp_path: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Work]:
    repo = make_repo(tmp_path / "repo", {"oms.toml": POLICY}, env=oms_env)
    init(repo)
    with tmux_work(repo, tmp_path / "work", oms_env, monkeypatch) as w:
        confirmed_path(w).write_text("{}")  # confirmed once at a terminal before
        yield w


def waiter_proc() -> tuple[subprocess.Popen[bytes], ProcId]:
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    proc = ProcId.of(child.pid)
    assert proc is not None
    return child, proc


def panes(tm: Tmux) -> list[str]:
    done = subprocess.run(tm.argv("list-panes", "-a", "-F", "#{pane_id}"), capture_output=True,
                          text=True, check=False)  # fmt: skip
    return done.stdout.split() if done.returncode == 0 else []


def kill(tm: Tmux, c: sessions.Conductor) -> None:
    assert c.proc is not None and c.pane is not None
    os.kill(c.proc.pid, signal.SIGKILL)
    until(lambda: c.proc is not None and not c.proc.alive(), "the conductor's process is gone")
    until(lambda: c.pane not in panes(tm), "its pane is gone")


def test_a_live_conductor_is_left_a_dead_one_is_respawned_once(work: Work) -> None:
    shown = start(work, doctor=False)
    tm = Tmux(shown["socket"])
    first = sessions.get(work, shown["conductor"])
    assert first.state == "active" and first.proc is not None and first.proc.alive()
    # A live conductor whose waiter died: the waiter failed, the conductor untouched.
    child, wproc = waiter_proc()
    gen = waiter.arm(work, first.id, new_nonce(), wproc)
    child.kill()
    child.wait()
    live = watchdog(work)
    assert [(w["generation"], w["did"]) for w in live["waiters"]] == [(gen.generation, "failed")]
    assert live["conductors"] == []
    assert sessions.get(work, first.id) == first
    # The conductor dies (its waiter armed again for it): one pass claims and respawns it.
    child, wproc = waiter_proc()
    gen2 = waiter.arm(work, first.id, new_nonce(), wproc)
    kill(tm, first)
    passed = watchdog(work)
    assert [(c["id"], c["did"]) for c in passed["conductors"]] == [(first.id, "respawned")]
    assert [(w["generation"], w["did"]) for w in passed["waiters"]] == [(gen2.generation, "failed")]
    child.kill()
    child.wait()
    again = sessions.get(work, first.id)
    assert again.state == "active" and again.proc is not None and again.proc.alive()
    assert again.proc != first.proc  # a new process (pane ids restart with a new server)
    assert [r["id"] for r in work.db.read("SELECT id FROM conductors")] == [first.id]
    assert tm.has_session(session_for(work.repo.repo_id)) and panes(tm) == [again.pane]
    until(lambda: "conductor-up" in tm.capture(again.pane or ""), "the respawned role printed")
    # A second pass (a duplicate, or a restart) sees a live conductor: nothing changes.
    second = watchdog(work)
    assert second["changed"] == 0 and second["conductors"] == []
    assert sessions.get(work, first.id) == again and panes(tm) == [again.pane]


def test_a_conductor_that_cannot_be_respawned_is_stalled_and_nothing_starts(work: Work) -> None:
    shown = start(work, doctor=False)
    tm = Tmux(shown["socket"])
    first = sessions.get(work, shown["conductor"])
    confirmed_path(work).unlink()  # no confirmation kept: nobody to ask in a watchdog pass
    kill(tm, first)
    passed = watchdog(work)
    [item] = passed["conductors"]
    assert item["did"] == "stalled" and "never confirmed" in item["reason"]
    after = sessions.get(work, first.id)
    assert after.state == "stalled" and after.proc == first.proc
    assert after.reason is not None and "not respawned" in after.reason
    assert panes(tm) == []  # nothing started
    second = watchdog(work)
    assert second["changed"] == 0 and sessions.get(work, first.id) == after


def test_a_respawn_whose_pane_does_not_start_is_stalled_with_the_reason(
    work: Work, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = start(work, doctor=False)
    tm = Tmux(shown["socket"])
    first = sessions.get(work, shown["conductor"])
    kill(tm, first)

    def refused(*_: object, **__: object) -> None:
        raise TmuxUnavailable("tmux new-session failed: the server refused it")

    monkeypatch.setattr(Tmux, "new_session", refused)  # tmux refusing, after the claim
    monkeypatch.setattr(Tmux, "new_window", refused)
    passed = watchdog(work)
    [item] = passed["conductors"]
    assert item["did"] == "stalled" and "the pane did not start" in item["reason"]
    after = sessions.get(work, first.id)
    assert (after.state, after.proc) == ("stalled", None)  # claimed (process cleared), stalled
    assert panes(tm) == []
    assert watchdog(work)["changed"] == 0


def test_a_start_while_the_watchdog_recovers_the_conductor_starts_no_second_one(
    work: Work, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watchdog's claim (`starting`, no process) is a recovery under way: a human's
    `oms conductor start` at that moment refuses instead of making a second conductor."""
    from gatekeeper.errors import Blocked
    from gatekeeper.work import watchdog as wd

    shown = start(work, doctor=False)
    tm = Tmux(shown["socket"])
    first = sessions.get(work, shown["conductor"])
    kill(tm, first)
    monkeypatch.setattr(wd, "_respawn", lambda *a, **k: None)  # the claim, then a pause
    watchdog(work)
    claimed = sessions.get(work, first.id)
    assert claimed.state == "starting" and claimed.proc is None
    with pytest.raises(Blocked) as info:
        start(work, doctor=False)
    assert "recovery is under way" in info.value.message
    assert [r["id"] for r in work.db.read("SELECT id FROM conductors")] == [first.id]
    assert panes(tm) == [] and sessions.get(work, first.id) == claimed


def test_a_start_from_another_runtime_dir_resumes_the_live_conductor(
    work: Work, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The session is looked for on the socket the conductor was started on: a start from
    an ssh login or cron (another, or no, $XDG_RUNTIME_DIR) finds it, never starts a
    second conductor beside the live one."""
    shown = start(work, doctor=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR")  # now oms' socket dir would be the state root's
    again = start(work, doctor=False)
    assert again["resumed"] is True and again["conductor"] == shown["conductor"]
    assert again["socket"] == shown["socket"]
    assert [r["id"] for r in work.db.read("SELECT id FROM conductors")] == [shown["conductor"]]
