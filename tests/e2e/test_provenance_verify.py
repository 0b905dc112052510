"""`oms evidence verify --commit`: a commit's provenance attestation, verified offline in a
fresh clone with an empty `$OMS_HOME` (no key, no log, no `oms init`), through the real CLI.

The attestation is made by the real `oms evidence attest` on a real READY verdict (the gate's
check runs under real bwrap) and written into the producer's `refs/notes/oms` with plain
`git notes` (publishing is `oms evidence publish`, tested on its own), then pushed to a
bare repository on disk that stands in for the shared remote; every clone fetches it back
with `--fetch origin`. Each tampering exits 3 naming the check that caught it.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.env import clean_env
from support.oms import parse_single_json, run_oms
from support.repos import IDENTITY, commit_on, commit_policy, git, make_repo

from evidence import dsse, load_key
from gatekeeper.repo.notes import note_line, verify_hint
from gatekeeper.work.provenance import PREDICATE

POLICY = 'version = 1\n\n[[checks]]\nname = "unit"\ncmd = ["true"]\ntimeout_s = 60\n'
OTHER_KEY = "ed25519:" + base64.b64encode(b"\x07" * 32).decode()
CHECKS = ["note", "signature", "statement", "schema", "subject", "decision", "checkpoint",
          "inclusion"]  # fmt: skip
NEEDS = os.access("/usr/bin/bwrap", os.X_OK)
pytestmark = pytest.mark.skipif(not NEEDS, reason="bwrap is not installed (the gate's check)")


def signers(*entries: str, contained: bool = False) -> str:
    head = "\n[trust]\n" + ("require_contained = true\n" if contained else "")
    return POLICY + head + "signers = [\n" + "".join(f"  {e},\n" for e in entries) + "]\n"


@dataclass
class World:
    root: Path
    repo: Path
    env: dict[str, str]
    bare: Path
    key: str = ""
    candidate: str = ""
    contained: str = ""
    envelope: dict[str, Any] | None = None
    first: str = ""
    n: int = 0

    def oms_json(self, *args: str | Path) -> tuple[int, dict[str, Any]]:
        proc = run_oms([*args, "--json"], env=self.env, cwd=self.repo, timeout=300)
        return proc.returncode, parse_single_json(proc)

    def fresh(self, name: str) -> Path:
        self.n += 1
        path = self.root / f"{name}-{self.n}"
        path.mkdir()
        return path

    def verifier_env(self) -> dict[str, str]:
        """A fresh HOME and a fresh, empty OMS_HOME: nothing of the producer's."""
        return clean_env(self.fresh("home"), self.fresh("oms-home"))

    def clone(self, bare: Path | None = None) -> Path:
        dest = self.fresh("clone")
        git(self.root, "clone", "-q", str(bare or self.bare), str(dest), env=self.env)
        for key, value in IDENTITY:
            git(dest, "config", key, value, env=self.env)
        return dest

    def verify(self, clone: Path, commit: str, *extra: str, env: dict[str, str] | None = None,
               fetch: bool = True) -> tuple[int, dict[str, Any]]:  # fmt: skip
        """`oms evidence verify --commit` in `clone`, by default after fetching the remote's
        notes (`fetch=False`: the clone's own notes, as a test edited them)."""
        args = ["--fetch", "origin"] if fetch else []
        proc = run_oms(["evidence", "verify", "--commit", commit, "--repo", str(clone), *args,
                        *extra, "--json"], env=env or self.verifier_env(), cwd=clone,
                       timeout=120)  # fmt: skip
        return proc.returncode, parse_single_json(proc)

    def with_default_policy(self, text: str) -> Path:
        """A copy of the remote whose default branch then commits `text` as oms.toml; a
        clone of it that has fetched that commit."""
        bare = self.fresh("bare")
        git(self.root, "clone", "-q", "--mirror", str(self.bare), str(bare), env=self.env)
        clone = self.clone(bare)
        (clone / "oms.toml").write_text(text)
        git(clone, "commit", "-qm", "policy", "oms.toml", env=self.env)
        git(clone, "push", "-q", "origin", "main", env=self.env)
        git(clone, "fetch", "-q", "origin", env=self.env)
        return clone


