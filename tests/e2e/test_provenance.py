"""`oms evidence attest`: one signed provenance attestation per READY verdict, through the
real CLI on a real repository (real git, real bwrap for the gate and the agent run, real
scanners), checked against the JSON Schema (gatekeeper/work/provenance.schema.json, package
data) and by `oms evidence verify`.

The contained commit comes from a real `oms agent run` (`--egress none`). The dispatch
that gave that run its transfer is recorded through the real work fence in-process, as
`oms dispatch` records it; a provider adapter is not needed to link a transfer to a run.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support.env import clean_env
from support.oms import parse_single_json, run_oms
from support.repos import commit_on, git, make_repo
from support.secrets import fake_aws_key
from support.work import new_ticket, nonce, open_work, plan

from evidence import EvidenceStore
from evidence.merkle import leaf_hash
from gatekeeper.agent.inside import RELAY_PORT as INSIDE_PORT
from gatekeeper.errors import Blocked
from gatekeeper.gates.records import open_store
from gatekeeper.gates.result.payloads import ResultRecord
from gatekeeper.repo.git import Repo
from gatekeeper.work import provenance
from gatekeeper.work.model import RunFacts

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "gatekeeper" / "work" / "provenance.schema.json").read_text())
PREDICATE = "https://oms.local/provenance/v1"
MESSAGE = "agent-says-zqxv-marker"  # a commit message that must never appear
KEY = "sk-ant-test-real-" + "k" * 24  # oms' provider key: outside, never in the statement
POLICY = """version = 1

[[checks]]
name = "unit"
cmd = ["true"]
timeout_s = 60

