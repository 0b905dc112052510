"""`oms install claude-code|codex` through the real CLI, against real config files in a
private HOME: what it writes, that a second run changes nothing, `--dry-run`, an exact
`--uninstall`, a symlinked config refused, and that what it wrote actually runs: the MCP
entry started as a real MCP client would start it, and (when `make agents` installed them)
the real `claude mcp list` / `codex mcp list` seeing it, each in its own empty network.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from support.env import clean_env
from support.oms import parse_single_json, run_oms
from support.repos import make_repo

from gatekeeper.integrations import oms_command

ROOT = Path(__file__).resolve().parents[2]
AGENTS_BIN = ROOT / ".cache" / "agents" / "node_modules" / ".bin"
BWRAP = shutil.which("bwrap") or "/usr/bin/bwrap"
POLICY = ('version = 1\n\n[[checks]]\nname = "slow"\ncmd = ["/bin/true"]\ntimeout_s = 1500\n'
          '\n[[checks]]\nname = "slower"\ncmd = ["/bin/true"]\ntimeout_s = 2000\n')  # fmt: skip
READ_AND_WRITE = "Write|Edit|MultiEdit|NotebookEdit|Bash|Read|Grep|Glob"
EVENTS = {"PreToolUse", "PostToolUse", "Stop", "SubagentStop", "SessionStart"}
USER_TOML = '# mine: keep me\nmodel = "gpt-5"\n\n[mcp_servers.docs]\ncommand = "npx"  # docs\n'


class Box:
    """A private HOME and state root, a repository, and the real CLI run in it."""

    def __init__(self, root: Path) -> None:
        self.home = root / "home"
        self.home.mkdir()
        self.env = clean_env(self.home, root / "oms-state")
        self.env.pop("CODEX_HOME", None)
        self.env.pop("CLAUDE_CONFIG_DIR", None)
        self.repo = make_repo(root / "repo", {"oms.toml": POLICY}, env=self.env)

    def oms(self, *args: str) -> tuple[int, dict[str, Any]]:
        proc = run_oms([*args, "--json"], env=self.env, cwd=self.repo)
        return proc.returncode, parse_single_json(proc)

    def text(self, *args: str) -> subprocess.CompletedProcess[str]:
        return run_oms(list(args), env=self.env, cwd=self.repo)


@pytest.fixture
def box(tmp_path: Path) -> Box:
    return Box(tmp_path)


def _statuses(out: dict[str, Any]) -> dict[str, str]:
    return {Path(f["path"]).name: f["status"] for f in out["files"]}


def test_user_install_writes_absolute_oms_entries_then_changes_nothing(box: Box) -> None:
    code, out = box.oms("install", "claude-code")
    assert code == 0 and out["changed"] is True, out
    assert _statuses(out) == {".claude.json": "created", "settings.json": "created",
                              "CLAUDE.md": "created"}  # fmt: skip
    server = json.loads((box.home / ".claude.json").read_text())["mcpServers"]["oms"]
    assert [server["command"], *server["args"]] == [*oms_command(), "mcp"]
    assert Path(server["command"]).is_absolute()
    assert server["env"] == {"OMS_HOME": box.env["OMS_HOME"]}
    settings = json.loads((box.home / ".claude" / "settings.json").read_text())
    assert set(settings["hooks"]) == EVENTS
    for event, groups in settings["hooks"].items():
        (handler,) = groups[0]["hooks"]
        argv = shlex.split(handler["command"])
        assert argv == [*oms_command(), "hook", "claude-code", event]
        assert handler["timeout"] >= 30
    assert settings["hooks"]["Stop"][0]["hooks"][0]["timeout"] >= 1500 + 2000
    # Reads are watched too: an honest agent's Read of .env never reaches its provider.
    assert settings["hooks"]["PreToolUse"][0]["matcher"] == READ_AND_WRITE
    assert "oms_process_result" in (box.home / ".claude" / "CLAUDE.md").read_text()

    code, again = box.oms("install", "claude-code")
    assert code == 0 and again["changed"] is False
    assert set(_statuses(again).values()) == {"unchanged"}
    human = box.text("install", "claude-code")
    assert human.returncode == 0 and "already installed; no file changed" in human.stdout


def test_dry_run_shows_the_changes_and_writes_nothing(box: Box) -> None:
    code, out = box.oms("install", "codex", "--dry-run")
    assert code == 0 and out["dry_run"] is True and out["changed"] is True
    assert _statuses(out) == {"config.toml": "created", "AGENTS.md": "created"}
    assert not (box.home / ".codex").exists()
    human = box.text("install", "claude-code", "--dry-run")
    assert "dry run, nothing written" in human.stdout and "would create" in human.stdout
    assert f"PreToolUse ({READ_AND_WRITE})" in human.stdout and "SessionStart" in human.stdout
    assert list(box.home.iterdir()) == []


def test_install_over_an_older_oms_entry_widens_its_matcher_and_uninstall_removes_it(
    box: Box,
) -> None:
    settings = box.home / ".claude" / "settings.json"
    settings.parent.mkdir()
    old = shlex.join([*oms_command(), "hook", "claude-code", "PreToolUse"])
    mine = {"matcher": "Bash", "hooks": [{"type": "command", "command": "echo mine"}]}
    oms_old = {"matcher": "Write|Edit|MultiEdit|NotebookEdit|Bash",
               "hooks": [{"type": "command", "command": old, "timeout": 120}]}  # fmt: skip
    settings.write_text(json.dumps({"hooks": {"PreToolUse": [mine, oms_old]}}))
    assert box.oms("install", "claude-code")[0] == 0
    pre = json.loads(settings.read_text())["hooks"]["PreToolUse"]
    assert pre[0] == mine and [g["matcher"] for g in pre[1:]] == [READ_AND_WRITE]
    assert box.oms("install", "claude-code", "--uninstall")[0] == 0
    assert json.loads(settings.read_text())["hooks"] == {"PreToolUse": [mine]}


def test_uninstall_restores_the_original_bytes(box: Box) -> None:
    codex_dir = box.home / ".codex"
    codex_dir.mkdir()
    (codex_dir / "config.toml").write_text(USER_TOML)
    (codex_dir / "AGENTS.md").write_text("# My rules\n\nBe brief.\n")
    docs = {"type": "stdio", "command": "npx", "args": ["-y", "docs"], "env": {}}
    claude_json = json.dumps({"numStartups": 2, "mcpServers": {"docs": docs}}, indent=2) + "\n"
    (box.home / ".claude.json").write_text(claude_json)
    for client in ("codex", "claude-code"):
        assert box.oms("install", client)[0] == 0
    config = (codex_dir / "config.toml").read_text()
    assert config.startswith(USER_TOML), config  # comments and the user's table kept
    parsed = tomllib.loads(config)
    assert parsed["mcp_servers"]["oms"]["tool_timeout_sec"] >= 1500 + 2000
    assert parsed["mcp_servers"]["oms"]["env"] == {"OMS_HOME": box.env["OMS_HOME"]}
    assert {groups[-1]["hooks"][0]["command"].split()[-1]
            for groups in parsed["hooks"].values()} == EVENTS  # fmt: skip

    for client in ("codex", "claude-code"):
        code, out = box.oms("install", client, "--uninstall")
        assert code == 0 and out["changed"] is True, out
    assert (codex_dir / "config.toml").read_text() == USER_TOML
    assert (codex_dir / "AGENTS.md").read_text() == "# My rules\n\nBe brief.\n"
    assert (box.home / ".claude.json").read_text() == claude_json
    assert not (box.home / ".claude").exists() or not any((box.home / ".claude").iterdir())
    code, out = box.oms("install", "codex", "--uninstall")
    assert code == 0 and out["changed"] is False


def test_project_scope_has_no_repository_path_and_says_to_commit(box: Box) -> None:
    code, out = box.oms("install", "claude-code", "--scope", "project", "--repo", str(box.repo))
    assert code == 0, out
    assert _statuses(out) == {".mcp.json": "created", "settings.json": "created",
                              "CLAUDE.md": "created"}  # fmt: skip
    assert any("commit these files yourself" in n for n in out["notes"])
    code, cx = box.oms("install", "codex", "--scope", "project")
    assert code == 0 and any("trusted" in n for n in cx["notes"])
    for name in (".mcp.json", ".claude/settings.json", ".codex/config.toml"):
        text = (box.repo / name).read_text()
        assert str(box.repo) not in text, name
    server = json.loads((box.repo / ".mcp.json").read_text())["mcpServers"]["oms"]
    assert server["args"] == ["mcp"]
    assert not (box.home / ".claude.json").exists()


def test_project_scope_outside_a_repository_is_refused(box: Box, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    code, out = box.oms("install", "codex", "--scope", "project", "--repo", str(plain))
    assert code == 2 and out["error"]["kind"] == "usage"
    assert not (plain / ".codex").exists()


@pytest.mark.parametrize("link", [".claude/settings.json", ".claude", ".mcp.json"])
def test_a_symlinked_config_path_is_refused_and_its_target_untouched(
    box: Box, tmp_path: Path, link: str
) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "settings.json").write_text("{}\n")
    (box.repo / ".claude").mkdir(exist_ok=True) if link != ".claude" else None
    os.symlink(target / "settings.json" if link != ".claude" else target, box.repo / link)
    proc = box.text("install", "claude-code", "--scope", "project")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "symlink" in proc.stderr, proc.stderr
    assert (target / "settings.json").read_text() == "{}\n"
    assert not (box.repo / "CLAUDE.md").exists()  # nothing written before the refusal


def test_a_config_path_linked_to_a_device_is_refused_and_the_device_kept(box: Box) -> None:
    (box.home / ".claude").mkdir()
    os.symlink("/dev/null", box.home / ".claude" / "settings.json")
    proc = box.text("install", "claude-code")
    assert proc.returncode == 2 and "symlink" in proc.stderr
    assert Path("/dev/null").is_char_device()


def test_installed_hook_commands_start_this_oms(box: Box) -> None:
    """The hooks helper builds `oms hook`; here: the argv each hook runs is this oms."""
    assert box.oms("install", "codex")[0] == 0
    hooks = tomllib.loads((box.home / ".codex" / "config.toml").read_text())["hooks"]
    for event, groups in hooks.items():
        argv = shlex.split(groups[0]["hooks"][0]["command"])
        assert argv[: len(oms_command())] == oms_command()
        assert argv[len(oms_command()) :] == ["hook", "codex", event]
        probe = subprocess.run([*argv[: len(oms_command())], "--version"], env=box.env,
                               capture_output=True, text=True, check=False)  # fmt: skip
        assert probe.returncode == 0, probe.stderr


async def _tools(command: str, args: list[str], env: dict[str, str], cwd: Path) -> set[str]:
    params = StdioServerParameters(command=command, args=args, env=env, cwd=str(cwd))
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return {tool.name for tool in (await session.list_tools()).tools}


def test_the_written_mcp_entry_serves_the_repository_it_is_started_in(box: Box) -> None:
    assert box.oms("install", "claude-code", "--scope", "project")[0] == 0
    entry = json.loads((box.repo / ".mcp.json").read_text())["mcpServers"]["oms"]
    env = {**box.env, **entry["env"]}
    sub = box.repo / "src"
    sub.mkdir()
    tools = asyncio.run(_tools(entry["command"], entry["args"], env, sub))
    assert {"oms_process_result", "oms_transfer_preview", "oms_doctor"} <= tools


def _isolated(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A real agent CLI in its own empty network namespace: it can reach nothing."""
    quiet = {"DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
             "DISABLE_TELEMETRY": "1"}  # fmt: skip
    return subprocess.run([BWRAP, "--dev-bind", "/", "/", "--unshare-net", "--", *argv],
                          env={**env, **quiet}, cwd=cwd, capture_output=True, text=True,
                          timeout=180, check=False)  # fmt: skip


