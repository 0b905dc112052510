"""`run_hook`: each client's stdin JSON in, its own answer out (exit code, stdout, stderr),
for every event oms answers, and a refusal whenever a check cannot run. The checks that
need the scanners or a repository's gate are in tests/e2e/test_hooks.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gatekeeper.integrations.hooks import run_hook
from gatekeeper.integrations.hooks.protocol import HookAnswer
from gatekeeper.integrations.hooks.stop import INSIDE_NOTE, MAX_BLOCKS, count_path, read_count
from gatekeeper.integrations.hooks.writes import patch_writes

CLIENTS = ("claude-code", "codex")


def call(client: str, event: str, body: Any, *, inside: bool = True) -> HookAnswer:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return run_hook(client, event, data, in_sandbox=inside)


def denied(answer: HookAnswer) -> str:
    """The deny reason of a PreToolUse answer, asserting its exact shape."""
    assert answer.exit_code == 0 and answer.stderr == ""
    out = json.loads(answer.stdout)
    spec = out["hookSpecificOutput"]
    assert set(spec) == {"hookEventName", "permissionDecision", "permissionDecisionReason"}
    assert spec["hookEventName"] == "PreToolUse" and spec["permissionDecision"] == "deny"
    reason: str = spec["permissionDecisionReason"]
    assert reason.strip()
    return reason


def blocked(answer: HookAnswer) -> str:
    assert answer.exit_code == 0 and answer.stderr == ""
    out = json.loads(answer.stdout)
    assert set(out) == {"decision", "reason"} and out["decision"] == "block"
    return str(out["reason"])


@pytest.fixture
def repo_dir(tmp_path: Path) -> Path:
    (tmp_path / "r" / ".git").mkdir(parents=True)
    return tmp_path / "r"


@pytest.mark.parametrize("client", CLIENTS)
def test_bash_force_push_is_denied_in_the_clients_json(client: str, repo_dir: Path) -> None:
    body = {"hook_event_name": "PreToolUse", "cwd": str(repo_dir), "tool_name": "Bash",
            "tool_input": {"command": "git push --force origin main"}}  # fmt: skip
    assert "force-push" in denied(call(client, "PreToolUse", body))


@pytest.mark.parametrize("client", CLIENTS)
def test_a_harmless_command_is_allowed_silently(client: str, repo_dir: Path) -> None:
    body = {"cwd": str(repo_dir), "tool_name": "Bash", "tool_input": {"command": "ls -la"}}
    assert call(client, "PreToolUse", body) == HookAnswer(0, "", "")


@pytest.mark.parametrize("client", CLIENTS)
def test_another_tool_is_allowed(client: str, repo_dir: Path) -> None:
    body = {"cwd": str(repo_dir), "tool_name": "mcp__oms__scan", "tool_input": [1, 2]}
    assert call(client, "PreToolUse", body) == HookAnswer()


@pytest.mark.parametrize(
    ("tool", "tool_input"),
    [
        ("Write", {"file_path": ".github/workflows/ci.yml", "content": "on: push\n"}),
        ("Edit", {"file_path": "oms.toml", "old_string": "a", "new_string": "b"}),
        ("MultiEdit", {"file_path": "sub/.claude/settings.json", "edits": [{"new_string": "x"}]}),
        ("NotebookEdit", {"notebook_path": ".git/hooks/pre-commit", "new_source": "x"}),
    ],
)
def test_claude_code_file_tools_on_protected_paths_are_denied(
    tool: str, tool_input: dict[str, Any], repo_dir: Path
) -> None:
    body = {"cwd": str(repo_dir), "tool_name": tool, "tool_input": tool_input}
    assert "protected path" in denied(call("claude-code", "PreToolUse", body))


def test_a_protected_path_is_matched_from_the_repository_top_not_the_cwd(repo_dir: Path) -> None:
    (repo_dir / "src").mkdir()
    body = {"cwd": str(repo_dir / "src"), "tool_name": "Write",
            "tool_input": {"file_path": "../AGENTS.md", "content": "obey"}}  # fmt: skip
    assert "AGENTS.md" in denied(call("claude-code", "PreToolUse", body))


def test_a_symlink_into_git_is_judged_by_where_it_leads(repo_dir: Path) -> None:
    (repo_dir / ".git" / "hooks").mkdir()
    (repo_dir / "innocent").symlink_to(".git/hooks")
    body = {"cwd": str(repo_dir), "tool_name": "Write",
            "tool_input": {"file_path": "innocent/pre-commit", "content": "x"}}  # fmt: skip
    assert ".git/" in denied(call("claude-code", "PreToolUse", body))


def test_codex_apply_patch_to_a_protected_path_is_denied(repo_dir: Path) -> None:
    patch = "*** Begin Patch\n*** Add File: .codex/config.toml\n+x = 1\n*** End Patch\n"
    body = {"cwd": str(repo_dir), "tool_name": "apply_patch", "tool_input": {"command": patch}}
    assert ".codex/" in denied(call("codex", "PreToolUse", body))


def test_codex_shell_piping_a_patch_into_apply_patch_is_judged_as_the_patch(
    repo_dir: Path,
) -> None:
    patch = "*** Begin Patch\n*** Update File: CLAUDE.md\n+obey\n*** End Patch"
    cmd = f"apply_patch <<'EOF'\n{patch}\nEOF"
    body = {"cwd": str(repo_dir), "tool_name": "Bash", "tool_input": {"command": cmd}}
    assert "CLAUDE.md" in denied(call("codex", "PreToolUse", body))


def test_a_write_into_the_state_root_is_denied_even_outside_the_repository(
    tmp_path: Path, repo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMS_HOME", str(tmp_path / "state"))
    target = tmp_path / "state" / "keys" / "k"
    body = {"cwd": str(repo_dir), "tool_name": "Write",
            "tool_input": {"file_path": str(target), "content": "x"}}  # fmt: skip
    assert "state root" in denied(call("claude-code", "PreToolUse", body, inside=False))


@pytest.mark.parametrize("inside", [True, False])
@pytest.mark.parametrize(
    ("tool", "tool_input", "why"),
    [
        ("Read", {"file_path": ".env"}, "(.env, .env.*)"),
        ("Read", {"file_path": "/home/u/.ssh/id_ed25519"}, "SSH private key"),
        ("Grep", {"pattern": "KEY", "path": "config/.env.production"}, "(.env, .env.*)"),
        ("Grep", {"pattern": "BEGIN", "glob": "**/*.{pem,crt}"}, "(*.pem)"),
        ("Glob", {"pattern": "**/.env*"}, "(.env, .env.*)"),
    ],
)
def test_claude_code_reads_of_secret_files_are_denied_by_name_inside_and_out(
    tool: str, tool_input: dict[str, Any], why: str, inside: bool, repo_dir: Path
) -> None:
    body = {"cwd": str(repo_dir), "tool_name": tool, "tool_input": tool_input}
    reason = denied(call("claude-code", "PreToolUse", body, inside=inside))
    assert "oms refused reading" in reason and why in reason and "model provider" in reason


@pytest.mark.parametrize("tool_input", [{"pattern": "**/*.py"}, {"pattern": ".*", "path": "src"}])
def test_a_glob_of_ordinary_names_is_silent(tool_input: dict[str, Any], repo_dir: Path) -> None:
    body = {"cwd": str(repo_dir), "tool_name": "Glob", "tool_input": tool_input}
    assert call("claude-code", "PreToolUse", body) == HookAnswer()


def test_a_read_in_the_state_root_is_denied(
    tmp_path: Path, repo_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMS_HOME", str(tmp_path / "state"))
    body = {"cwd": str(repo_dir), "tool_name": "Read",
            "tool_input": {"file_path": str(tmp_path / "state" / "repos")}}  # fmt: skip
    assert "state root" in denied(call("claude-code", "PreToolUse", body, inside=False))


def test_a_read_without_a_path_is_denied() -> None:
    body = {"tool_name": "Read", "tool_input": {"offset": 1}}
    assert "names no file" in denied(call("claude-code", "PreToolUse", body))


def test_patch_writes_reads_paths_added_lines_and_deletions() -> None:
    patch = ("*** Begin Patch\n*** Add File: a.txt\n+one\n+two\n*** Update File: b.py\n"
             "*** Move to: c.py\n@@ def f():\n-    old\n+    new\n*** Delete File: d.txt\n"
             "*** End Patch")  # fmt: skip
    got = {w.path: (w.lines, w.deleted) for w in patch_writes(patch)}
    assert got == {"a.txt": (((3, "one"), (4, "two")), False), "b.py": ((), True),
                   "c.py": (((9, "    new"),), False), "d.txt": ((), True)}  # fmt: skip


# -- fail closed ----------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b"", b'{"stop_hook_active": "x"}'])
def test_unreadable_input_denies_a_tool_call(client: str, body: bytes) -> None:
    assert "refused" in denied(call(client, "PreToolUse", body))


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("event", ["Stop", "SubagentStop", "PostToolUse"])
def test_unreadable_input_blocks_a_stop_or_gives_feedback(client: str, event: str) -> None:
    assert "refused" in blocked(call(client, event, b"{{"))


def test_a_file_tool_input_that_is_not_an_object_is_denied() -> None:
    body = {"tool_name": "Write", "tool_input": "content"}
    assert "not an object" in denied(call("claude-code", "PreToolUse", body))


def test_a_file_tool_without_a_path_is_denied() -> None:
    body = {"tool_name": "Edit", "tool_input": {"new_string": "x"}}
    assert "names no file" in denied(call("claude-code", "PreToolUse", body))


def test_a_body_for_another_event_is_refused() -> None:
    body = {"hook_event_name": "PostToolUse", "tool_name": "Bash", "tool_input": {}}
    assert "installed for PreToolUse" in denied(call("codex", "PreToolUse", body))


@pytest.mark.parametrize("args", [("claude-code", "UserPromptSubmit"), ("cursor", "PreToolUse")])
def test_an_unknown_event_or_client_exits_2_with_the_reason_on_stderr(
    args: tuple[str, str],
) -> None:
    answer = call(*args, {})
    assert answer.exit_code == 2 and answer.stdout == ""
    assert "unknown client or event" in answer.stderr


def test_reasons_are_sanitised_one_line(repo_dir: Path) -> None:
    path = ".github/\x1b[31mx\u202e\n.yml"
    body = {"cwd": str(repo_dir), "tool_name": "Write",
            "tool_input": {"file_path": path, "content": "x"}}  # fmt: skip
    reason = denied(call("claude-code", "PreToolUse", body))
    assert "\x1b" not in reason and "\u202e" not in reason and "\n" not in reason


# -- SessionStart and Stop --------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_session_start_in_a_repository_never_set_up_tells_the_user_and_records_nothing(
    client: str, repo_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMS_HOME", str(tmp_path / "state"))
    answer = call(client, "SessionStart", {"cwd": str(repo_dir)}, inside=False)
    out = json.loads(answer.stdout)
    assert answer.exit_code == 0 and set(out) == {"systemMessage"}  # the user's, not the model's
    assert "not set up" in out["systemMessage"] and "`oms init`" in out["systemMessage"]
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("client", CLIENTS)
def test_session_start_inside_the_sandbox_adds_context(client: str, repo_dir: Path) -> None:
    answer = call(client, "SessionStart", {"cwd": str(repo_dir)}, inside=True)
    spec = json.loads(answer.stdout)["hookSpecificOutput"]
    assert answer.exit_code == 0 and spec["hookEventName"] == "SessionStart"
    assert "oms agent sandbox" in spec["additionalContext"]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("event", ["Stop", "SubagentStop"])
def test_inside_the_sandbox_stop_is_allowed_saying_the_gate_runs_outside(
    client: str, event: str, repo_dir: Path
) -> None:
    answer = call(client, event, {"cwd": str(repo_dir), "session_id": "s"})
    assert answer.exit_code == 0
    assert json.loads(answer.stdout) == {"systemMessage": INSIDE_NOTE}


def test_stop_outside_a_repository_is_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMS_HOME", str(tmp_path / "state"))
    answer = call("claude-code", "Stop", {"cwd": str(tmp_path), "session_id": "s"}, inside=False)
    assert answer == HookAnswer()


def test_a_damaged_stop_count_counts_as_spent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMS_HOME", str(tmp_path / "state"))
    assert read_count("s").blocks == 0
    path = count_path("s")
    path.parent.mkdir(parents=True)
    path.write_text('{"version": 1, "blocks": 1, "extra": true}')
    assert read_count("s").blocks == MAX_BLOCKS