[[transfer.autopilot]]
name = "small-paths"
destinations = ["anthropic:claude"]
max_bytes = 1000000
context = ["repo", "diff", "paths", "none"]
require_clean_pushed = false
"""
NEEDS = os.access("/usr/bin/bwrap", os.X_OK)
pytestmark = pytest.mark.skipif(not NEEDS, reason="bwrap is not installed")


@dataclass
class World:
    root: Path
    repo: Path
    env: dict[str, str]
    transfer: str = ""
    contained: str = ""
    run_id: str = ""
    uncontained: str = ""
    blocked: str = ""

    def run(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        return run_oms(list(args), env=self.env, cwd=self.repo, timeout=300)

    def json(self, *args: str | Path) -> tuple[int, dict[str, Any]]:
        proc = self.run(*args, "--json")
        return proc.returncode, parse_single_json(proc)

    def gate(self, candidate: str, want: str) -> None:
        _, out = self.json("process-result", "--candidate", candidate)
        assert out["decision"] == want, out


def _approved_transfer(w: World) -> str:
    code, out = w.json("transfer", "preview", "--to", "anthropic:claude", "--purpose", "fix")
    assert code == 0, out
    m = re.search(r"--code (\S+)", out["approval_packet"]["copyable_text_block"])
    assert m, out
    code, ok = w.json("transfer", "approve", out["digest"], "--code", m[1])
    assert code == 0 and ok["approver"]["kind"] == "policy", ok
    return str(out["digest"])


def _agent_commit(w: World) -> tuple[str, str, int]:
    """A commit from a real `oms agent run --egress api` that sends one request the broker
    refuses (and records): the run's egress ledger has one entry. Its upstream is a
    loopback port nothing listens on: no request is forwarded."""
    commit = f"git -c user.name=a -c user.email=a@b commit -qm {MESSAGE}"
    ask = f"curl -q -sS -o /dev/null http://127.0.0.1:{INSIDE_PORT}/v1/not-a-model-route"
    script = f"echo oms-start; {ask}; echo fixed > fix.txt; git add fix.txt; {commit}; echo oms-end"
    env = {**w.env, "ANTHROPIC_API_KEY": KEY, "OMS_EGRESS_UPSTREAM_ANTHROPIC": "http://127.0.0.1:9"}
    proc = run_oms(["agent", "run", "--egress", "api", "--json", "--", "/bin/sh", "-c", script],
                   env=env, cwd=w.repo, timeout=300)  # fmt: skip
    out = parse_single_json(proc)
    assert out["exit_code"] == 0 and "oms-end" in out["stdout"], out
    assert out["candidate"] and out["egress"]["requests"] == 1, out
    return out["candidate"], out["run_id"], out["evidence_seq"]


def _record_dispatch(w: World, run_seq: int, candidate: str, transfer: str) -> None:
    """What `oms dispatch` records for a run under a transfer, through the real fence."""
    mp = pytest.MonkeyPatch()
    mp.setenv("OMS_HOME", w.env["OMS_HOME"])
    try:
        work = open_work(w.repo)
        try:
            walk = new_ticket(work).leased()
            assert walk.lease is not None
            given = plan().model_copy(update={"transfer": transfer})
            d = work.begin_dispatch(walk.id, walk.lease.token, given, nonce())
            facts = RunFacts(exit_code=0, signal=None, timed_out=False, candidate=candidate,
                             candidate_ref=None, workspace="/nonexistent/ws",
                             evidence_seq=run_seq)  # fmt: skip
            work.record_run(d.id, walk.lease.token, facts, nonce())
        finally:
            work.close()
    finally:
        mp.undo()


@contextmanager
def _store(w: World) -> Iterator[tuple[Repo, EvidenceStore]]:
    """The repository's evidence store, opened in-process under the world's OMS_HOME."""
    mp = pytest.MonkeyPatch()
    mp.setenv("OMS_HOME", w.env["OMS_HOME"])
    try:
        yield open_store(w.repo)
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("prov")
    (root / "home").mkdir()
    env = clean_env(root / "home", root / "oms-state")
    repo = make_repo(root / "repo", {"oms.toml": POLICY}, env=env)
    w = World(root, repo, env)
    assert w.json("init")[0] == 0
    w.transfer = _approved_transfer(w)
    w.contained, w.run_id, run_seq = _agent_commit(w)
    _record_dispatch(w, run_seq, w.contained, w.transfer)
    w.gate(w.contained, "READY_FOR_HUMAN")
    w.uncontained = commit_on(repo, "by-hand", {"x.txt": "x\n"}, env=env,
                              index=root / "idx", message=MESSAGE)  # fmt: skip
    w.gate(w.uncontained, "READY_FOR_HUMAN")
    w.blocked = commit_on(repo, "policy-edit", {"oms.toml": POLICY + "\n# edit\n"}, env=env,
                          index=root / "idx2", message=MESSAGE)  # fmt: skip
    w.gate(w.blocked, "BLOCKED")
    yield w


def attest(w: World, commit: str) -> tuple[dict[str, Any], dict[str, Any]]:
    code, out = w.json("evidence", "attest", commit)
    assert code == 0, out
    env = out["envelope"]
    return env, json.loads(base64.b64decode(env["payload"]))


def test_a_contained_run_commit_carries_its_run_and_transfer(world: World) -> None:
    _, stmt = attest(world, world.contained)
    assert stmt["predicateType"] == PREDICATE
    tree = git(world.repo, "rev-parse", f"{world.contained}^{{tree}}", env=world.env).strip()
    assert stmt["subject"] == [{"name": "commit", "digest": {"gitCommit": world.contained}},
                               {"name": "tree", "digest": {"gitTree": tree}}]  # fmt: skip
    pred = stmt["predicate"]
    jsonschema.validate(pred, SCHEMA)
    assert pred["contained"] is True
    run = pred["run"]
    assert run["run_id"] == world.run_id and run["agent"] == "command" and run["egress"] == "api"
    assert run["profile_digest"].startswith("sha256:") and run["mountinfo_digest"]
    ledger = run["egress_ledger"]
    assert ledger["count"] == 1 and len(ledger["seqs"]) == 1, ledger
    with _store(world) as (_, store):
        (line,) = [store.line(s) for s in ledger["seqs"]]
    assert json.loads(line)["kind"] == "agent.egress"
    assert ledger["root"] == leaf_hash(line).hex()  # the RFC 6962 root of one leaf
    (transfer,) = pred["transfers"]
    assert transfer["manifest"] == world.transfer
    assert [(a["by"], a["name"]) for a in transfer["approvals"]] == [
        ("autopilot", "policy:small-paths")]  # fmt: skip
    assert pred["verdict"]["decision"] == "READY_FOR_HUMAN"
    assert pred["verdict"]["inclusion_proof"]["log_index"] == pred["verdict"]["evidence_seq"]
    assert pred["scanners"] and pred["plan_digest"].startswith("sha256:")


def test_a_commit_made_outside_a_run_says_contained_false(world: World) -> None:
    _, stmt = attest(world, world.uncontained)
    pred = stmt["predicate"]
    jsonschema.validate(pred, SCHEMA)
    assert pred["contained"] is False and "run" not in pred and "transfers" not in pred


def test_no_commit_message_in_the_attestation(world: World) -> None:
    for commit in (world.contained, world.uncontained):
        env, stmt = attest(world, commit)
        assert MESSAGE not in json.dumps(stmt) and MESSAGE not in json.dumps(env)
        assert KEY not in json.dumps(stmt)


def test_the_envelope_verifies_and_a_changed_one_does_not(world: World) -> None:
    out = world.root / "prov.json"
    code, res = world.json("evidence", "attest", world.contained, "--out", out)
    assert code == 0 and res["out"] == str(out), res
    code, ver = world.json("evidence", "verify", out)
    assert code == 0 and ver["valid"] and ver["predicate_type"] == PREDICATE, ver
    env = json.loads(out.read_text())
    stmt = json.loads(base64.b64decode(env["payload"]))
    stmt["predicate"]["contained"] = not stmt["predicate"]["contained"]
    env["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
    bad = world.root / "bad.json"
    bad.write_text(json.dumps(env))
    code, ver = world.json("evidence", "verify", bad)
    assert code == 3 and not ver["signature"], ver


def test_a_blocked_verdict_gets_no_attestation(world: World) -> None:
    code, out = world.json("evidence", "attest", world.blocked)
    assert code == 3 and out["error"]["kind"] == "blocked", out
    assert "no READY_FOR_HUMAN verdict" in out["error"]["message"]


def test_out_never_replaces_a_symlink(world: World) -> None:
    target = world.root / "target.txt"
    target.write_text("keep\n")
    link = world.root / "link.json"
    link.symlink_to(target)
    code, out = world.json("evidence", "attest", world.contained, "--out", link)
    assert code == 2 and out["error"]["kind"] == "usage", out
    assert target.read_text() == "keep\n" and link.is_symlink()


def test_a_secret_in_the_statement_refuses_before_signing(world: World) -> None:
    """The scan over the statement's text: a planted key in a string field blocks it."""
    with _store(world) as (_, store):
        (record,) = [r for _, r in store.payloads(ResultRecord) if r.candidate == world.contained]
        subjects = [{"name": "commit", "digest": {"gitCommit": world.contained}}]
        provenance._scan(world.repo, record, subjects, {"version": 1, "contained": False})
        with pytest.raises(Blocked, match="secret finding"):
            provenance._scan(world.repo, record, subjects, {"run": {"cli_version": fake_aws_key()}})
        # Hash-shaped text is left out only under a key that holds a hash.
        hexed = secrets.token_hex(32)
        provenance._scan(world.repo, record, subjects, {"run": {"profile_digest": hexed}})
        with pytest.raises(Blocked, match="secret finding"):
            provenance._scan(world.repo, record, subjects, {"run": {"cli_version": hexed}})


