"""Worker panes on oms' private tmux server (gatekeeper/work/conductor/workers.py): real
tmux, real `oms agent run` (bwrap), real git, the real evidence log.

A worker pane runs `oms conductor worker` (this oms, outside), which runs a scripted
`command:` executor from the trusted policy. The executor writes start and end markers
inside its workspace and commits them, so a commit holding them proves the contained
code ran; the receipt then moves the ticket to `verifying`. A second worker for one
dispatch is refused with nothing changed; park, resume and stop act on the recorded
process; a SIGKILLed pane is observed `dead` (by its process identity, not pane text)
and its ticket leaves `running`.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.conductor import dispatched, tmux_work
from support.repos import git, make_repo
from support.work import snapshot

from gatekeeper.gates.records import init
from gatekeeper.work.conductor import workers
from gatekeeper.work.fence import NonceReplayed, Work, new_nonce

PY = "/usr/bin/python3"
pytestmark = pytest.mark.skipif(
    shutil.which("tmux") is None
    or not os.access("/usr/bin/bwrap", os.X_OK)
    or not os.access(PY, os.X_OK),
    reason="needs tmux (Debian: apt-get install tmux), /usr/bin/bwrap and /usr/bin/python3",
)
IMPL = r"""
import os, subprocess
with open("start.marker", "w") as f:
    f.write("oms-impl-start\n")
with open(os.environ["OMS_TASK_FILE"], "rb") as f:
    task = f.read()
with open("end.marker", "w") as f:
    f.write("oms-impl-end %d\n" % len(task))
subprocess.run(["git", "add", "start.marker", "end.marker"], check=True)
subprocess.run(["git", "-c", "user.name=impl", "-c", "user.email=impl@example.invalid",
                "commit", "-q", "-m", "markers"], check=True)
"""
HANG = r"""
import time
with open("started.marker", "w") as f:
    f.write("up\n")
time.sleep(600)
"""
POLICY = f"""version = 1

[roles.impl]
provider = "command:impl"
model = "scripted"
auth = "none"
billing = "none"
transport = "exec"
authority = "worktree-write"
unattended = true

[roles.hang]
provider = "command:hang"
model = "none"
auth = "none"
billing = "none"
transport = "exec"
authority = "worktree-write"
unattended = true

[providers.impl]
cmd = ["{PY}", "impl.py"]

[providers.hang]
cmd = ["{PY}", "hang.py"]
"""


@pytest.fixture
def lab(tmp_path: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Work]:
    repo = make_repo(tmp_path / "repo", {"oms.toml": POLICY, "impl.py": IMPL, "hang.py": HANG},
                     env=oms_env)  # fmt: skip
    init(repo)
    with tmux_work(repo, tmp_path / "work", oms_env, monkeypatch) as work:
        yield work


def until(what: Callable[[], bool], why: str, limit_s: float = 90) -> None:
    """Poll for `what` (a bound on waiting, never an assertion on time)."""
    end = time.monotonic() + limit_s
    while not what():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {why}")
        time.sleep(0.1)


def test_a_worker_pane_runs_the_executor_and_its_commit_becomes_the_receipt(lab: Work) -> None:
    d = dispatched(lab, "impl")
    w = workers.start_worker(lab, d.id, new_nonce())
    assert w.dispatch == d.id and w.state in ("running", "exited")
    # One dispatch, one worker: a second start is refused and changes nothing.
    before = snapshot(lab)
    with pytest.raises(Exception, match=r"has a worker already|not started"):
        workers.start_worker(lab, d.id, new_nonce())
    assert snapshot(lab) == before
    until(lambda: workers.get(lab, w.id).state == "exited", "the worker exited")
    assert lab.ticket(d.ticket).state == "verifying"
    got = lab.dispatch(d.id)
    assert got.state == "received" and got.run is not None and got.run.candidate
    # Containment: the markers were written inside the workspace and the commit holds them.
    commit = got.run.candidate
    assert git(lab.repo.top, "show", f"{commit}:start.marker") == "oms-impl-start\n"
    assert git(lab.repo.top, "show", f"{commit}:end.marker").startswith("oms-impl-end ")
    assert [v.id for v in workers.listed(lab, d.ticket)] == [w.id]
    kinds = [e.data["to_state"] for e in lab.store.entries("work.worker")]
    assert kinds[0] == "starting" and kinds[-1] == "exited"


def _state_of(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        raw = f.read()
    return raw[raw.rfind(")") + 2]


def test_park_resume_stop_and_a_killed_worker(lab: Work) -> None:
    a, b = dispatched(lab, "hang"), dispatched(lab, "hang")
    wa = workers.start_worker(lab, a.id, new_nonce())
    wb = workers.start_worker(lab, b.id, new_nonce())
    for d in (a, b):
        marker = Path(d.envelope.workspace or "") / "started.marker"
        until(marker.exists, f"the executor of {d.id} started")
    # park: the whole tree stopped (the sandbox runs in its own session, below the pane).
    park_nonce = new_nonce()
    parked = workers.control(lab, wa.id, "park", park_nonce)
    assert parked.state == "parked" and lab.ticket(a.ticket).health == "parked"
    proc = workers.proc_of(lab, wa.id)
    assert proc is not None
    # (tmux continues a stopped pane process itself; below it, the agent's tree is parked.)
    tree = workers._descendants(proc.pid)[1:]
    assert tree
    until(lambda: all(_state_of(p) in "TZ" for p in tree if os.path.exists(f"/proc/{p}")),
          "every process of the parked agent stopped")  # fmt: skip
    # A refused control changes nothing (park of a parked worker).
    before = snapshot(lab)
    with pytest.raises(Exception, match="not running"):
        workers.control(lab, wa.id, "park", new_nonce())
    assert snapshot(lab) == before
    # A replayed nonce changes nothing either (the signal it sent is undone).
    with pytest.raises(NonceReplayed):
        workers.control(lab, wa.id, "resume", park_nonce)
    assert snapshot(lab) == before
    until(lambda: all(_state_of(p) in "TZ" for p in tree if os.path.exists(f"/proc/{p}")),
          "the replay's signal was undone: the agent stays parked")  # fmt: skip
    resumed = workers.control(lab, wa.id, "resume", new_nonce())
    assert resumed.state == "running" and lab.ticket(a.ticket).health == "healthy"
    stopped = workers.control(lab, wa.id, "stop", new_nonce())
    assert stopped.state == "stopped" and not proc.alive()
    until(lambda: lab.ticket(a.ticket).state != "running", "the stopped ticket left running")
    assert lab.ticket(a.ticket).state == "retryable"
    # A killed worker: observe sees its process gone (by ProcId), marks it dead, and the
    # dispatch with no receipt ends.
    pb = workers.proc_of(lab, wb.id)
    assert pb is not None
    assert workers.control(lab, wb.id, "observe", new_nonce()).state == "running"
    os.kill(pb.pid, signal.SIGKILL)
    until(lambda: not pb.alive(), "the killed pane's process is gone")
    dead = workers.control(lab, wb.id, "observe", new_nonce())
    assert dead.state == "dead" and dead.reason
    assert lab.ticket(b.ticket).state == "retryable"
    assert lab.dispatch(b.id).state == "ended"
    # Observing again records nothing more.
    before = snapshot(lab)
    assert workers.control(lab, wb.id, "observe", new_nonce()).state == "dead"
    assert snapshot(lab) == before
