"""`next_actions`: their shape, the copyable command, and which actions each answer gets."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from gatekeeper.errors import Unavailable
from gatekeeper.gates.toolchain.tree import ToolchainUnavailable
from gatekeeper.mcp.actions import NextAction, copyable, oms_argv, served
from gatekeeper.mcp.server import build_server
from gatekeeper.mcp.tools.transfer import preview_actions
from gatekeeper.mcp.tools.verdicts import unavailable_actions, verdict_actions

DIGEST = "sha256:" + "ab" * 32
TOP = Path("/srv/my repo")


def test_oms_argv_is_the_script_beside_the_interpreter_else_the_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    monkeypatch.setattr(sys, "executable", str(python))
    assert oms_argv() == [str(python), "-P", "-m", "gatekeeper"]
    script = tmp_path / "bin" / "oms"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert oms_argv() == [str(script)]


def test_copyable_quotes_each_word_and_keeps_a_hidden_home_expandable() -> None:
    line = copyable(["~/venv/bin/oms", "doctor", "--repo", "/srv/my repo", "~/a b"])
    assert line == "~/venv/bin/oms doctor --repo '/srv/my repo' ~/'a b'"


def test_a_human_action_carries_the_command_and_a_tool_action_its_arguments() -> None:
    human = NextAction(action="a", label="l", description="d", owner="human",
                       argv=("/opt/oms/bin/oms", "doctor"))  # fmt: skip
    assert human.to_json() == {
        "action": "a", "label": "l", "description": "d",
        "owner": {"kind": "human", "label": "a human, in their own terminal (the agent "
                  "cannot do this)"},
        "blocking": True, "required": True,
        "command": "/opt/oms/bin/oms doctor", "argv": ["/opt/oms/bin/oms", "doctor"],
    }  # fmt: skip
    agent = NextAction(action="b", label="l", description="d", owner="agent",
                       tool="oms_status", arguments={"x": 1}).to_json()  # fmt: skip
    assert agent["owner"]["kind"] == "agent" and "command" not in agent
    assert (agent["tool"], agent["arguments"]) == ("oms_status", {"x": 1})


def _preview(status: str, findings: int = 0, reasons: tuple[str, ...] = ()) -> dict[str, Any]:
    block = "" if status == "blocked" else f"oms transfer approve {DIGEST} --code 0123abcd"
    manifest = {"block_reasons": list(reasons), "totals": {"findings": findings}}
    return {"status": status, "approval_packet": {"copyable_text_block": block},
            "manifest": manifest}  # fmt: skip


ARGS = {"to": "anthropic:m", "purpose": "p", "context": "paths", "paths": ["a"], "redact": False}


def test_an_approvable_preview_asks_a_human_for_the_packets_command_with_absolute_oms() -> None:
    (action,) = preview_actions("oms_transfer_preview", ARGS, _preview("previewed"))
    out = action.to_json()
    assert out["owner"]["kind"] == "human" and out["action"] == "approve_transfer"
    assert out["argv"] == [*oms_argv(), "transfer", "approve", DIGEST, "--code", "0123abcd"]
    assert shlex.split(out["command"]) == out["argv"]
    assert Path(out["argv"][0]).is_absolute()


def test_a_preview_blocked_by_findings_offers_the_same_call_with_redact() -> None:
    data = _preview("blocked", findings=2, reasons=("2 secret finding(s); use --redact",))
    (action,) = preview_actions("oms_model_access", ARGS, data)
    assert (action.owner, action.tool) == ("agent", "oms_model_access")
    assert action.arguments == {**ARGS, "redact": True}
    purpose = _preview("blocked", findings=1,
                       reasons=("the purpose text itself contains a secret",))  # fmt: skip
    (action,) = preview_actions("oms_model_access", ARGS, purpose)
    assert action.action == "rewrite_purpose" and "purpose" not in action.arguments
    too_big = _preview("blocked", reasons=("9 bytes is over the transfer limit of 1",))
    assert preview_actions("oms_model_access", ARGS, too_big) == []


def _check(name: str, code: int) -> dict[str, Any]:
    return {"name": name, "exit_code": code, "timed_out": False, "stderr_bytes": 3,
            "stderr_blob": f"sha256:{name}", "stdout_blob": "sha256:out"}  # fmt: skip


def _verdict(decision: str, **extra: Any) -> dict[str, Any]:
    base = {"decision": decision, "evidence_seq": 7, "checks": [], "findings": [],
            "protected_changes": []}  # fmt: skip
    return {**base, **extra}


ASKED = {"candidate": "cand/x", "ticket": None, "attempt": 2}


def test_a_failed_verdict_offers_the_failing_output_then_fix_and_rerun() -> None:
    v = _verdict("FAILED", checks=[_check("ok", 0), _check("unit", 1)])
    read, rerun = verdict_actions(TOP, v, ASKED)
    assert read.tool == "oms_read_artifact" and not read.required
    assert read.arguments == {"seq": 7, "digest": "sha256:unit"}
    assert (rerun.action, rerun.owner) == ("fix_and_rerun", "agent")
    assert rerun.tool == "oms_process_result"
    assert rerun.arguments == {"candidate": "cand/x", "attempt": 3}


def test_a_blocked_verdict_names_the_agents_fix_and_the_humans_alternative() -> None:
    v = _verdict("BLOCKED", findings=[{"rule": "aws"}])
    actions = verdict_actions(TOP, v, ASKED)
    assert [(a.action, a.owner) for a in actions] == [
        ("fix_and_rerun", "agent"), ("allow_fingerprint", "human")]  # fmt: skip


def test_ready_asks_a_human_to_review_with_a_command_that_names_the_entry() -> None:
    (review,) = verdict_actions(TOP, _verdict("READY_FOR_HUMAN"), ASKED)
    assert review.owner == "human"
    assert list(review.argv[-4:]) == ["show", "7", "--repo", str(TOP)]


def test_an_unprepared_toolchain_asks_a_human_for_toolchain_prepare() -> None:
    try:
        try:
            raise ToolchainUnavailable("toolchain py is not prepared")
        except ToolchainUnavailable as cause:
            raise Unavailable("toolchain py is not prepared") from cause
    except Unavailable as exc:
        prepare, rerun = unavailable_actions(TOP, exc, ASKED)
    assert prepare.owner == "human"
    assert list(prepare.argv) == [*oms_argv(), "toolchain", "prepare", "--repo", str(TOP)]
    assert rerun.tool == "oms_process_result" and rerun.action == "rerun"
    (doctor,) = unavailable_actions(TOP, Unavailable("gitleaks binary digest mismatch"), ASKED)
    assert list(doctor.argv[-3:]) == ["doctor", "--repo", str(TOP)]


def test_a_tool_outside_the_served_profile_is_never_offered_as_the_next_call(
    git_repo: Path,
) -> None:
    offered = [
        NextAction(action="read_check_output", label="Read", description="d", owner="agent",
                   tool="oms_read_artifact"),
        NextAction(action="rerun", label="Rerun", description="d", owner="agent",
                   tool="oms_process_result"),
        NextAction(action="review", label="Review", description="d", owner="human"),
    ]  # fmt: skip
    kept = served(build_server(git_repo), offered)
    assert [a.action for a in kept] == ["rerun", "review"]
    assert served(build_server(git_repo, "all"), offered) == offered
