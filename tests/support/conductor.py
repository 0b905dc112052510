"""The conductor's tests on real tmux: the skip marker, a scripted `command:` conductor,
the private socket directory, and polling.

`tmux_work` opens an `oms init`ed repository's `Work` with `$XDG_RUNTIME_DIR` at a short
0700 directory of its own (a unix socket path is at most 107 bytes), so oms' private tmux
server lives there and never on the user's default server; the server is killed and the
directory removed afterwards.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from gatekeeper.work import payloads as p
from gatekeeper.work import roles
from gatekeeper.work.conductor import tokens
from gatekeeper.work.conductor.model import new_id
from gatekeeper.work.conductor.proc import ProcId
from gatekeeper.work.conductor.tmux import Tmux, socket_for
from gatekeeper.work.dispatch import _plan
from gatekeeper.work.fence import Work, new_nonce
from gatekeeper.work.model import Dispatch
from support.work import Walk, nonce

PY = "/usr/bin/python3"
NEEDS_TMUX = pytest.mark.skipif(
    shutil.which("tmux") is None
    or not os.access("/usr/bin/bwrap", os.X_OK)
    or not os.access(PY, os.X_OK),
    reason="needs tmux (Debian: apt-get install tmux), /usr/bin/bwrap and /usr/bin/python3",
)
# A conductor role that prints a marker and then waits: a scripted stand-in for Claude Code.
COMMAND_CONDUCTOR = f"""version = 1

[roles.conductor]
provider = "command:cond"
model = "scripted"
auth = "none"
billing = "none"
transport = "exec"
authority = "read-only"

[providers.cond]
cmd = ["{PY}", "-c", "import time; print('conductor-up', flush=True); time.sleep(3600)"]
"""


@contextmanager
def tmux_work(repo: Path, work_dir: Path, oms_env: dict[str, str],
              mp: pytest.MonkeyPatch) -> Iterator[Work]:  # fmt: skip
    runtime = tempfile.mkdtemp(prefix="oms-rt-")
    os.chmod(runtime, 0o700)
    mp.setenv("XDG_RUNTIME_DIR", runtime)
    mp.setenv("OMS_WORK_DIR", str(work_dir))
    for k, v in oms_env.items():
        if k.startswith(("OMS_", "GIT_")):
            mp.setenv(k, v)
    work = Work.open(repo)
    # The server to kill is the one on THIS socket, whatever the test does to the
    # environment meanwhile (a socket computed at teardown may be another, and the real
    # server would outlive the test with its panes).
    socket = socket_for(work.repo.repo_id)
    try:
        yield work
    finally:
        Tmux(socket).kill_server()
        work.close()
        shutil.rmtree(runtime, ignore_errors=True)


def dispatched(work: Work, role_name: str, ticket: str | None = None, *,
               worker_pane: bool = False) -> Dispatch:  # fmt: skip
    """`ticket` (by default a new one in a new goal) leased, its token kept by oms as the
    bridge does, and its dispatch to `role_name` begun (no transfer)."""
    if ticket is None:
        goal = work.create_goal("ship it", "tickets done", "until-empty", new_nonce())
        ticket = work.add_ticket(goal.id, "add the markers", b"write the markers and commit",
                                 new_nonce()).id  # fmt: skip
    lease, _ = work.lease_ticket(ticket, work.ticket(ticket).version, new_nonce())
    tokens.keep(work.repo.repo_id, ticket, lease.token)
    role = roles.require(roles.resolve(work.loaded, role_name), unattended=True,
                         worker_pane=worker_pane)  # fmt: skip
    return work.begin_dispatch(ticket, lease.token, _plan(work, role, None, ticket), new_nonce())


def until(what: Callable[[], bool], why: str, limit_s: float = 90) -> None:
    """Poll for `what` (a bound on waiting, never an assertion on time)."""
    end = time.monotonic() + limit_s
    while not what():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {why}")
        time.sleep(0.1)


def recorded_worker(work: Work, walk: Walk, proc: ProcId | None = None,
                    state: str = "running") -> str:  # fmt: skip
    """A worker row for `walk`'s dispatch, fenced and logged as oms records one, without a
    pane: `proc` is the process it names (none: a worker whose process is not known)."""
    wid = new_id("w")
    with work.fenced(nonce(), "worker.test") as tx:
        tx.run("INSERT INTO workers (id, dispatch, ticket, version, state, socket, session, pid, "
               "start_ticks, created, updated) VALUES (?, ?, ?, 1, ?, 's', 'oms-t', ?, ?, ?, ?)",
               wid, walk.dispatch, walk.id, state, proc.pid if proc else None,
               proc.start_ticks if proc else None, tx.now, tx.now)  # fmt: skip
        tx.record = p.WorkerChanged(object="worker", id=wid, from_state=None, to_state=state,
                                    version=1, nonce="n")  # fmt: skip
        tx.target, tx.subject = wid, f"oms-ticket:{walk.id}"
    return wid
