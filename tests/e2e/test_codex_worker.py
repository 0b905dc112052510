"""A Codex worker (gatekeeper/work/conductor/launch.py): the real Codex 0.171.0 CLI, real
tmux, real `oms agent run` (bwrap), real git, the real evidence log.

The flags oms passes `codex exec` and `codex exec resume` are checked against the pinned
binary's own help. A worker pane then runs `codex exec` under `oms agent run` with no input
at the pane; the model is `fake_openai` (tests/support/fake_models.py), a loopback stand-in
for the Responses API, since no real provider may be reached from a test. The first attempt
only answers (no commit: the ticket is `retryable`); the second attempt resumes that
ticket's stored session (the model sees the first attempt's answer in its history), runs
one `exec_command` that writes start and end markers inside the workspace and commits
them, then answers: the worker ends by itself and the ticket is `verifying`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.conductor import dispatched, tmux_work
from support.fake_models import fake_openai
from support.repos import git, make_repo

from gatekeeper.agent.codex_sessions import stored_session
from gatekeeper.agent.kinds import CODEX_OWN_FLAGS, installed_cli
from gatekeeper.gates.records import init
from gatekeeper.work import roles
from gatekeeper.work.conductor import workers
from gatekeeper.work.conductor.launch import WORKER_PROMPT, codex_store
from gatekeeper.work.conductor.tmux import Tmux, socket_for
from gatekeeper.work.fence import Work, new_nonce
from gatekeeper.work.model import Dispatch
from gatekeeper.work.providers.codex_cli import codex_argv, exec_argv

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".cache" / "agents" / "node_modules" / ".bin"
CODEX = BIN / "codex"
SESSION = "01a23caa-6929-7f50-baac-57d31c93ea47"
needs_codex = pytest.mark.skipif(
    not os.access(CODEX, os.X_OK),
    reason="codex is not installed under .cache/agents: run `make agents` (needs npm)",
)
needs_panes = pytest.mark.skipif(
    shutil.which("tmux") is None or not os.access("/usr/bin/bwrap", os.X_OK),
    reason="needs tmux (Debian: apt-get install tmux) and /usr/bin/bwrap",
)
POLICY = """version = 1