def _notes_tip(w: World) -> str | None:
    proc = subprocess.run(["git", "-C", str(w.repo), "rev-parse", "-q", "--verify",
                           "refs/notes/oms"], capture_output=True, text=True, env=w.env,
                          check=False)  # fmt: skip
    return proc.stdout.strip() or None


def test_publish_writes_the_note_git_shows_and_pushes_it_never_forced(world: World) -> None:
    before = _notes_tip(world)
    code, out = world.json("evidence", "publish", world.blocked)
    assert code == 3 and out["error"]["kind"] == "blocked", out
    assert _notes_tip(world) == before  # nothing written
    code, out = world.json("evidence", "publish", world.uncontained)
    assert code == 0, out
    assert out["commit"] == world.uncontained and out["ref"] == "refs/notes/oms"
    assert out["added"] is True and out["pushed"] is None and out["bytes"] > 0
    shown = git(world.repo, "log", "-1", "--notes=oms", "--format=%N", world.uncontained,
                env=world.env).strip()  # fmt: skip
    assert hashlib.sha256(shown.encode() + b"\n").hexdigest() == out["envelope_sha256"]
    code, ver = world.json("evidence", "verify", _write(world, "note.json", shown))
    assert code == 0 and ver["valid"] and ver["predicate_type"] == PREDICATE, ver
    tip = _notes_tip(world)
    # The log grows (a later inclusion proof): the verdict's line in the note is reused.
    assert world.json("evidence", "note", "-m", "the log grows")[0] == 0
    code, again = world.json("evidence", "publish", world.uncontained)
    assert code == 0 and again["added"] is False, again
    assert again["envelope_sha256"] == out["envelope_sha256"] and _notes_tip(world) == tip
    bare = world.root / "notes-remote.git"
    git(world.root, "init", "-q", "--bare", str(bare), env=world.env)
    code, pushed = world.json("evidence", "publish", world.contained, "--push", str(bare))
    assert code == 0 and pushed["pushed"] == str(bare) and pushed["added"] is True, pushed
    there = git(bare, "rev-parse", "refs/notes/oms", env=world.env).strip()
    assert there == _notes_tip(world)
    clone = world.root / "notes-clone"
    git(world.root, "clone", "-q", str(bare), str(clone), env=world.env)
    git(clone, "fetch", "-q", "origin", "refs/notes/oms:refs/notes/oms", env=world.env)
    for commit in (world.contained, world.uncontained):
        assert git(clone, "notes", "--ref=oms", "show", commit, env=world.env).strip()


def _write(w: World, name: str, text: str) -> Path:
    path = w.root / name
    path.write_text(text)
    return path
