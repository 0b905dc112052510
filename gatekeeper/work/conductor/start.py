"""`oms conductor start` (and bare `oms` on a terminal): preflight, a one-time confirmation,
then the conductor's tmux session created or resumed on oms' private socket.

Preflight refuses before anything starts: the policy from the default branch, the
`[conductor] role` resolving and eligible (auth and billing declared, never credit-billed,
its CLI installed at the version oms pins), the launch argv passing `check_launch`, and
`oms doctor` ready (exit 4 otherwise). The confirmation is asked once per repository at
the terminal and kept under `$OMS_HOME/repos/<id>/conductor/confirmed`; with no terminal
and no confirmation the start is refused (exit 3). A recorded conductor whose process is
alive is resumed; otherwise a new conductor record is made (durable before its pane), and
its pane runs `oms conductor pane`, the role under `oms agent run` with a read-only
workspace. Goals and tickets are never the conductor's: they survive it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from gatekeeper.agent.inside import inside_agent_sandbox, marker
from gatekeeper.agent.kinds import installed_cli
from gatekeeper.agent.run import agent_run
from gatekeeper.errors import Blocked, Unavailable, refusal
from gatekeeper.gates import doctor as readiness
from gatekeeper.gates.authority import AgentSandbox
from gatekeeper.gates.transfer.tty import confirm_at_terminal
from gatekeeper.work import roles
from gatekeeper.work.audit import doctor_check
from gatekeeper.work.conductor import sessions
from gatekeeper.work.conductor.launch import (
    conductor_argv,
    conductor_pane_argv,
    conductor_request,
)
from gatekeeper.work.conductor.model import new_id
from gatekeeper.work.conductor.proc import ProcId
from gatekeeper.work.conductor.sessions import Conductor
from gatekeeper.work.conductor.tmux import Tmux, session_for, socket_for
from gatekeeper.work.conductor.tokens import conductor_dir
from gatekeeper.work.fence import StaleVersion, Work, new_nonce
from gatekeeper.work.providers.base import Role, RoleUnavailable

# The Claude Code release oms' conductor launch is written against (kinds.py reads the
# installed version from its package.json, never by running it).
CLAUDE_PINNED = "2.1.197"
LIVE = ("starting", "active", "idle")
_QUESTION = b"Start the oms conductor (read-only, in tmux) for this repository? Type yes: "


def preflight(work: Work, doctor: bool = True) -> Role:
    """The conductor role, eligible to launch now; a refusal before anything starts."""
    name = work.loaded.policy.conductor.role
    role = roles.require(roles.resolve(work.loaded, name), unattended=False)
    if role.provider == "claude-code":
        version = installed_cli("claude-code", "claude", os.environ.get("PATH", os.defpath))
        if version != CLAUDE_PINNED:
            raise RoleUnavailable(f"role {role.name}: Claude Code {version} is installed; the "
                                  f"conductor needs {CLAUDE_PINNED}")  # fmt: skip
    elif not role.provider.startswith("command:"):
        raise RoleUnavailable(f"role {role.name}: a conductor is Claude Code or a command: "
                              "provider")  # fmt: skip
    conductor_argv(role, "c-000000000000")  # check_launch: no print mode, no credit billing
    if doctor:
        found = readiness.doctor(work.repo.top,
                                 AgentSandbox.of(inside_agent_sandbox(), marker()),
                                 checks=(doctor_check,))  # fmt: skip
        if not found.ready:
            raise Unavailable("oms doctor is not ready: run `oms doctor` for what is missing")
    return role


def confirmed_path(work: Work) -> Path:
    return conductor_dir(work.repo.repo_id) / "confirmed"


def confirm(work: Work, ask: Callable[[list[str], bytes], Any] = confirm_at_terminal) -> bool:
    """True when confirmed before; else asked at the terminal (Blocked with none)."""
    path = confirmed_path(work)
    if path.is_file() and not path.is_symlink():
        return True
    if not (os.isatty(0) and os.isatty(1)):
        raise Blocked("the conductor is confirmed once per repository at a terminal; there is "
                      "none here (run `oms conductor start` at one)")  # fmt: skip
    ask(
        [
            f"repository: {work.repo.top}",
            "the conductor is read-only: it proposes goals and dispatches through oms' tools",
            "workers run in their own sandboxed panes; nothing merges or publishes",
        ],
        _QUESTION,
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"repository": work.repo.repo_id}, f)
    return False


def start(
    work: Work, *, doctor: bool = True, ask: Callable[[list[str], bytes], Any] = confirm_at_terminal
) -> dict[str, Any]:
    """Create or resume the conductor's session; its JSON (without attaching)."""
    role = preflight(work, doctor=doctor)
    confirm(work, ask)
    repo_id = work.repo.repo_id
    tm, session = Tmux(socket_for(repo_id)), session_for(repo_id)
    c = sessions.latest(work)
    if c is not None and c.state in LIVE:
        if c.proc is not None and c.proc.alive():  # on the socket it was started on
            recorded = Tmux(c.socket)
            if recorded.has_session(c.session):
                return _shown(c, recorded, resumed=True)
            raise Blocked(f"conductor {c.id} still runs, but its tmux session {c.session} is "
                          f"not on {c.socket}; nothing started (stop it, or start from "
                          "where it was started)")  # fmt: skip
        if c.state == "starting" and c.proc is None and _recent(work, c.id):
            raise Blocked(f"conductor {c.id} is starting (a start or the watchdog's recovery "
                          "is under way); nothing started, try again in a minute")  # fmt: skip
        try:
            sessions.move(work, c.id, c.version, "dead", new_nonce(),
                          reason="its process is gone")  # fmt: skip
        except StaleVersion:  # the watchdog claimed it meanwhile: never a second conductor
            raise Blocked(f"conductor {c.id} changed while this start looked at it (the "
                          "watchdog may be recovering it); nothing started, run `oms "
                          "conductor start` again") from None  # fmt: skip
    cid = new_id("c")
    argv = conductor_argv(role, cid)  # the exact argv, recorded before the pane starts
    c = sessions.create(work, tm.socket, session, argv, new_nonce(), cid=cid)
    c = _spawn(work, tm, session, c, failed="dead")
    return _shown(c, tm, resumed=False)