[roles.coder]
provider = "codex-cli"
model = "gpt-5.5"
auth = "api-key"
billing = "usage"
allow_usage_billing = true
transport = "exec"
authority = "worktree-write"
unattended = true
"""
MARKERS = (
    "printf 'oms-codex-start\\n' > start.marker && printf 'oms-codex-end\\n' > end.marker && "
    "git add start.marker end.marker && "
    "git -c user.name=codex -c user.email=codex@example.invalid commit -q -m markers"
)
FIRST_ANSWER = "attempt one: nothing committed yet"


def _flags(help_text: str) -> set[str]:
    return set(re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z0-9-]*)", help_text, re.M))


def _help(*words: str) -> set[str]:
    done = subprocess.run([str(CODEX), *words, "--help"], capture_output=True, text=True,
                          timeout=60, check=True, stdin=subprocess.DEVNULL)  # fmt: skip
    return _flags(done.stdout)


def _passed(argv: tuple[str, ...]) -> set[str]:
    return {a.split("=", 1)[0] for a in argv if a.startswith("--")}


@needs_codex
def test_every_flag_oms_passes_codex_exec_and_resume_is_the_pinned_binarys() -> None:
    assert installed_cli("codex", str(CODEX), os.environ.get("PATH", "")) == "0.171.0"
    role = roles.Role(name="coder", provider="codex-cli", engine="codex-cli", model="gpt-5.5",
                      auth="api-key", billing="usage", unattended=True, transport="exec",
                      authority="worktree-write", external=True)  # fmt: skip
    # What oms puts before the subcommand (kinds.py) is the top level's.
    assert set(CODEX_OWN_FLAGS) <= _help()
    fresh = exec_argv(role, events=False, prompt=WORKER_PROMPT)
    provider = codex_argv(role, schema=True)
    resumed = exec_argv(role, events=False, prompt=WORKER_PROMPT, resume=SESSION)
    assert fresh[:2] == provider[:2] == ("codex", "exec") and resumed[:3] == (*fresh[:2], "resume")
    assert _passed(fresh) | _passed(provider) <= _help("exec")
    assert _passed(resumed) | _passed(exec_argv(role, resume=SESSION)) <= _help("exec", "resume")
    # The positional words: a resume names its session, then the fixed prompt; never a flag.
    assert resumed[-2:] == (SESSION, WORKER_PROMPT) and fresh[-1] == WORKER_PROMPT


@pytest.fixture
def lab(tmp_path: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Work]:
    repo = make_repo(tmp_path / "repo", {"oms.toml": POLICY}, env=oms_env)
    init(repo)
    monkeypatch.setenv("PATH", f"{BIN}:{os.environ.get('PATH', os.defpath)}")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-real-codex-worker-key")
    with tmux_work(repo, tmp_path / "work", oms_env, monkeypatch) as work:
        yield work


def _run_worker(work: Work, d: Dispatch, monkeypatch: pytest.MonkeyPatch, command: str | None,
                answer: str) -> tuple[workers.WorkerView, list[dict[str, object]]]:  # fmt: skip
    """One worker pane for `d` against a fresh fake; the worker once it ended by itself, and
    the bodies of the model requests its Codex made."""
    with fake_openai(command, final_text=answer) as fake:
        monkeypatch.setenv("OMS_EGRESS_UPSTREAM_OPENAI", fake.url)
        Tmux(socket_for(work.repo.repo_id)).kill_server()  # the server takes this env
        w = workers.start_worker(work, d.id, new_nonce())
        _until_exited(work, w.id)
        return workers.get(work, w.id), [r.json() for r in fake.model_requests()]


def _until_exited(work: Work, wid: str) -> None:
    end = time.monotonic() + 240  # a bound on waiting, never an assertion on time
    while workers.get(work, wid).state not in ("exited", "dead", "stopped"):
        if time.monotonic() > end:
            raise AssertionError(f"the worker never ended: {workers.get(work, wid)}")
        time.sleep(0.2)


def _texts(body: dict[str, object]) -> str:
    return repr(body.get("input"))


@needs_codex
@needs_panes
def test_a_codex_worker_ends_by_itself_and_its_retry_resumes_the_tickets_session(
    lab: Work, monkeypatch: pytest.MonkeyPatch
) -> None:
    goal = lab.create_goal("ship it", "tickets done", "until-empty", new_nonce())
    t = lab.add_ticket(goal.id, "add the markers", b"write the markers and commit", new_nonce())
    first = dispatched(lab, "coder", t.id)
    w1, reqs1 = _run_worker(lab, first, monkeypatch, None, FIRST_ANSWER)
    assert w1.state == "exited" and reqs1, w1
    assert lab.dispatch(first.id).state != "received"
    assert lab.ticket(t.id).state == "retryable"
    # The session the first attempt left is kept for this ticket, outside the repository.
    store = codex_store(lab.repo.top, t.id)
    kept = stored_session(store)
    assert kept is not None and (store / "rollout.jsonl").is_file()
    assert lab.repo.top not in store.parents

    second = dispatched(lab, "coder", t.id)
    w2, reqs2 = _run_worker(lab, second, monkeypatch, MARKERS, "the markers are committed")
    # Resumed: the model's first request of the second attempt holds the first's answer.
    assert FIRST_ANSWER not in _texts(reqs1[0]) and FIRST_ANSWER in _texts(reqs2[0])
    assert w2.state == "exited" and w2.reason is None, w2
    assert lab.ticket(t.id).state == "verifying"
    got = lab.dispatch(second.id)
    assert got.state == "received" and got.run is not None and got.run.candidate
    # Containment: the markers were written inside the workspace and the commit holds them.
    commit = got.run.candidate
    assert git(lab.repo.top, "show", f"{commit}:start.marker") == "oms-codex-start\n"
    assert git(lab.repo.top, "show", f"{commit}:end.marker") == "oms-codex-end\n"
    assert stored_session(store) not in (None, "")
