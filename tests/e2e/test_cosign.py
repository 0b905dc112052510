"""Cosigners that are not this machine, through the real CLI on a real repository.

The cosigner is tests/support/witness_server.py: a C2SP tlog-witness on 127.0.0.1 built
from the spec, standing in for the Go witnesses (litewitness, omniwitness), which nothing
this machine reaches can install. Everything else is real: git, `oms init`, the log, the
policy read at the trusted mark.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from support.repos import make_repo
from support.witness_server import WitnessServer

from evidence import EvidenceStore, repo_id_for

OmsJson = Callable[..., tuple[int, dict[str, Any]]]
RunOms = Callable[..., subprocess.CompletedProcess[str]]


@dataclass
class Setup:
    repo: Path
    store: EvidenceStore
    witness: WitnessServer


def _policy(w: WitnessServer, required: int, grace: int) -> str:
    head = f"version = 1\n\n[evidence]\nrequired = {required}\ngrace = {grace}\n\n"
    return head + f'[[evidence.cosigners]]\nname = "w1"\nurl = "{w.url}"\nkey = "{w.vkey}"\n'


def _setup(tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson, oms_home: Path,
           grace: int = 1000) -> Setup:  # fmt: skip
    w = WitnessServer("witness.test/w1", logs={})
    repo = make_repo(tmp_path / "repo", {"oms.toml": _policy(w, 1, grace)}, env=oms_env)
    code, out = oms_json(["init", "--repo", repo])
    assert code == 0, out
    store = EvidenceStore.open(oms_home, repo_id_for(repo / ".git"))
    w.logs[store.origin] = (store.origin, store.key.public)  # the witness knows this log
    return Setup(repo, store, w)


@pytest.fixture
def setup(tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson,
          oms_home: Path) -> Iterator[Setup]:  # fmt: skip
    s = _setup(tmp_path, oms_env, oms_json, oms_home)
    yield s
    s.witness.close()


def _note(oms_json: OmsJson, s: Setup, n: int = 1) -> None:
    for i in range(n):
        code, out = oms_json(["evidence", "note", "-m", f"note {i}", "--repo", s.repo])
        assert code == 0, out


def _audit(oms_json: OmsJson, s: Setup) -> tuple[int, dict[str, Any]]:
    return oms_json(["evidence", "audit", "--repo", s.repo])


def test_required_cosigner_goes_from_not_yet_cosigned_to_cosigned(
    setup: Setup, oms_json: OmsJson, run_oms: RunOms
) -> None:
    s = setup
    code, audit = _audit(oms_json, s)
    assert code == 0 and audit["intact"], audit
    assert audit["cosign"]["cosigned"] is False
    assert audit["warnings"] and audit["warnings"][0].startswith("not yet cosigned: 0 of 1")

    code, out = oms_json(["evidence", "cosign", "--repo", s.repo])
    assert code == 0, out
    assert out["cosigned"] == 1 and out["cosigners"][0]["status"] == "cosigned"
    code, audit = _audit(oms_json, s)
    assert code == 0 and audit["warnings"] == [] and audit["cosign"]["cosigned"] is True
    assert audit["cosign"]["cosigners"][0]["size"] == audit["entries"]
    assert s.witness.state[s.store.origin][0] == audit["entries"]

    # A command that appends asks the cosigner itself, once it has answered.
    _note(oms_json, s)
    code, audit = _audit(oms_json, s)
    assert code == 0 and audit["cosign"]["cosigned"] is True, audit
    assert s.witness.state[s.store.origin][0] == audit["entries"]
    assert s.witness.requests[-1] == (audit["entries"] - 1, 200)  # old = what it cosigned
    human = run_oms(["evidence", "audit", "--repo", s.repo]).stdout.splitlines()
    assert human[1].startswith(f"cosigned by w1 at {audit['entries']} entries")


def test_the_stored_cosignature_verifies_as_the_spec_defines_it(
    setup: Setup, oms_json: OmsJson
) -> None:
    """Parsed from the stored line without oms' code: key ID || big-endian time || Ed25519
    over `cosignature/v1\\ntime T\\n` and the checkpoint text (c2sp.org/tlog-cosignature)."""
    s = setup
    assert oms_json(["evidence", "cosign", "--repo", s.repo])[0] == 0
    held = json.loads((s.store.dir / "cosign.json").read_text())["cosigned"]["w1"]
    name, blob = held["line"].removeprefix("\u2014 ").split(" ")
    raw = base64.b64decode(blob)
    assert name == "witness.test/w1" and len(raw) == 76
    assert raw[:4].hex() == s.witness.vkey.split("+")[1]
    when = int.from_bytes(raw[4:12], "big")
    text = held["note"][: held["note"].rfind("\n\n") + 1].encode()
    s.witness.key.public_key().verify(raw[12:], b"cosignature/v1\ntime %d\n" % when + text)
    assert text == s.store.checkpoint_path.read_bytes()[: len(text)]


def test_a_rolled_back_log_is_refused_by_the_cosigner_and_audit_says_not_intact(
    setup: Setup, oms_json: OmsJson, run_oms: RunOms, tmp_path: Path
) -> None:
    """An attacker with the key rolls the whole local state back (log, checkpoint, witness
    copy, cosign state): every local check agrees again; the cosigner that saw more does
    not."""
    s = setup
    _note(oms_json, s, 2)
    saved = tmp_path / "saved"
    shutil.copytree(s.store.dir, saved / "evidence")
    shutil.copy2(s.store.witness_path, saved / "witness")
    _note(oms_json, s, 2)
    assert oms_json(["evidence", "cosign", "--repo", s.repo])[0] == 0
    seen = s.witness.state[s.store.origin][0]
    shutil.rmtree(s.store.dir)
    shutil.copytree(saved / "evidence", s.store.dir)
    shutil.copy2(saved / "witness", s.store.witness_path)
    code, audit = _audit(oms_json, s)
    assert code == 0 and audit["entries"] == seen - 2  # locally consistent: nothing to see

    code, out = oms_json(["evidence", "cosign", "--repo", s.repo])
    assert code == 3, out
    assert out["cosigners"][0]["status"] == "refused"
    assert out["cosigners"][0]["witness_size"] == seen
    code, audit = _audit(oms_json, s)
    assert code == 3 and audit["intact"] is False, audit
    assert "refused" in audit["reason"] and "rolled back" in audit["reason"]
    assert audit["cosign"]["refusals"][0]["witness_size"] == seen
    proc = run_oms(["evidence", "audit", "--repo", s.repo])
    assert proc.returncode == 3 and proc.stdout.startswith("TAMPERED")


def test_a_cosignature_by_another_key_is_not_counted(setup: Setup, oms_json: OmsJson) -> None:
    s = setup
    s.witness.sign_with = Ed25519PrivateKey.generate()
    code, out = oms_json(["evidence", "cosign", "--repo", s.repo])
    assert code == 3, out
    assert out["cosigned"] == 0 and out["cosigners"][0]["status"] == "rejected"
    assert "no cosignature by witness.test/w1" in out["cosigners"][0]["detail"]
    code, audit = _audit(oms_json, s)
    assert code == 0 and audit["cosign"]["cosigned"] is False, audit
    assert audit["cosign"]["cosigners"][0]["size"] is None
    assert audit["warnings"][0].startswith("not yet cosigned")


def test_a_cosigner_down_is_unavailable_and_appending_still_succeeds(
    setup: Setup, oms_json: OmsJson, run_oms: RunOms
) -> None:
    s = setup
    s.witness.close()
    code, out = oms_json(["evidence", "cosign", "--repo", s.repo])
    assert code == 4, out
    assert out["cosigners"][0]["status"] == "unreachable"
    proc = run_oms(["evidence", "note", "-m", "still appended", "--repo", s.repo, "--json"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") == 1 and '"ok": true' in proc.stdout  # one JSON object
    assert "oms: warning: cosigner w1 unreachable" in proc.stderr
    assert "oms evidence cosign" in proc.stderr


def test_doctor_is_not_ready_once_the_log_outgrows_its_cosignature_by_the_grace(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson, oms_home: Path
) -> None:
    s = _setup(tmp_path, oms_env, oms_json, oms_home, grace=2)
    try:
        assert oms_json(["evidence", "cosign", "--repo", s.repo])[0] == 0
        s.witness.close()
        _note(oms_json, s, 2)
        _, report = oms_json(["doctor", "--repo", s.repo])
        assert report["cosign"]["ok"] is True, report
        assert not any("cosignature" in p for p in report.get("problems", [])), report
        assert any(w.startswith("not yet cosigned: 2 entries") for w in report["warnings"])
        _note(oms_json, s)
        code, report = oms_json(["doctor", "--repo", s.repo])
        assert code == 4, report
        found = [p for p in report["problems"] if "beyond its last required cosignature" in p]
        assert found, report
    finally:
        s.witness.close()