def _needs(cli: str) -> Path:
    path = AGENTS_BIN / cli
    if not os.access(path, os.X_OK):
        pytest.skip(f"{cli} is not installed under .cache/agents: run `make agents` (needs npm)")
    if not os.access(BWRAP, os.X_OK):
        pytest.skip("bwrap is needed to give the CLI an empty network")
    return path


def test_real_claude_mcp_list_connects_to_the_installed_server(box: Box) -> None:
    claude = _needs("claude")
    assert box.oms("install", "claude-code")[0] == 0
    proc = _isolated([str(claude), "mcp", "list"], box.env, box.repo)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("oms:"))
    assert oms_command()[0] in line and "Connected" in line, proc.stdout


def test_real_codex_mcp_list_reads_the_installed_config(box: Box) -> None:
    codex = _needs("codex")
    (box.home / ".codex").mkdir()
    (box.home / ".codex" / "config.toml").write_text(USER_TOML + 'args = ["-y", "docs"]\n')
    assert box.oms("install", "codex")[0] == 0
    proc = _isolated([str(codex), "mcp", "list", "--json"], box.env, box.repo)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    servers = {s["name"]: s for s in json.loads(proc.stdout)}
    assert set(servers) == {"docs", "oms"}
    assert oms_command()[0] in json.dumps(servers["oms"])


