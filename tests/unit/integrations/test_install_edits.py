"""`oms install`'s file edits without a subprocess: JSON and TOML round trips that keep the
user's entries, comments and formatting, idempotency, exact uninstall, the marked section."""

from __future__ import annotations

import json
import os
import shlex
import tomllib
from pathlib import Path

import pytest

from gatekeeper.errors import UsageError
from gatekeeper.integrations.install import claude, codex, instructions
from gatekeeper.integrations.install.changes import FileEdit, apply
from gatekeeper.integrations.install.entries import (
    gate_budget_s,
    hooks_for,
    is_oms_hook,
    is_oms_server,
    mcp_server,
)
from policy import DEFAULT_POLICY, Policy

PREFIX = ["/opt/oms/bin/oms"]
SERVER = mcp_server(PREFIX)
CC_HOOKS = hooks_for("claude-code", DEFAULT_POLICY)
CX_HOOKS = hooks_for("codex", DEFAULT_POLICY)

USER_SETTINGS = {
    "model": "opus",
    "permissions": {"allow": ["Bash(ls:*)"]},
    "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "~/bin/audit.sh"}]}]},
    "env": {"FOO": "1"},
}  # fmt: skip
USER_TOML = """\
# my own Codex settings: keep these comments
model = "gpt-5"  # the model I like

[mcp_servers.docs]
command = "npx"  # docs server
args = ["-y", "docs-mcp"]

[[hooks.Stop]]
[[hooks.Stop.hooks]]
type = "command"
command = "notify-send done"
"""


def cc_edits(home: Path, install: bool = True) -> list[FileEdit]:
    return claude.edits("user", home, None, PREFIX, SERVER, CC_HOOKS, install)


def cx_edits(home: Path, install: bool = True) -> list[FileEdit]:
    return codex.edits("user", home, None, PREFIX, SERVER, CX_HOOKS, 900, install)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    monkeypatch.delenv("CODEX_HOME", raising=False)
    return tmp_path


def test_claude_settings_round_trip_keeps_other_keys_and_indent_then_restores_bytes(
    home: Path,
) -> None:
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir()
    original = (json.dumps(USER_SETTINGS, indent=4) + "\n").encode()
    settings.write_bytes(original)
    apply(cc_edits(home))
    text = settings.read_text()
    doc = json.loads(text)
    assert list(doc) == ["model", "permissions", "hooks", "env"]  # key order kept
    assert text.startswith('{\n    "model"')  # the file's own 4-space indent
    assert doc["hooks"]["PreToolUse"][0] == USER_SETTINGS["hooks"]["PreToolUse"][0]
    mine = doc["hooks"]["PreToolUse"][1]
    assert mine["matcher"] == "Write|Edit|MultiEdit|NotebookEdit|Bash|Read|Grep|Glob"
    assert shlex.split(mine["hooks"][0]["command"]) == [*PREFIX, "hook", "claude-code",
                                                       "PreToolUse"]  # fmt: skip
    assert set(doc["hooks"]) == {"PreToolUse", "PostToolUse", "Stop", "SubagentStop",
                                 "SessionStart"}  # fmt: skip
    assert doc["hooks"]["Stop"][0]["hooks"][0]["timeout"] >= 600
    apply(cc_edits(home, install=False))
    assert settings.read_bytes() == original


def test_claude_install_twice_changes_nothing_the_second_time(home: Path) -> None:
    apply(cc_edits(home))
    again = cc_edits(home)
    assert [e.status for e in again] == ["unchanged"] * 3


def test_claude_install_replaces_an_older_oms_entry_instead_of_adding_one(home: Path) -> None:
    apply(claude.edits("user", home, None, ["/old/venv/bin/python", "-P", "-m", "gatekeeper"],
                       mcp_server(["/old/oms"]), CC_HOOKS, True))  # fmt: skip
    apply(cc_edits(home))
    doc = json.loads((home / ".claude" / "settings.json").read_text())
    assert all(len(groups) == 1 for groups in doc["hooks"].values())
    assert doc["hooks"]["Stop"][0]["hooks"][0]["command"].startswith("/opt/oms/bin/oms hook")
    servers = json.loads((home / ".claude.json").read_text())["mcpServers"]
    assert servers["oms"]["command"] == "/opt/oms/bin/oms"