def failed(out: dict[str, Any]) -> list[str]:
    return [c["check"] for c in out["checks"] if not c["ok"]]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("pverify")
    (root / "home").mkdir()
    env = clean_env(root / "home", root / "oms-state")
    repo = make_repo(root / "repo", {"oms.toml": POLICY}, env=env)
    w = World(root, repo, env, root / "remote.git")
    assert w.oms_json("init")[0] == 0
    w.first = git(repo, "rev-parse", "HEAD", env=env).strip()
    code, key = w.oms_json("evidence", "key")
    assert code == 0, key
    w.key = key["signer_key"]
    commit_policy(repo, env=env, text=signers(f'{{name = "laptop", key = "{w.key}"}}'))
    w.candidate = commit_on(repo, "feature", {"fix.txt": "fixed\n"}, env=env,
                            index=root / "idx")  # fmt: skip
    w.contained = _agent_commit(w)
    for commit in (w.candidate, w.contained):
        code, out = w.oms_json("process-result", "--candidate", commit)
        assert out["decision"] == "READY_FOR_HUMAN", out
        code, out = w.oms_json("evidence", "attest", commit)
        assert code == 0, out
        note = root / "note"
        note.write_bytes(note_line(out["envelope"]))
        git(repo, "notes", "--ref=oms", "add", "-F", str(note), commit, env=env)
        w.envelope = w.envelope or out["envelope"]
    # A policy naming only some other key, on a branch of its own (for --policy-ref).
    commit_on(repo, "other-signer", {"oms.toml": signers(f'{{name = "ci", key = "{OTHER_KEY}"}}')},
              env=env, index=root / "idx2")  # fmt: skip
    git(root, "init", "-q", "--bare", "-b", "main", str(w.bare), env=env)
    git(repo, "push", "-q", str(w.bare), "main", "feature", "other-signer", "refs/notes/oms",
        "refs/oms/runs/*:refs/oms/runs/*", env=env)  # fmt: skip
    yield w


def _agent_commit(w: World) -> str:
    """A commit made inside a real contained `oms agent run` (bwrap, no egress)."""
    commit = "git -c user.name=a -c user.email=a@b commit -qm agent"
    script = f"echo oms-start; echo agent > agent.txt; git add agent.txt; {commit}; echo oms-end"
    proc = run_oms(["agent", "run", "--egress", "none", "--json", "--", "/bin/sh", "-c", script],
                   env=w.env, cwd=w.repo, timeout=300)  # fmt: skip
    out = parse_single_json(proc)
    assert proc.returncode == 0 and out["exit_code"] == 0 and "oms-end" in out["stdout"], out
    assert out["candidate"], out
    return str(out["candidate"])


def replace_note(clone: Path, commit: str, *envelopes: dict[str, Any],
                 env: dict[str, str]) -> None:  # fmt: skip
    """The clone's note on `commit` is now these envelopes, one line each, sorted."""
    note = clone.parent / f"{clone.name}.note"
    note.write_bytes(b"".join(sorted(note_line(e) for e in envelopes)))
    git(clone, "notes", "--ref=oms", "add", "-f", "-F", str(note), commit, env=env)


def statement_of(envelope: dict[str, Any]) -> dict[str, Any]:
    stmt: dict[str, Any] = json.loads(base64.b64decode(envelope["payload"]))
    return stmt


