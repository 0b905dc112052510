"""`oms dispatch` and `oms worker result` end to end: a real repository, the real CLI, the real
`oms agent run` (bwrap, git, the evidence log) and a `command:` implementer this file writes.

The implementer reads its task from stdin, checks it equals `$OMS_TASK_FILE`, and commits a
report of its argv and task; its title's `mode:` word picks what it does (commit, exit 1,
or write a start marker and sleep). Every refusal is its own test and checks that the
database (every table), the evidence log, the refs and the work dir are as they were.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.oms import OMS, parse_single_json, run_oms
from support.pty import approve_copied, trust_tip
from support.repos import commit_on, git, make_repo
from support.work import dump

from evidence import EvidenceStore, state_root
from gatekeeper.gates.records import init
from gatekeeper.repo.git import open_repo
from gatekeeper.work import api
from gatekeeper.work.db import db_path
from gatekeeper.work.dispatch import LEASE_MARGIN_S
from gatekeeper.work.fence import Work, new_nonce
from gatekeeper.work.model import DispatchPlan, RunFacts

PY = "/usr/bin/python3"
pytestmark = pytest.mark.skipif(
    not os.access("/usr/bin/bwrap", os.X_OK) or not os.access(PY, os.X_OK),
    reason="needs /usr/bin/bwrap and /usr/bin/python3",
)

IMPL = r"""
import json, os, subprocess, sys, time
raw = sys.stdin.buffer.read()
with open(os.environ["OMS_TASK_FILE"], "rb") as f:
    same = f.read() == raw
task = json.loads(raw)
words = [w for w in task["title"].split() if w.startswith("mode:")]
mode = words[0][5:] if words else "ok"
if sys.argv != ["impl.py"]:
    print("argv is not the policy's cmd:", sys.argv, flush=True)
    sys.exit(7)
if mode == "sleep" and task["attempt"] == 1:
    # A process named for the dispatch (the test looks for it), then the start marker.
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)",
                                "oms-sleeper-" + task["dispatch"]])
    with open("STARTED", "w") as f:
        f.write(task["dispatch"])
    time.sleep(3600)
if mode == "fail":
    print("nothing done", flush=True)
    sys.exit(1)
if mode == "orphan":  # history that does not descend from the base: oms refuses to collect it
    subprocess.run(["git", "checkout", "-q", "--orphan", "elsewhere"], check=True)
with open("report.json", "w") as f:
    json.dump({"argv": sys.argv, "same": same, "task": task}, f)
subprocess.run(["git", "add", "report.json"], check=True)
subprocess.run(["git", "-c", "user.name=impl", "-c", "user.email=impl@example.invalid",
                "commit", "-q", "-m", "implement"], check=True)
"""


def policy(max_attempts: int = 2) -> str:
    role = 'model = "scripted"\nauth = "none"\nbilling = "none"\ntransport = "exec"\n'
    return f"""version = 1

[work]
max_attempts = {max_attempts}

[[checks]]
name = "true"
cmd = ["/bin/true"]
timeout_s = 30

[roles.impl]
provider = "command:impl"
{role}authority = "worktree-write"
unattended = true

[roles.reader]
provider = "command:impl"
{role}authority = "read-only"
unattended = true

[roles.attended]
provider = "command:impl"
{role}authority = "worktree-write"
unattended = false

[roles.outside]
provider = "command:ext"
{role}authority = "worktree-write"
unattended = true

[providers.impl]
cmd = ["{PY}", "impl.py"]

[providers.ext]
cmd = ["{PY}", "impl.py"]
external = true