def test_claude_uninstall_of_files_oms_created_removes_them(home: Path) -> None:
    apply(cc_edits(home))
    apply(cc_edits(home, install=False))
    assert not (home / ".claude.json").exists()
    assert not (home / ".claude" / "settings.json").exists()
    assert not (home / ".claude" / "CLAUDE.md").exists()


def test_claude_json_keeps_other_servers_and_state(home: Path) -> None:
    state = {"numStartups": 3, "mcpServers": {"docs": {"command": "npx", "args": []}},
             "projects": {"/x": {}}}  # fmt: skip
    original = json.dumps(state, indent=2).encode()  # no final newline: kept so
    (home / ".claude.json").write_bytes(original)
    apply(cc_edits(home))
    doc = json.loads((home / ".claude.json").read_text())
    assert doc["mcpServers"]["docs"] == state["mcpServers"]["docs"]
    assert doc["mcpServers"]["oms"] == {"type": "stdio", "command": "/opt/oms/bin/oms",
                                        "args": ["mcp"], "env": {}}  # fmt: skip
    apply(cc_edits(home, install=False))
    assert (home / ".claude.json").read_bytes() == original


def test_a_users_own_server_named_oms_is_refused_not_overwritten(home: Path) -> None:
    theirs = {"mcpServers": {"oms": {"command": "/usr/bin/other-tool", "args": ["serve"]}}}
    (home / ".claude.json").write_text(json.dumps(theirs))
    with pytest.raises(UsageError, match="does not start oms"):
        cc_edits(home)


def test_invalid_json_is_refused_with_the_line(home: Path) -> None:
    (home / ".claude.json").write_text('{\n  "a": 1,\n}\n')
    with pytest.raises(UsageError, match=r"not valid JSON \(line 3\)"):
        cc_edits(home)


def test_codex_toml_round_trip_keeps_comments_and_tables_then_restores_bytes(
    home: Path,
) -> None:
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(USER_TOML)
    apply(cx_edits(home))
    text = config.read_text()
    assert text.startswith(USER_TOML.split("[[hooks.Stop]]")[0])  # comments, tables kept
    assert 'command = "notify-send done"' in text
    doc = tomllib.loads(text)
    oms = doc["mcp_servers"]["oms"]
    assert oms["command"] == "/opt/oms/bin/oms" and oms["args"] == ["mcp"]
    assert oms["tool_timeout_sec"] == 900 and oms["startup_timeout_sec"] >= 10
    assert doc["mcp_servers"]["docs"]["args"] == ["-y", "docs-mcp"]
    assert [g["hooks"][0]["command"] for g in doc["hooks"]["Stop"]] == [
        "notify-send done", "/opt/oms/bin/oms hook codex Stop"]  # fmt: skip
    assert doc["hooks"]["PreToolUse"][0]["matcher"] == "^(Bash|apply_patch)$"
    assert [e.status for e in cx_edits(home)] == ["unchanged", "unchanged"]
    apply(cx_edits(home, install=False))
    assert config.read_text() == USER_TOML


def test_codex_home_is_honoured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "ch"))
    paths = [e.path for e in cx_edits(tmp_path / "home")]
    assert paths == [tmp_path / "ch" / "config.toml", tmp_path / "ch" / "AGENTS.md"]


def test_mcp_server_passes_oms_home_only_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMS_HOME", raising=False)
    assert mcp_server(PREFIX).env == ()
    monkeypatch.setenv("OMS_HOME", "/srv/oms-state")
    assert mcp_server(PREFIX).env == (("OMS_HOME", "/srv/oms-state"),)