def test_a_good_attestation_verifies_with_an_empty_oms_home(world: World) -> None:
    clone = world.clone()
    empty = world.verifier_env()
    code, out = world.verify(clone, world.candidate, env=empty)
    assert code == 0, out
    assert {"commit", "verified", "signer", "attestations", "checks"} <= set(out)
    assert out["commit"] == world.candidate and out["verified"] is True
    assert out["signer"] == "laptop" and out["attestations"] == 1
    assert [c["check"] for c in out["checks"]] == CHECKS and not failed(out), out
    # The fetched notes fast-forwarded the clone's own (absent) notes ref.
    assert git(clone, "rev-parse", "refs/notes/oms", env=world.env).strip()
    # Nothing but oms' cache of git objects was written under the empty state root.
    assert sorted(p.name for p in Path(empty["OMS_HOME"]).iterdir()) == ["repos"]
    # Human output: one verified line.
    proc = run_oms(["evidence", "verify", "--commit", world.candidate, "--repo", str(clone)],
                   env=world.verifier_env(), cwd=clone, timeout=120)  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.startswith("verified: "), proc.stdout


def test_it_needs_no_oms_home_at_all(world: World) -> None:
    clone = world.clone()
    env = clean_env(world.fresh("home"))
    assert "OMS_HOME" not in env
    code, out = world.verify(clone, world.candidate, env=env)
    assert code == 0 and out["verified"], out


def test_a_commit_amended_afterwards_has_no_attestation(world: World) -> None:
    clone = world.clone()
    git(clone, "checkout", "-q", "feature", env=world.env)
    git(clone, "commit", "-q", "--amend", "-m", "amended", env=world.env)
    amended = git(clone, "rev-parse", "HEAD", env=world.env).strip()
    code, out = world.verify(clone, amended)
    assert code == 3 and failed(out) == ["note"], out
    assert out["attestations"] == 0 and out["signer"] is None
    assert f"no provenance attestation for {amended}" in out["checks"][0]["detail"]
    proc = run_oms(["evidence", "verify", "--commit", amended, "--repo", str(clone)],
                   env=world.verifier_env(), cwd=clone, timeout=120)  # fmt: skip
    assert proc.returncode == 3 and proc.stdout.startswith("FAIL note: "), proc.stdout


def test_a_note_copied_to_another_commit_fails_the_subject(world: World) -> None:
    clone = world.clone()
    git(clone, "fetch", "-q", "origin", "refs/notes/oms:refs/notes/oms", env=world.env)
    git(clone, "notes", "--ref=oms", "copy", world.candidate, "main", env=world.env)
    main = git(clone, "rev-parse", "main", env=world.env).strip()
    code, out = world.verify(clone, main, fetch=False)
    assert code == 3 and failed(out) == ["subject"], out


def test_a_signer_not_in_the_trusted_policy_fails_the_signature(world: World) -> None:
    clone = world.clone()
    code, out = world.verify(clone, world.candidate, "--policy-ref", "origin/other-signer")
    assert code == 3 and failed(out) == ["signature"], out
    code, out = world.verify(clone, world.candidate, "--policy-ref", world.first)
    assert code == 3 and failed(out) == ["signature"], out
    assert "lists no [trust] signers" in out["checks"][1]["detail"]


def test_a_signer_removed_from_the_default_branch_is_revoked(world: World) -> None:
    """The commit's own oms.toml still lists the key: the default branch's is the one read."""
    clone = world.with_default_policy(signers(f'{{name = "ci", key = "{OTHER_KEY}"}}'))
    own = git(clone, "show", f"{world.candidate}:oms.toml", env=world.env)
    assert world.key in own
    code, out = world.verify(clone, world.candidate)
    assert code == 3 and failed(out) == ["signature"], out


def test_an_expired_signer_window_fails_the_signature(world: World) -> None:
    entry = f'{{name = "laptop", key = "{world.key}", not_after = "2001-01-01"}}'
    clone = world.with_default_policy(signers(entry))
    code, out = world.verify(clone, world.candidate)
    assert code == 3 and failed(out) == ["signature"], out
    assert "expired after 2001-01-01" in out["checks"][1]["detail"]


