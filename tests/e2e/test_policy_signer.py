"""`oms policy signer add|remove` and `oms evidence key`'s `ed25519:` form, through the real
CLI on a real repository: the entry lands in the worktree's oms.toml (nothing committed);
once committed and trusted at a terminal, the policy the gates read lists the key, and
removing the entry takes it out again."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from support.pty import trust_tip
from support.repos import git, make_repo

from policy import parse_policy, signer_key_bytes

OmsJson = Callable[..., tuple[int, dict[str, Any]]]
RunOms = Callable[..., subprocess.CompletedProcess[str]]
POLICY = '# ours\nversion = 1\n\n[[checks]]\nname = "unit"\ncmd = ["true"]  # fast\n'


def _commit(repo: Path, env: dict[str, str], message: str) -> None:
    git(repo, "commit", "-q", "-m", message, "oms.toml", env=env)
    trust_tip(repo, env=env)  # a human trusts the new tip at a terminal


def _signers(oms_json: OmsJson, repo: Path) -> list[dict[str, Any]]:
    code, shown = oms_json(["policy", "show", "--repo", repo])
    assert code == 0, shown
    signers: list[dict[str, Any]] = shown["policy"].get("trust", {}).get("signers", [])
    return signers


def test_a_signer_added_committed_and_trusted_is_in_the_policy_the_gates_read(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson, run_oms: RunOms
) -> None:
    repo = make_repo(tmp_path / "repo", {"oms.toml": POLICY}, env=oms_env)
    assert oms_json(["init", "--repo", repo])[0] == 0
    code, key = oms_json(["evidence", "key", "--repo", repo])
    assert code == 0, key
    assert len(signer_key_bytes(key["signer_key"])) == 32
    shown = run_oms(["evidence", "key", "--repo", repo]).stdout.splitlines()
    assert shown[1] == "-----BEGIN PUBLIC KEY-----"  # the PEM, where it always was
    assert shown[-1] == f"signer_key {key['signer_key']}"

    proc = run_oms(["policy", "signer", "add", "--name", "laptop", "--not-after", "2027-06-30",
                    "--repo", repo])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == (
        f"added signer laptop ({key['signer_key']}, not_after 2027-06-30) to {repo}/oms.toml"
    )
    assert "oms policy trust" in proc.stdout
    assert git(repo, "status", "--porcelain", env=oms_env) == " M oms.toml\n"  # not committed
    assert (repo / "oms.toml").read_text().startswith(POLICY)
    assert _signers(oms_json, repo) == []  # the gates read the trusted mark, not the worktree

    _commit(repo, oms_env, "policy: trust the laptop's key")
    assert _signers(oms_json, repo) == [
        {"name": "laptop", "key": key["signer_key"], "not_before": None,
         "not_after": "2027-06-30"}]  # fmt: skip

    code, out = oms_json(["policy", "signer", "remove", "--name", "laptop", "--repo", repo])
    assert code == 0 and out["action"] == "removed" and out["key"] == key["signer_key"], out
    _commit(repo, oms_env, "policy: revoke the laptop's key")
    assert _signers(oms_json, repo) == []


def test_refusals_are_one_json_object_and_leave_the_file_alone(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    repo = make_repo(tmp_path / "repo", {"real.toml": POLICY}, env=oms_env)
    os.symlink("real.toml", repo / "oms.toml")
    code, out = oms_json(["policy", "signer", "add", "--name", "ci", "--key",
                          "ed25519:" + "A" * 43 + "=", "--repo", repo])  # fmt: skip
    assert (code, out["error"]["kind"]) == (2, "usage"), out
    assert "symlink" in out["error"]["message"]
    assert (repo / "real.toml").read_text() == POLICY
    os.unlink(repo / "oms.toml")
    (repo / "oms.toml").write_text(POLICY)
    code, out = oms_json(["policy", "signer", "add", "--name", "ci", "--key", "00" * 32,
                          "--repo", repo])  # fmt: skip
    assert (code, out["error"]["kind"]) == (2, "usage"), out
    assert 'key must be "ed25519:"' in out["error"]["message"]
    code, out = oms_json(["policy", "signer", "add", "--name", "ci", "--not-after", "30.6.2027",
                          "--repo", repo])  # fmt: skip
    assert (code, out["error"]["kind"]) == (2, "usage"), out
    assert (repo / "oms.toml").read_text() == POLICY


def test_check_names_the_trust_key_at_fault(
    tmp_path: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    key = "ed25519:" + "A" * 43 + "="
    text = f'{POLICY}[trust]\nsigners = [{{name = "a", key = "{key}"}}, ' \
           f'{{name = "b", key = "{key}"}}]\n'  # fmt: skip
    repo = make_repo(tmp_path / "repo", {}, env=oms_env)
    (repo / "oms.toml").write_text(text)
    code, out = oms_json(["policy", "check", "--repo", repo])
    assert code == 2, out
    assert out["errors"][0]["line"] == ("oms.toml:trust.signers: signers a and b name the same key")
    (repo / "oms.toml").write_text(
        text.split("[trust]")[0] + f"[trust]\nsigners = [{{name = "
        f'"a", key = "{key}", not_after = "2027-06-30"}}]\n'
    )
    code, out = oms_json(["policy", "check", "--repo", repo])
    assert code == 0 and out["digest"] == parse_policy(
        (repo / "oms.toml").read_bytes(), "x").digest, out  # fmt: skip