STARTING_GRACE_S = 60  # a `starting` record younger than this is a start under way


def _recent(work: Work, conductor_id: str) -> bool:
    rows = work.db.read("SELECT updated FROM conductors WHERE id = ?", conductor_id)
    if not rows:
        return False
    try:
        then = datetime.fromisoformat(rows[0]["updated"].replace("Z", "+00:00")).timestamp()
    except ValueError:
        return False
    return bool(work.clock() - then < STARTING_GRACE_S)


def _spawn(work: Work, tm: Tmux, session: str, c: Conductor, failed: str) -> Conductor:
    """Conductor `c`'s pane (a new window of `session`, or the session itself when it is
    gone), then the record `active` with its process; `failed` with the reason (and the
    exception raised) when the pane does not start."""
    pane_argv = conductor_pane_argv(work.repo.top, c.id)
    try:
        if tm.has_session(session):
            pane = tm.new_window(session, "conductor", pane_argv, cwd=work.repo.top)
        else:
            pane = tm.new_session(session, "conductor", pane_argv, cwd=work.repo.top)
    except Exception as exc:
        sessions.move(work, c.id, c.version, failed, new_nonce(),
                      reason=f"the pane did not start: {refusal(exc).message}"[:300])  # fmt: skip
        raise
    proc = ProcId.of(pane.pid)
    try:
        why = None if proc else "the pane's process ended at once"
        return sessions.move(work, c.id, c.version, "active" if proc else failed, new_nonce(),
                             pane=pane.id, proc=proc, reason=why)  # fmt: skip
    except StaleVersion:
        return sessions.get(work, c.id)


def unattended_refusal(work: Work) -> str | None:
    """Why the conductor cannot be respawned with no human present (None: it can): its
    role not launchable now, no confirmation kept for this repository, or no tmux. Nothing
    is asked and nothing changes."""
    try:
        preflight(work, doctor=False)
        path = confirmed_path(work)
        if not path.is_file() or path.is_symlink():
            return ("the conductor was never confirmed for this repository at a terminal "
                    "(`oms conductor start` asks once)")  # fmt: skip
        tm = Tmux(socket_for(work.repo.repo_id))
        tm.argv()  # tmux installed
    except Exception as exc:  # any refusal: reported, never raised by the watchdog
        return refusal(exc).message[:200]
    return None


def respawn(work: Work, conductor_id: str, expected_version: int) -> Conductor:
    """The watchdog's recovery of a conductor whose process died: the SAME record, which
    the watchdog claimed (`starting`, no process) at `expected_version`, gets a new pane in
    its tmux session on oms' private socket (no terminal, no attach, no question); its
    SessionStart hook then arms a new waiter. A refusal or a pane that does not start
    leaves it `stalled` with the reason (its notifications stay pending)."""
    c = sessions.get(work, conductor_id)
    if c.version != expected_version or c.state != "starting" or c.proc is not None:
        raise StaleVersion(
            f"conductor {c.id} is {c.state} at version {c.version}, not the "
            f"recovery claimed at version {expected_version}; nothing started"
        )
    why = unattended_refusal(work)
    if why is not None:
        return sessions.move(work, c.id, c.version, "stalled", new_nonce(),
                             reason=f"not respawned: {why}"[:300])  # fmt: skip
    tm = Tmux(c.socket)  # where it was started: cron may have another $XDG_RUNTIME_DIR
    try:
        return _spawn(work, tm, c.session, c, failed="stalled")
    except Exception:  # recorded `stalled` with the reason by _spawn
        return sessions.get(work, c.id)


def _shown(c: Conductor, tm: Tmux, resumed: bool) -> dict[str, Any]:
    return {"conductor": c.id, "session": c.session, "socket": tm.socket, "pane": c.pane,
            "state": c.state, "argv": list(c.argv), "resumed": resumed}  # fmt: skip


def run_pane(work: Work, conductor_id: str) -> int:
    """The conductor pane's own process: the role under `oms agent run`, read-only, with
    the pane as its terminal; the record `stopped` when it ends (unless moved meanwhile)."""
    c = sessions.get(work, conductor_id)
    if c.state not in LIVE:
        raise Blocked(f"conductor {c.id} is {c.state}; its pane does not run")
    role = preflight(work, doctor=False)
    code: int | None = None
    reason = None
    try:
        out = agent_run(conductor_request(role, work.repo.top, c.id, work.base()))
        code = out.exit_code
        reason = f"the conductor exited {out.exit_code}"
    except Exception as exc:
        reason = refusal(exc).message[:200]
    now = sessions.get(work, c.id)
    if now.state in LIVE:
        with contextlib.suppress(StaleVersion):
            sessions.move(work, c.id, now.version, "stopped", new_nonce(), reason=reason)
    return 0 if code == 0 else 1