def test_require_contained_fails_a_commit_made_by_hand(world: World) -> None:
    """... and passes the commit a contained `oms agent run` made."""
    entry = f'{{name = "laptop", key = "{world.key}"}}'
    clone = world.with_default_policy(signers(entry, contained=True))
    code, out = world.verify(clone, world.candidate)
    assert code == 3 and failed(out) == ["contained"], out
    git(clone, "fetch", "-q", "origin", "refs/oms/runs/*:refs/oms/runs/*", env=world.env)
    code, out = world.verify(clone, world.contained)
    assert code == 0 and [c["check"] for c in out["checks"]] == [*CHECKS, "contained"], out


def test_an_edited_predicate_resigned_with_an_unlisted_key_fails(world: World) -> None:
    """Any good line verifies the commit; the edited one alone does not."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    assert world.envelope is not None
    stmt = statement_of(world.envelope)
    stmt["predicate"]["contained"] = True
    forged = dsse.export_statement(stmt, Ed25519PrivateKey.generate(), "forged")
    clone = world.clone()
    replace_note(clone, world.candidate, forged, env=world.env)
    code, out = world.verify(clone, world.candidate, fetch=False)
    assert code == 3 and failed(out) == ["signature"] and out["attestations"] == 1, out
    replace_note(clone, world.candidate, forged, world.envelope, env=world.env)
    code, out = world.verify(clone, world.candidate, fetch=False)
    assert code == 0 and out["attestations"] == 2 and out["signer"] == "laptop", out


def test_a_checkpoint_from_another_log_fails(world: World) -> None:
    """The other log is a second repository's, signed by the very same key: re-signing the
    swapped predicate with the trusted key isolates the checkpoint check."""
    other = make_repo(world.fresh("other") / "repo", {"oms.toml": POLICY}, env=world.env)
    proc = run_oms(["init", "--json"], env=world.env, cwd=other, timeout=120)
    assert proc.returncode == 0, proc.stderr
    proc = run_oms(["evidence", "prove", "0", "--json"], env=world.env, cwd=other, timeout=120)
    proof = parse_single_json(proc)
    assert world.envelope is not None
    stmt = statement_of(world.envelope)
    verdict = stmt["predicate"]["verdict"]
    verdict["checkpoint"] = proof["checkpoint"]
    verdict["inclusion_proof"].update(
        tree_size=proof["tree_size"], root=proof["root"], leaf_hash=proof["leaf_hash"],
        hashes=proof["proof"])  # fmt: skip
    key = load_key(Path(world.env["OMS_HOME"]))
    swapped = dsse.export_statement(stmt, key.private, key.key_id)
    clone = world.clone()
    replace_note(clone, world.candidate, swapped, env=world.env)
    code, out = world.verify(clone, world.candidate, fetch=False)
    assert code == 3 and failed(out) == ["checkpoint", "inclusion"], out
    assert "oms.local/" in out["checks"][6]["detail"], out


def test_the_envelope_verifies_without_oms_code(world: World) -> None:
    """securesystemslib checks the DSSE signature, in-toto-attestation the Statement."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from google.protobuf import json_format
    from in_toto_attestation.v1 import statement_pb2
    from in_toto_attestation.v1.statement import Statement
    from securesystemslib.dsse import Envelope
    from securesystemslib.exceptions import VerificationError
    from securesystemslib.signer import SSlibKey

    assert world.envelope is not None
    raw = base64.b64decode(world.key.removeprefix("ed25519:"))
    keyid = world.envelope["signatures"][0]["keyid"]  # securesystemslib matches on it
    key = SSlibKey.from_crypto(Ed25519PublicKey.from_public_bytes(raw), keyid=keyid)
    copy = json.loads(json.dumps(world.envelope))  # from_dict rewrites the dicts it is given
    envelope = Envelope.from_dict(copy)
    assert envelope.payload_type == "application/vnd.in-toto+json"
    assert keyid in envelope.verify([key], 1)
    pb = json_format.Parse(envelope.payload, statement_pb2.Statement())
    Statement.copy_from_pb(pb).validate()
    assert pb.predicate_type == PREDICATE
    assert [s.digest["gitCommit"] for s in pb.subject if "gitCommit" in s.digest] == [
        world.candidate]  # fmt: skip
    stmt = statement_of(world.envelope)
    stmt["predicate"]["contained"] = True
    payload = base64.b64encode(json.dumps(stmt).encode()).decode()
    tampered = Envelope.from_dict({**json.loads(json.dumps(world.envelope)), "payload": payload})
    with pytest.raises(VerificationError):
        tampered.verify([key], 1)