[[transfer.autopilot]]
name = "scripted"
destinations = ["command:ext:scripted"]
max_bytes = 1000000
context = ["none"]
require_clean_pushed = false
"""


@dataclass
class Lab:
    repo: Path
    env: dict[str, str]
    work_dir: Path
    marker: Path

    def oms(self, *args: str) -> tuple[int, dict[str, Any]]:
        proc = run_oms([*args, "--repo", str(self.repo), "--json"], env=self.env, timeout=300)
        return proc.returncode, parse_single_json(proc)

    def ok(self, *args: str) -> dict[str, Any]:
        code, data = self.oms(*args)
        assert code == 0, data
        return data

    # Goals, tickets and leases are made in-process (the same functions the CLI calls, which
    # tests/e2e/test_work_cli.py drives as subprocesses); the dispatch itself is the real CLI.
    def ticket(self, title: str = "mode:ok do it", body: bytes | None = None) -> dict[str, Any]:
        goal = api.create_goal(self.repo, "ship", "done", "until-empty", None)
        path = None
        if body is not None:
            path = self.repo.parent / f"body-{new_nonce()}"
            path.write_bytes(body)
        return api.add_ticket(self.repo, goal["goal"]["id"], title, path, None)["ticket"]  # type: ignore[no-any-return]

    def lease(self, ticket: str, ttl_s: int = 600) -> str:
        version = self.show(ticket)["version"]
        got = api.lease(self.repo, ticket, version, new_nonce(), ttl_s)
        return str(got["lease"]["token"])

    def dispatch(self, ticket: str, token: str, role: str = "impl",
                 *extra: str) -> tuple[int, dict[str, Any]]:  # fmt: skip
        return self.oms("dispatch", ticket, "--lease", token, "--role", role,
                        "--nonce", new_nonce(), *extra)  # fmt: skip

    def show(self, ticket: str) -> dict[str, Any]:
        return api.show_ticket(self.repo, ticket)["ticket"]  # type: ignore[no-any-return]

    def store(self) -> EvidenceStore:
        r = open_repo(self.repo)
        return EvidenceStore.open(state_root(), r.repo_id, common_dir=r.common_dir)

    def work(self) -> Work:
        return Work.open(self.repo)

    def snapshot(self) -> dict[str, Any]:
        """Everything a refused command must leave as it was."""
        return {
            "db": dump(db_path(open_repo(self.repo).repo_id)),
            "log": self.store().head(),
            "refs": git(self.repo, "for-each-ref"),
            "work": sorted(os.listdir(self.work_dir)) if self.work_dir.exists() else [],
        }


@pytest.fixture
def lab(tmp_path: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Lab:
    repo = make_repo(tmp_path / "repo", {"oms.toml": policy(), "impl.py": IMPL}, env=oms_env)
    init(repo)
    work_dir = tmp_path / "work"
    monkeypatch.setenv("OMS_WORK_DIR", str(work_dir))
    return Lab(repo, {**oms_env, "OMS_WORK_DIR": str(work_dir)}, work_dir, tmp_path / "PWNED")


def _kinds(lab: Lab, ticket: str) -> list[str]:
    subject = f"oms-ticket:{ticket}"
    entries = [e for e in lab.store().entries() if e.kind.startswith("work.")]
    return [e.kind for e in entries if any(s.name == subject for s in e.subject)]


# -- dispatch end to end ----------------------------------------------------------------------


def test_a_dispatch_runs_the_worker_and_files_its_commit_as_the_receipt(lab: Lab) -> None:
    marker = lab.marker
    title = f"-- mode:ok ; rm -rf ~ $(touch {marker}) `touch PWNED`"
    body = f"--help\n$(touch {marker}); touch PWNED2 && echo 'x' \"y\" ${{HOME}}\n".encode()
    t = lab.ticket(title, body)
    token = lab.lease(t["id"])
    base = git(lab.repo, "rev-parse", "main").strip()
    code, data = lab.dispatch(t["id"], token)
    assert code == 0, data
    d = data["dispatch"]
    assert data["ticket"]["state"] == "verifying" and data["ticket"]["attempts"] == 1
    assert d["state"] == "received" and d["attempt"] == 1 and d["exit_code"] == 0
    assert d["role"] == "impl" and d["engine"] == "command:impl"
    # The receipt's commit is the run's ref, a child of the default branch's commit.
    ref = f"refs/oms/runs/{d['run_id']}"
    assert git(lab.repo, "rev-parse", ref).strip() == d["candidate"]
    assert git(lab.repo, "rev-parse", f"{d['candidate']}^").strip() == base
    work = lab.work()
    try:
        got = work.dispatch(d["id"])
        receipt = work.db.read("SELECT * FROM receipts WHERE dispatch = ?", d["id"])
    finally:
        work.close()
    assert receipt[0]["commit_sha"] == d["candidate"]
    env = got.envelope
    assert got.envelope_digest == d["envelope_digest"] and got.state == "received"
    assert (env.goal, env.ticket, env.attempt) == (t["goal"], t["id"], 1)
    assert env.lease == data["ticket"]["lease"]["lease"] and env.lease.startswith("sha256:")
    assert (env.role, env.provider, env.model) == ("impl", "command:impl", "scripted")
    assert env.engine == "command:impl"
    assert env.base == base and env.run_id == d["run_id"] and env.transfer is None
    assert got.run is not None
    assert env.workspace == str(lab.work_dir / d["run_id"]) == got.run.workspace
    assert env.capabilities == ("worktree-write", "egress:none")
    assert env.acceptance == ("result-gate:READY_FOR_HUMAN", "check:true")
    assert env.nonce and env.authority == "worktree-write"
    # The evidence: start, run, receipt, in that order, after the lease.
    assert _kinds(lab, t["id"]) == ["work.ticket.add", "work.ticket.lease", "work.dispatch.start",
                                    "work.dispatch.run", "work.receipt"]  # fmt: skip
    # The task reached the worker as data only: argv is the policy's, nothing ran.
    report = json.loads(git(lab.repo, "show", f"{d['candidate']}:report.json"))
    assert report["argv"] == ["impl.py"] and report["same"] is True
    task = report["task"]
    assert task["title"] == title and task["body"] == body.decode()
    assert (task["dispatch"], task["ticket"], task["attempt"]) == (d["id"], t["id"], 1)
    assert task["envelope_digest"] == d["envelope_digest"] and "reflection" not in task
    assert task["acceptance"] == ["result-gate:READY_FOR_HUMAN", "check:true"]
    assert not marker.exists()
    tree = git(lab.repo, "ls-tree", "-r", "--name-only", d["candidate"]).split()
    assert sorted(tree) == ["README.md", "impl.py", "oms.toml", "report.json"]
    start = lab.store().entries("agent.run.start")[-1]
    assert title not in json.dumps(start.data) and str(marker) not in json.dumps(start.data)


def test_a_worker_that_exits_1_without_a_commit_leaves_the_ticket_retryable_then_blocked(
    lab: Lab,
) -> None:
    t = lab.ticket("mode:fail nothing to commit")
    code, data = lab.dispatch(t["id"], lab.lease(t["id"]))
    assert code == 1, data
    assert data["dispatch"]["state"] == "ended" and data["dispatch"]["candidate"] is None
    assert data["dispatch"]["reason"] == "the worker exited 1 with no commit"
    assert data["ticket"]["state"] == "retryable" and data["ticket"]["attempts"] == 1
    assert data["ticket"]["lease"]["state"] == "released"
    # The second (last, max_attempts = 2) attempt fails as well: blocked, visibly.
    code, data = lab.dispatch(t["id"], lab.lease(t["id"]))
    assert code == 1, data
    assert data["dispatch"]["attempt"] == 2
    assert data["ticket"]["state"] == "blocked" and data["ticket"]["attempts"] == 2
    kinds = _kinds(lab, t["id"])
    assert kinds.count("work.dispatch.start") == 2 and kinds.count("work.dispatch.end") == 2
    assert "work.receipt" not in kinds


def test_a_run_oms_refuses_to_collect_ends_the_dispatch_with_the_refusal(lab: Lab) -> None:
    t = lab.ticket("mode:orphan rewrite history")
    code, data = lab.dispatch(t["id"], lab.lease(t["id"]))
    assert code == 3, data
    assert "rewrote history" in data["error"]["message"]
    shown = lab.show(t["id"])
    assert shown["state"] == "retryable" and shown["attempts"] == 1
    assert shown["dispatch"]["state"] == "ended"
    assert "rewrote history" in shown["dispatch"]["reason"]
    assert _kinds(lab, t["id"])[-2:] == ["work.dispatch.start", "work.dispatch.end"]


def test_a_sigkill_during_a_dispatch_leaves_a_ticket_a_new_lease_recovers(lab: Lab) -> None:
    t = lab.ticket("mode:sleep until killed")
    token = lab.lease(t["id"], ttl_s=20)  # the run may take 20 - LEASE_MARGIN_S seconds
    cmd = [*OMS, "dispatch", t["id"], "--lease", token, "--role", "impl", "--nonce",
           new_nonce(), "--repo", str(lab.repo), "--json"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=lab.env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        started = _wait_for(lambda: list(lab.work_dir.glob("*/STARTED")), proc)
        run_id = started[0].parent.name
        sleeper = "oms-sleeper-" + _wait_for(started[0].read_text)
        assert _pgrep(sleeper)  # the run's processes are there to be killed
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # No process of the run is left (bwrap dies with its parent, and everything inside).
    _wait_for(lambda: not _pgrep(sleeper))
    shown = lab.show(t["id"])
    assert shown["state"] == "running" and shown["attempts"] == 1
    assert shown["dispatch"]["state"] == "started" and shown["dispatch"]["run_id"] == run_id
    shown = _wait_for(lambda: (s := lab.show(t["id"]))["lease"]["expired"] and s)
    assert shown["lease"]["state"] == "active"
    # A new lease, at the version shown, recovers it; the attempt stays used.
    got = lab.ok("ticket", "lease", t["id"], "--expected-version", str(shown["version"]),
                 "--nonce", new_nonce(), "--ttl-s", "600")  # fmt: skip
    assert got["ticket"]["state"] == "leased" and got["ticket"]["attempts"] == 1
    work = lab.work()
    try:
        old = work.dispatch(shown["dispatch"]["id"])
    finally:
        work.close()
    assert old.state == "abandoned" and old.run is None
    code, data = lab.dispatch(t["id"], got["lease"]["token"])
    assert code == 0, data
    assert data["dispatch"]["attempt"] == 2 and data["ticket"]["state"] == "verifying"
    kinds = _kinds(lab, t["id"])
    assert kinds.count("work.dispatch.start") == 2 and kinds.count("work.receipt") == 1


def _pgrep(needle: str) -> list[str]:
    out = subprocess.run(["pgrep", "-f", needle], capture_output=True, text=True, check=False)
    return [p for p in out.stdout.split() if int(p) != os.getpid()]


def _wait_for(probe: Any, proc: subprocess.Popen[bytes] | None = None) -> Any:
    """Poll `probe` until it gives something true (a bounded wait, not a timed assertion)."""
    for _ in range(1200):
        found = probe()
        if found:
            return found
        assert proc is None or proc.poll() is None, "the dispatch ended before the marker"
        time.sleep(0.1)
    raise AssertionError("gave up waiting")


# -- refusals: each changes nothing ------------------------------------------------------------


@pytest.fixture
def leased(lab: Lab) -> Iterator[tuple[Lab, str, str]]:
    t = lab.ticket()
    yield lab, t["id"], lab.lease(t["id"])


def test_a_run_ends_while_its_lease_still_fences_the_result(lab: Lab) -> None:
    # The run's time-out is cut to the lease: it is stopped with LEASE_MARGIN_S left, so the
    # end of the dispatch is still recorded under the lease, never after it expired.
    t = lab.ticket("mode:sleep until stopped")
    # 10 s for the run: oms' own start before the dispatch (a loaded machine) must fit too.
    token = lab.lease(t["id"], ttl_s=LEASE_MARGIN_S + 10)
    code, data = lab.dispatch(t["id"], token)
    assert code == 1, data
    assert data["dispatch"]["state"] == "ended" and data["ticket"]["state"] == "retryable"
    assert "timed out" in (lab.show(t["id"])["dispatch"]["reason"] or "")
    assert _kinds(lab, t["id"])[-3:] == ["work.dispatch.start", "work.dispatch.run",
                                         "work.dispatch.end"]  # fmt: skip


def test_a_lease_too_short_for_a_run_is_refused_before_anything_starts(lab: Lab) -> None:
    t = lab.ticket()
    token = lab.lease(t["id"], ttl_s=LEASE_MARGIN_S)
    _refused(lab, 3, "blocked", "too little time left", *_dispatch_args(t["id"], token))


def _refused(lab: Lab, code: int, kind: str, want: str, *args: str) -> dict[str, Any]:
    before = lab.snapshot()
    got, data = lab.oms(*args)
    assert got == code, data
    assert data["error"]["kind"] == kind and want in data["error"]["message"], data
    assert lab.snapshot() == before
    assert not lab.marker.exists()
    return data


def _dispatch_args(ticket: str, token: str, role: str = "impl", nonce: str | None = None,
                   *extra: str) -> list[str]:  # fmt: skip
    return ["dispatch", ticket, "--lease", token, "--role", role, "--nonce",
            nonce or new_nonce(), *extra]  # fmt: skip


def test_a_foreign_lease_token_is_refused(leased: tuple[Lab, str, str]) -> None:
    lab, ticket, _ = leased
    other = lab.ticket()
    token = lab.lease(other["id"])
    _refused(lab, 3, "blocked", "another ticket's", *_dispatch_args(ticket, token))


def test_an_expired_lease_token_is_refused(lab: Lab) -> None:
    t = lab.ticket()
    token = lab.lease(t["id"], ttl_s=1)
    _wait_for(lambda: lab.show(t["id"])["lease"]["expired"])
    _refused(lab, 3, "blocked", "expired", *_dispatch_args(t["id"], token))


def test_a_stale_lease_token_is_refused(lab: Lab) -> None:
    t = lab.ticket()
    old = lab.lease(t["id"], ttl_s=1)
    _wait_for(lambda: lab.show(t["id"])["lease"]["expired"])
    lab.lease(t["id"])  # taken again: the old token is stale
    _refused(lab, 3, "blocked", "was expired", *_dispatch_args(t["id"], old))


def test_a_token_that_is_no_lease_is_refused(leased: tuple[Lab, str, str]) -> None:
    lab, ticket, _ = leased
    _refused(lab, 3, "blocked", "no such lease", *_dispatch_args(ticket, "lease-" + "0" * 48))


def test_a_replayed_nonce_is_refused(leased: tuple[Lab, str, str]) -> None:
    lab, ticket, token = leased
    work = lab.work()
    try:
        used = work.db.read("SELECT nonce FROM nonces WHERE op = 'ticket.lease'")[0]["nonce"]
    finally:
        work.close()
    _refused(lab, 3, "blocked", "was used already", *_dispatch_args(ticket, token, "impl", used))


def test_an_unconfigured_role_is_refused(leased: tuple[Lab, str, str]) -> None:
    lab, ticket, token = leased
    _refused(lab, 4, "unavailable", "no role 'nosuch'", *_dispatch_args(ticket, token, "nosuch"))


def test_a_role_not_eligible_for_an_unattended_run_is_refused(
    leased: tuple[Lab, str, str],
) -> None:
    lab, ticket, token = leased
    _refused(lab, 4, "unavailable", "unattended", *_dispatch_args(ticket, token, "attended"))


def test_a_read_only_role_is_refused_for_a_ticket(leased: tuple[Lab, str, str]) -> None:
    lab, ticket, token = leased
    _refused(lab, 4, "unavailable", "dispatched to a worktree-write role",
             *_dispatch_args(ticket, token, "reader"))  # fmt: skip


def test_an_external_role_without_a_transfer_is_refused(leased: tuple[Lab, str, str]) -> None:
    lab, ticket, token = leased
    _refused(lab, 3, "blocked", "--transfer", *_dispatch_args(ticket, token, "outside"))


def test_an_external_role_with_an_unknown_transfer_is_refused(
    leased: tuple[Lab, str, str],
) -> None:
    lab, ticket, token = leased
    digest = "sha256:" + "ab" * 32
    _refused(lab, 3, "blocked", "no transfer manifest",
             *_dispatch_args(ticket, token, "outside", None, "--transfer", digest))  # fmt: skip


def test_no_wait_is_refused_until_the_conductor(leased: tuple[Lab, str, str]) -> None:
    lab, ticket, token = leased
    _refused(lab, 2, "usage", "conductor",
             *_dispatch_args(ticket, token, "impl", None, "--no-wait"))  # fmt: skip


def _plan(lab: Lab, run_id: str) -> DispatchPlan:
    base = git(lab.repo, "rev-parse", "main").strip()
    return DispatchPlan(role="impl", provider="command:impl", engine="command:impl",
                        model="scripted", authority="worktree-write", base=base, run_id=run_id,
                        workspace=None, capabilities=("worktree-write",),
                        acceptance=("result-gate:READY_FOR_HUMAN",))  # fmt: skip


def _facts(candidate: str | None) -> RunFacts:
    return RunFacts(exit_code=0, signal=None, timed_out=False, candidate=candidate,
                    candidate_ref=None, workspace="/nowhere", evidence_seq=1)  # fmt: skip


def test_a_ticket_that_used_every_attempt_is_refused(lab: Lab, oms_env: dict[str, str]) -> None:
    t = lab.ticket()
    token = lab.lease(t["id"])
    work = lab.work()
    try:  # attempt 1 of 2 ends without a result: retryable
        plan = _plan(lab, "20261201T000000Z-0000aaaa")
        d = work.begin_dispatch(t["id"], token, plan, new_nonce())
        work.end_dispatch(d.id, token, "no result")
    finally:
        work.close()
    # The default branch now allows one attempt; the retryable ticket can still be leased.
    commit_on(lab.repo, "main", {"oms.toml": policy(max_attempts=1)}, env=oms_env,
              index=lab.repo.parent / "index")  # fmt: skip
    trust_tip(lab.repo, env=oms_env)  # a human trusts it at a terminal
    token = lab.lease(t["id"])
    _refused(lab, 3, "blocked", "has used all 1 attempts", *_dispatch_args(t["id"], token))


def _ran(lab: Lab, ticket: str, token: str, candidate: str | None, run_id: str) -> str:
    """A dispatch whose run came back (in-process: its facts are what the test says)."""
    work = lab.work()
    try:
        d = work.begin_dispatch(ticket, token, _plan(lab, run_id), new_nonce())
        work.record_run(d.id, token, _facts(candidate))
        return d.id
    finally:
        work.close()


def _commit(lab: Lab, oms_env: dict[str, str], name: str) -> str:
    return str(commit_on(lab.repo, f"agent-{name}", {f"{name}.txt": name}, env=oms_env,
                     index=lab.repo.parent / f"index-{name}"))  # fmt: skip


def test_worker_result_files_the_receipt_of_the_dispatch_run(
    leased: tuple[Lab, str, str], oms_env: dict[str, str]
) -> None:
    lab, ticket, token = leased
    commit = _commit(lab, oms_env, "a")
    did = _ran(lab, ticket, token, commit, "20261201T000000Z-0000aaaa")
    data = lab.ok("worker", "result", "--dispatch", did, "--lease", token, "--nonce",
                  new_nonce(), "--commit", commit)  # fmt: skip
    assert data["receipt"]["commit"] == commit and data["receipt"]["dispatch"] == did
    assert data["ticket"]["state"] == "verifying"
    assert _kinds(lab, ticket)[-1] == "work.receipt"


def test_worker_result_with_another_tickets_commit_is_refused(
    leased: tuple[Lab, str, str], oms_env: dict[str, str]
) -> None:
    lab, ticket, token = leased
    other = lab.ticket()
    other_token = lab.lease(other["id"])
    theirs = _commit(lab, oms_env, "b")
    _ran(lab, other["id"], other_token, theirs, "20261201T000000Z-0000bbbb")
    did = _ran(lab, ticket, token, _commit(lab, oms_env, "a"), "20261201T000000Z-0000aaaa")
    _refused(lab, 3, "blocked", "is not the commit of dispatch", "worker", "result",
             "--dispatch", did, "--lease", token, "--nonce", new_nonce(),
             "--commit", theirs)  # fmt: skip


def test_worker_result_for_a_run_that_made_no_commit_is_refused(
    leased: tuple[Lab, str, str],
) -> None:
    lab, ticket, token = leased
    did = _ran(lab, ticket, token, None, "20261201T000000Z-0000aaaa")
    _refused(lab, 3, "blocked", "has no commit from its run", "worker", "result",
             "--dispatch", did, "--lease", token, "--nonce", new_nonce())  # fmt: skip


def test_worker_result_with_the_lease_of_another_ticket_is_refused(
    leased: tuple[Lab, str, str], oms_env: dict[str, str]
) -> None:
    lab, ticket, token = leased
    did = _ran(lab, ticket, token, _commit(lab, oms_env, "a"), "20261201T000000Z-0000aaaa")
    other = lab.ticket()
    _refused(lab, 3, "blocked", "another ticket's", "worker", "result", "--dispatch", did,
             "--lease", lab.lease(other["id"]), "--nonce", new_nonce())  # fmt: skip


# -- transfer: an external role's context ------------------------------------------------------


def _preview(lab: Lab, to: str) -> dict[str, Any]:
    return lab.ok("transfer", "preview", "--to", to, "--purpose", "the ticket's context",
                  "--context", "none")  # fmt: skip


@pytest.mark.parametrize(("role", "engine"), [("outside", "command:ext"), ("impl", "command:impl")])
def test_an_approved_transfer_is_bound_into_the_envelope(
    leased: tuple[Lab, str, str], role: str, engine: str
) -> None:
    """An external role needs it; a role that is not external may name one too (recorded)."""
    lab, ticket, token = leased
    shown = _preview(lab, "command:ext:scripted")
    digest = shown["digest"]
    lab.ok("transfer", "approve", digest, "--code", shown["manifest"]["nonce"][:8])
    code, data = lab.dispatch(ticket, token, role, "--transfer", digest)
    assert code == 0, data
    work = lab.work()
    try:
        envelope = work.dispatch(data["dispatch"]["id"]).envelope
    finally:
        work.close()
    assert envelope.transfer == digest and envelope.engine == engine
    start = lab.store().entries("work.dispatch.start")[-1]
    assert start.data["detail"]["transfer"] == digest


def test_an_external_role_with_a_transfer_nobody_approved_is_refused(
    leased: tuple[Lab, str, str],
) -> None:
    lab, ticket, token = leased
    digest = _preview(lab, "elsewhere:model")["digest"]
    _refused(lab, 3, "blocked", "not approved",
             *_dispatch_args(ticket, token, "outside", None, "--transfer", digest))  # fmt: skip


def test_an_approved_transfer_for_another_destination_is_refused(
    leased: tuple[Lab, str, str],
) -> None:
    """A human approved context for one model: it never carries an external role's
    context to another (the role `outside` reaches `command:ext:scripted`)."""
    lab, ticket, token = leased
    shown = _preview(lab, "elsewhere:model")
    digest, code = shown["digest"], shown["manifest"]["nonce"][:8]
    rc, said = approve_copied(["transfer", "approve", digest, "--code", code], env=lab.env,
                              cwd=lab.repo)  # fmt: skip
    assert rc == 0, said
    _refused(lab, 3, "blocked", "is for elsewhere:model, not command:ext:scripted",
             *_dispatch_args(ticket, token, "outside", None, "--transfer", digest))  # fmt: skip