def test_mcp_config_claude_snippet_works_as_printed(box: Box) -> None:
    claude = _needs("claude")
    code, out = box.oms("mcp", "config", "--client", "claude-code")
    assert code == 0
    snippet = out["snippets"]["claude-code"]
    assert str(box.repo) not in json.dumps(snippet)
    argv = shlex.split(snippet["installed"])
    assert argv[0] == "claude" and oms_command()[0] in argv
    env = {k: v for k, v in box.env.items() if k != "OMS_HOME"}  # the snippet carries it
    added = _isolated([str(claude), *argv[1:]], env, box.repo)
    assert added.returncode == 0, (added.stdout, added.stderr)
    listed = _isolated([str(claude), "mcp", "list"], env, box.repo)
    assert "Connected" in next(x for x in listed.stdout.splitlines() if x.startswith("oms:"))


def test_mcp_config_codex_snippet_sets_the_gate_budget(box: Box) -> None:
    code, out = box.oms("mcp", "config", "--client", "codex")
    assert code == 0
    table = tomllib.loads(out["snippets"]["codex"]["installed"])["mcp_servers"]["oms"]
    assert [table["command"], *table["args"]] == [*oms_command(), "mcp"]
    assert table["tool_timeout_sec"] >= 1500 + 2000
    assert table["env"] == {"OMS_HOME": box.env["OMS_HOME"]}
    assert sys.executable in out["snippets"]["codex"]["source_checkout"]


def test_the_mcp_entry_started_outside_a_repository_refuses_in_one_line(
    box: Box, tmp_path: Path
) -> None:
    assert box.oms("install", "codex")[0] == 0
    table = tomllib.loads((box.home / ".codex" / "config.toml").read_text())["mcp_servers"]
    entry = table["oms"]
    elsewhere = tmp_path / "not-a-repo"
    elsewhere.mkdir()
    proc = subprocess.run([entry["command"], *entry["args"]], cwd=elsewhere, env=box.env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == "", (proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "not inside a git repository" in proc.stderr