def test_exactly_one_of_file_and_commit(world: World) -> None:
    for args in (["evidence", "verify"], ["evidence", "verify", "x.json", "--commit", "HEAD"],
                 ["evidence", "verify", "x.json", "--fetch", "origin"]):  # fmt: skip
        proc = run_oms([*args, "--json"], env=world.verifier_env(), cwd=world.repo, timeout=60)
        out = parse_single_json(proc)
        assert proc.returncode == 2 and out["error"]["kind"] == "usage", out


def test_fetched_notes_never_overwrite_the_clones_own(world: World) -> None:
    """A clone whose notes do not fast-forward to the remote's keeps them; the remote's are
    read from oms' private ref for this check."""
    assert world.envelope is not None
    clone = world.clone()
    replace_note(clone, world.candidate, world.envelope, env=world.env)  # a history of its own
    own = git(clone, "rev-parse", "refs/notes/oms", env=world.env).strip()
    code, out = world.verify(clone, world.candidate)
    assert code == 0 and out["verified"], out
    assert git(clone, "rev-parse", "refs/notes/oms", env=world.env).strip() == own


def test_a_delivered_agent_commit_verifies_in_a_fresh_clone(tmp_path: Path) -> None:
    """The issue's whole path: a real contained `oms agent run` commit, gated READY and
    delivered by `process-result --push` (branch and `refs/notes/oms` to a bare remote on
    disk), verifies in a fresh clone elsewhere with an empty `$OMS_HOME`, under a policy that
    asks for a contained run; the PR body's own command (`verify_hint`) runs as printed."""
    (tmp_path / "home").mkdir()
    env = clean_env(tmp_path / "home", tmp_path / "oms-state")
    repo = make_repo(tmp_path / "repo", {"oms.toml": POLICY}, env=env)
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare), env=env)
    git(repo, "remote", "add", "origin", str(bare), env=env)
    w = World(tmp_path, repo, env, bare)
    assert w.oms_json("init")[0] == 0
    w.key = w.oms_json("evidence", "key")[1]["signer_key"]
    commit_policy(repo, env=env, text=signers(f'{{name = "laptop", key = "{w.key}"}}',
                                              contained=True))  # fmt: skip
    git(repo, "push", "-q", "origin", "main", env=env)
    candidate = _agent_commit(w)
    code, out = w.oms_json("process-result", "--candidate", candidate,
                           "--deliver-branch", "agent/fix", "--push", "origin")  # fmt: skip
    assert code == 0 and out["decision"] == "READY_FOR_HUMAN", out
    assert out["delivered"]["provenance"] == {"ref": "refs/notes/oms", "pushed": True}, out
    remote_notes = git(bare, "notes", "--ref=oms", "show", candidate, env=env)
    assert remote_notes.count("\n") == 1 and '"payloadType"' in remote_notes

    clone = w.clone()
    assert git(clone, "rev-parse", "origin/agent/fix", env=env).strip() == candidate
    code, shown = w.verify(clone, "origin/agent/fix")
    assert code == 0 and shown["verified"] and shown["signer"] == "laptop", shown
    assert [c["check"] for c in shown["checks"]] == [*CHECKS, "contained"], shown

    # What the draft PR body tells a reviewer to run, run as printed in another fresh clone.
    command = verify_hint(candidate).split("verify it with: ")[1].strip("`")
    other = w.clone()
    user = w.verifier_env()  # `oms` on PATH as this interpreter's console script
    user["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{user.get('PATH', '')}"
    proc = subprocess.run(["sh", "-c", command], cwd=other, env=user,
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"verified: {candidate[:12]}"), proc.stdout
