"""`oms conductor start` with a `command:` conductor role (a scripted stand-in for Claude
Code, which needs a terminal and a login): real tmux on oms' private socket, the conductor
role under the real `oms agent run`.

Without a terminal and without a prior confirmation the start is refused (exit 3) and
nothing is recorded. Confirmed once, `--no-attach` creates one session on the private
socket (in a 0700 directory, never the user's default server); a second start resumes it
(no second conductor record); a killed conductor is recorded dead by the next start, which
makes a new conductor while the goals survive.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.conductor import COMMAND_CONDUCTOR, NEEDS_TMUX, until
from support.oms import run_oms
from support.repos import make_repo

from gatekeeper.errors import Blocked, OmsError
from gatekeeper.gates.records import init
from gatekeeper.work.conductor import sessions
from gatekeeper.work.conductor.start import confirm, confirmed_path, start
from gatekeeper.work.conductor.tmux import Tmux, session_for, socket_for
from gatekeeper.work.fence import Work, new_nonce

pytestmark = NEEDS_TMUX
# A plan too: conductor start asks the doctor, which is not ready without one.
POLICY = COMMAND_CONDUCTOR + '\n[[checks]]\nname = "unit"\ncmd = ["true"]\n'


@pytest.fixture
def lab(
    tmp_path: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Path, dict[str, str]]]:
    repo = make_repo(tmp_path / "repo", {"oms.toml": POLICY}, env=oms_env)
    init(repo)
    runtime = tempfile.mkdtemp(prefix="oms-rt-")  # short: a socket path is at most 107 bytes
    os.chmod(runtime, 0o700)
    env = {**oms_env, "XDG_RUNTIME_DIR": runtime, "OMS_WORK_DIR": str(tmp_path / "work")}
    for k, v in env.items():
        if k.startswith(("XDG_", "OMS_", "GIT_")):
            monkeypatch.setenv(k, v)
    repo_id = Work.open(repo).repo.repo_id
    try:
        yield repo, env
    finally:
        Tmux(socket_for(repo_id)).kill_server()
        shutil.rmtree(runtime, ignore_errors=True)


def rows(work: Work) -> list[str]:
    return [r["id"] for r in work.db.read("SELECT id FROM conductors ORDER BY rowid")]


def test_start_confirms_once_creates_resumes_and_replaces_a_killed_conductor(
    lab: tuple[Path, dict[str, str]],
) -> None:
    repo, env = lab

    def oms(*args: str) -> subprocess.CompletedProcess[str]:
        return run_oms(list(args), env=env, stdin=subprocess.DEVNULL, timeout=120)

    work = Work.open(repo)
    goal = work.create_goal("keep the goal", "never", "until-empty", new_nonce())
    # No terminal and no prior confirmation: refused, nothing recorded.
    refused = oms("conductor", "start", "--repo", str(repo), "--no-attach", "--json")
    assert refused.returncode == 3, refused.stderr
    assert json.loads(refused.stdout)["ok"] is False and rows(work) == []
    # Confirmed once at a terminal before (the file that confirmation writes).
    confirmed_path(work).write_text("{}")
    done = oms("conductor", "start", "--repo", str(repo), "--no-attach", "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["resumed"] is False and shown["state"] == "active"
    assert shown["session"] == session_for(work.repo.repo_id)
    sock = Path(shown["socket"])
    assert sock.parent == Path(env["XDG_RUNTIME_DIR"]) / "oms"
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700 and stat.S_ISSOCK(sock.stat().st_mode)
    tm = Tmux(sock)
    assert tm.has_session(shown["session"])
    first = sessions.get(work, shown["conductor"])
    assert first.proc is not None and first.proc.alive()
    assert "sleep(3600)" in " ".join(first.argv)
    # The role really runs, under `oms agent run` (its start entry names the read-only run).
    assert first.pane is not None
    until(lambda: "conductor-up" in tm.capture(first.pane or ""), "the conductor printed")
    assert work.store.entries("agent.run.start")
    # A second start resumes it: the same conductor, no second record.
    again = start(work, doctor=False)
    assert again["resumed"] is True and again["conductor"] == first.id
    assert rows(work) == [first.id]
    # A killed conductor: the next start records it dead and makes a new one; goals stay.
    os.kill(first.proc.pid, signal.SIGKILL)
    until(lambda: not first.proc.alive(), "the conductor's process is gone")
    new = start(work, doctor=False)
    assert new["resumed"] is False and new["conductor"] != first.id
    assert rows(work) == [first.id, new["conductor"]]
    assert sessions.get(work, first.id).state == "dead"
    assert tm.has_session(new["session"])
    assert work.goal(goal.id).objective == "keep the goal"
    work.close()


CREDIT = """version = 1

[roles.conductor]
provider = "command:cond"
model = "scripted"
auth = "api-key"
billing = "usage"
allow_usage_billing = true
transport = "exec"
authority = "read-only"

[providers.cond]
cmd = ["/usr/bin/python3", "-c", "print('never')"]

[roles.other]
provider = "command:cond"
model = "scripted"
auth = "none"
transport = "exec"
"""


@pytest.mark.parametrize(
    ("conductor", "kind"),
    [("", "blocked"), ('[conductor]\nrole = "missing"\n', "unavailable"),
     ('[conductor]\nrole = "other"\n', "unavailable")],
)  # fmt: skip
def test_preflight_refuses_before_anything_starts(
    tmp_path: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch, conductor: str,
    kind: str,
) -> None:  # fmt: skip
    """A credit-billed conductor (even with credits enabled), an unknown role and one whose
    billing is undeclared: refused, no conductor record, no tmux server."""
    repo = make_repo(tmp_path / "repo", {"oms.toml": CREDIT + conductor}, env=oms_env)
    init(repo)
    runtime = tempfile.mkdtemp(prefix="oms-rt-")
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    work = Work.open(repo)
    try:
        confirmed_path(work).write_text("{}")
        with pytest.raises(OmsError) as refused:
            start(work, doctor=False)
        assert refused.value.kind == kind, refused.value
        assert rows(work) == [] and not socket_for(work.repo.repo_id).exists()
    finally:
        work.close()
        shutil.rmtree(runtime, ignore_errors=True)


def test_the_confirmation_is_asked_once_at_a_terminal(
    lab: tuple[Path, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    repo, _ = lab
    asked: list[list[str]] = []
    work = Work.open(repo)
    try:
        monkeypatch.setattr(os, "isatty", lambda fd: True)
        assert confirm(work, lambda lines, q: asked.append(lines)) is False
        assert confirm(work, lambda lines, q: asked.append(lines)) is True
        assert len(asked) == 1 and str(work.repo.top) in asked[0][0]
        path = confirmed_path(work)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        # A refusal at the terminal records nothing.
        path.unlink()

        def no(lines: list[str], q: bytes) -> None:
            raise Blocked("not approved at the terminal")

        with pytest.raises(Blocked):
            confirm(work, no)
        assert not path.exists()
    finally:
        work.close()