def test_gate_budget_covers_every_check_and_both_scanners_and_is_at_least_600() -> None:
    assert gate_budget_s(DEFAULT_POLICY) == 600
    checks = [{"name": f"c{i}", "cmd": ["true"], "timeout_s": 1000} for i in range(3)]
    policy = Policy.model_validate({"version": 1, "checks": checks,
                                    "scanners": {"timeout_s": 300}})  # fmt: skip
    assert gate_budget_s(policy) >= 3000 + 600
    stop = next(h for h in hooks_for("claude-code", policy) if h.event == "Stop")
    assert stop.timeout_s == gate_budget_s(policy)


@pytest.mark.parametrize(
    ("command", "mine"),
    [
        ("/opt/oms/bin/oms hook claude-code Stop", True),
        ("'/home/a b/.local/bin/oms' hook claude-code PreToolUse", True),
        ("/venv/bin/python -P -m gatekeeper hook claude-code Stop", True),
        ("/opt/oms/bin/oms hook codex Stop", False),  # the other client's
        ("~/bin/audit.sh", False),
        ("echo oms hook claude-code Stop", False),
        ("/usr/bin/not-oms hook claude-code Stop", False),
        ("'unterminated", False),
    ],
)
def test_is_oms_hook(command: str, mine: bool) -> None:
    assert is_oms_hook(command, "claude-code") is mine


def test_is_oms_server() -> None:
    assert is_oms_server({"command": "/x/oms", "args": ["mcp"]})
    assert is_oms_server({"command": "/py", "args": ["-P", "-m", "gatekeeper", "mcp"]})
    assert not is_oms_server({"command": "npx", "args": ["oms", "mcp"]})
    assert not is_oms_server({"url": "https://example.invalid/mcp"})


def test_section_is_replaced_in_place_and_removed_exactly() -> None:
    text = "# Project\n\nRules of mine.\n"
    once = instructions.with_section(text, "codex")
    assert once.startswith(text + "\n" + instructions.BEGIN)
    assert instructions.with_section(once, "codex") == once
    edited = once.replace("oms_process_result", "something-else") + "\nMore of mine.\n"
    again = instructions.with_section(edited, "codex")
    assert again.count(instructions.BEGIN) == 1 and "oms_process_result" in again
    assert again.endswith("\nMore of mine.\n")
    assert instructions.without_section(once) == text


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (".claude.json", "[1, 2]\n", "does not hold a JSON object"),
        (".claude.json", '{"mcpServers": []}\n', "`mcpServers` .* is not an object"),
        (".claude/settings.json", '{"hooks": "no"}\n', "`hooks` in settings.json is not an object"),
        (".claude/CLAUDE.md", b"\xff\xfe not text", "is not UTF-8 text"),
    ],
)
def test_claude_files_oms_cannot_edit_faithfully_are_refused(
    home: Path, name: str, content: str | bytes, message: str
) -> None:
    path = home / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(UsageError, match=message):
        cc_edits(home)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("model = \n", "is not valid TOML"),
        ('[mcp_servers.oms]\ncommand = "/usr/bin/other"\n', "does not start oms"),
        ("mcp_servers = 3\n", "`mcp_servers` in config.toml is not a table"),
        ('[hooks]\nStop = "x"\n', "`hooks.Stop` in config.toml is not an array of tables"),
    ],
)
def test_codex_configs_oms_cannot_edit_faithfully_are_refused(
    home: Path, content: str, message: str
) -> None:
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(content)
    with pytest.raises(UsageError, match=message):
        cx_edits(home)
    assert config.read_text() == content


def test_a_fifo_at_a_config_path_is_refused_without_blocking(home: Path) -> None:
    (home / ".claude").mkdir()
    os.mkfifo(home / ".claude" / "settings.json")
    with pytest.raises(UsageError, match="not a regular file"):
        cc_edits(home)


def test_a_file_changed_after_planning_is_not_overwritten(home: Path) -> None:
    planned = cc_edits(home)
    (home / ".claude.json").write_text('{"numStartups": 9}\n')  # the client wrote meanwhile
    with pytest.raises(UsageError, match="changed while oms was editing it"):
        apply(planned)
    assert (home / ".claude.json").read_text() == '{"numStartups": 9}\n'
