"""The conductor's launch (gatekeeper/work/conductor/launch.py): the generated Claude Code
argv and config. The MCP config is the one `oms agent run` writes for a conductor session
(kinds.py with run.py's server choice), made here against npm package layouts in the
test's directory (tests/support/npm.py), so the strict config is checked as written."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from support.npm import fake_npm

from gatekeeper.agent import codex_sessions
from gatekeeper.agent.kinds import prepare_kind
from gatekeeper.agent.run import AgentRunRequest, _mcp_args, inside_oms_argv
from gatekeeper.errors import Blocked, UsageError
from gatekeeper.work.conductor.launch import (
    CONDUCTOR_TOOLS,
    WORKER_PROMPT,
    check_launch,
    codex_store,
    conductor_argv,
    conductor_request,
    conductor_settings,
    executor_request,
)
from gatekeeper.work.conductor.tmux import Tmux, pane_env, socket_dir
from gatekeeper.work.model import Dispatch
from gatekeeper.work.providers.base import Role, RoleUnavailable
from gatekeeper.work.providers.codex_cli import exec_argv

CID = "c-0123456789ab"


def role(provider: str = "claude-code", billing: str = "subscription", **kw: object) -> Role:
    base: dict[str, object] = dict(
        name="conductor", provider=provider, engine=provider, model="claude-opus-4-1",
        auth="subscription", billing=billing, unattended=False, transport="interactive",
        authority="read-only", external=True,
    )  # fmt: skip
    base.update(kw)
    return Role(**base)  # type: ignore[arg-type]


def _flag(argv: tuple[str, ...], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_claude_conductor_argv_is_interactive_read_only_and_tool_bound() -> None:
    argv = conductor_argv(role(), CID)
    assert argv[0] == "claude" and _flag(argv, "--model") == "claude-opus-4-1"
    assert not {"-p", "--print", "--output-format", "--input-format"} & set(argv)
    assert _flag(argv, "--permission-mode") == "dontAsk"
    allowed = _flag(argv, "--allowedTools").split(",")
    assert [t for t in allowed if t.startswith("mcp__")] == [
        f"mcp__oms__{t}" for t in CONDUCTOR_TOOLS
    ]
    assert len(CONDUCTOR_TOOLS) == 7
    assert set(allowed) - {f"mcp__oms__{t}" for t in CONDUCTOR_TOOLS} == {
        "Read",
        "Grep",
        "Glob",
        "Bash(git status)",
        "Bash(git log:*)",
        "Bash(git diff:*)",
    }
    disallowed = _flag(argv, "--disallowedTools").split(",")
    assert {"Edit", "Write", "NotebookEdit", "Bash(tmux:*)"} <= set(disallowed)
    settings = json.loads(_flag(argv, "--settings"))
    assert settings == conductor_settings(CID)
    for event in ("SessionStart", "Stop"):
        (hook,) = settings["hooks"][event][0]["hooks"]
        assert hook["async"] is True and hook["asyncRewake"] is True
        assert hook["command"].endswith(f"conductor wait-event --session {CID}")
    # The task or any freeform text is no flag: the last word is the fixed opening prompt.
    assert not argv[-1].startswith("-")


def test_the_strict_mcp_config_names_only_the_bridge(tmp_path: Path) -> None:
    bin_dir = fake_npm(tmp_path / "npm")
    req = AgentRunRequest(repo_dir=tmp_path, cmd=conductor_argv(role(), CID),
                          agent="claude-code", conductor=CID)  # fmt: skip
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    bridge = inside_oms_argv(*_mcp_args(req))
    kind = prepare_kind("claude-code", req.cmd, run_dir=run_dir, egress="api",
                        relay_url="http://127.0.0.1:1", oms_mcp_argv=bridge,
                        search_path=str(bin_dir))  # fmt: skip
    assert "--strict-mcp-config" in kind.argv
    assert _flag(kind.argv, "--mcp-config").endswith("/oms-mcp.json")
    assert not {"-p", "--print"} & set(kind.argv)
    config = json.loads((run_dir / "home" / ".claude" / "oms-mcp.json").read_text())
    assert list(config["mcpServers"]) == ["oms"]
    assert config["mcpServers"]["oms"]["args"][-4:] == ["conductor", "bridge", "--session", CID]
    # A run that is no conductor keeps `oms mcp`.
    assert _mcp_args(AgentRunRequest(repo_dir=tmp_path, cmd=("x",))) == ("mcp",)


def test_print_mode_the_sdk_and_credit_billing_are_refused() -> None:
    for word in ("-p", "--print", "--output-format=stream-json", "--input-format", "--sdk-url"):
        with pytest.raises(Blocked):
            check_launch(role(), ("claude", word))
    with pytest.raises(Blocked, match="credit-billed"):
        conductor_argv(role(billing="usage", auth="api-key"), CID)
    with pytest.raises(Blocked, match="interactive"):
        conductor_argv(role(transport="exec", auth="api-key", billing="subscription"), CID)
    with pytest.raises(RoleUnavailable):
        conductor_argv(role(provider="codex-cli"), CID)
    with pytest.raises(UsageError):
        conductor_settings("c-; rm -rf /")


def test_a_command_conductor_runs_read_only_as_this_conductor(tmp_path: Path) -> None:
    r = role(provider="command:cond", cmd=("/usr/bin/python3", "cond.py"), billing="none",
             auth="none")  # fmt: skip
    req = conductor_request(r, tmp_path, CID, "a" * 40)
    assert req.cmd == ("/usr/bin/python3", "cond.py") and req.read_only
    assert req.conductor == CID and req.agent == "command" and req.egress == "none"


def test_bare_oms_at_a_terminal_is_conductor_start_when_its_role_exists(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bare `oms` with stdin and stdout a terminal runs `oms conductor start` when the base's
    policy defines the conductor's role, else the overview (tests/e2e/test_overview.py);
    anywhere else it prints the help (tests/unit/cli/test_bare_groups.py holds that)."""
    from gatekeeper.cli import main as main_mod
    from gatekeeper.cli import overview

    seen: list[list[str]] = []

    def fake(args: list[str], prog_name: str, standalone_mode: bool) -> None:
        seen.append(["overview", *args] if prog_name == "overview" else args)

    monkeypatch.setattr(main_mod.cli, "main", fake)
    monkeypatch.setattr(overview.overview, "main", lambda args, **_: fake(args, "overview", False))
    monkeypatch.setattr(main_mod, "inside_agent_sandbox", lambda: False)
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    for configured in (True, False):
        monkeypatch.setattr(overview, "conductor_configured", lambda _: configured)
        with pytest.raises(SystemExit):
            main_mod.main([])
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    with pytest.raises(SystemExit):
        main_mod.main([])
    assert seen == [["conductor", "start"], ["overview"], []]


def test_a_claude_conductor_goes_through_the_tunnel_with_a_subscription(tmp_path: Path) -> None:
    req = conductor_request(role(), tmp_path, CID, "a" * 40)
    assert req.egress == "tunnel" and req.read_only and req.agent == "claude-code"
    keyed = conductor_request(role(auth="api-key"), tmp_path, CID, "a" * 40)
    assert keyed.egress == "api"


def test_the_socket_directory_must_be_private_and_a_pane_command_never_one_word(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = tmp_path / "rt"
    runtime.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    made = socket_dir()
    assert made == runtime / "oms" and stat.S_IMODE(made.stat().st_mode) == 0o700
    made.chmod(0o755)
    with pytest.raises(Blocked, match="not private"):
        socket_dir()
    made.rmdir()
    (runtime / "elsewhere").mkdir(mode=0o700)
    (runtime / "oms").symlink_to(runtime / "elsewhere")
    with pytest.raises(Blocked, match="not a plain directory"):
        socket_dir()
    (runtime / "oms").unlink()
    tm = Tmux(socket_dir() / "x.sock")
    with pytest.raises(UsageError, match="two or more"):
        tm.new_window("oms-x", "w", ["sh -c 'touch PWNED'"])
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("OMS_HOME", "/state")
    assert "ANTHROPIC_API_KEY" not in pane_env() and pane_env()["OMS_HOME"] == "/state"
    # git's config-by-environment: a value may be a credential; none of the three passes.
    monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "http.extraHeader")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "Authorization: Bearer ghp_x")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    passed = pane_env()
    assert not {"GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "GIT_CONFIG_VALUE_0"} & set(passed)
    assert passed["GIT_CONFIG_GLOBAL"] == os.devnull
    argv = tm.argv("kill-server")
    assert argv[1:5] == ["-S", str(runtime / "oms" / "x.sock"), "-f", os.devnull]


# -- the Codex worker ---------------------------------------------------------------------

TICKET = "t-0123456789ab"
SESSION = "01a23caa-6929-7f50-baac-57d31c93ea47"


def _dispatch(ticket: str = TICKET) -> Dispatch:
    fields = {"ticket": ticket, "run_id": "20261201T150000Z-0a1b2c3d",
              "envelope": SimpleNamespace(base="a" * 40)}  # fmt: skip
    return cast(Dispatch, SimpleNamespace(**fields))


def _worker(git_repo: Path, r: Role, ticket: str = TICKET) -> AgentRunRequest:
    return executor_request(r, git_repo, _dispatch(ticket), b"{}", "w-0123456789ab", 60)


def test_an_api_key_codex_worker_runs_codex_exec_with_no_input_and_its_tickets_store(
    git_repo: Path,
) -> None:
    r = role(provider="codex-cli", auth="api-key", billing="usage", model="gpt-5.5")
    req = _worker(git_repo, r)
    assert req.cmd == ("codex", "exec", "--skip-git-repo-check", "--model=gpt-5.5",
                       WORKER_PROMPT)  # fmt: skip
    assert req.no_input and req.egress == "api" and req.agent == "codex"
    assert req.task_file == b"{}" and b"{}" not in "".join(req.cmd).encode()
    assert req.codex_sessions == codex_store(git_repo, TICKET)
    assert req.codex_sessions.parts[-2:] == ("codex", TICKET)
    assert stat.S_IMODE(req.codex_sessions.stat().st_mode) == 0o700
    assert git_repo not in req.codex_sessions.parents
    assert _worker(git_repo, replace(r, auth="none")).egress == "none"


def test_a_later_attempt_resumes_its_own_tickets_session_never_another(git_repo: Path) -> None:
    r = role(provider="codex-cli", auth="api-key", billing="usage", model="gpt-5.5")
    home = git_repo.parent / "run-home"
    sessions = home / ".codex" / "sessions" / "2026" / "12" / "03"
    sessions.mkdir(parents=True)
    (sessions / f"rollout-2026-12-03T16-08-50-{SESSION}.jsonl").write_text("{}\n")
    assert codex_sessions.save(codex_store(git_repo, TICKET), home) == SESSION
    again = _worker(git_repo, r)
    assert again.cmd == ("codex", "exec", "resume", "--skip-git-repo-check", "--model=gpt-5.5",
                         SESSION, WORKER_PROMPT)  # fmt: skip
    other = _worker(git_repo, r, "t-ba9876543210")
    assert "resume" not in other.cmd and SESSION not in other.cmd
    with pytest.raises(UsageError, match="not a ticket id"):
        _worker(git_repo, r, "../t-0123456789ab")


def test_a_stored_session_id_never_becomes_a_flag() -> None:
    r = role(provider="codex-cli", auth="api-key", billing="usage")
    for bad in ("--last", "-c", "model=x", SESSION.upper()):
        with pytest.raises(RoleUnavailable, match="not a Codex session id"):
            exec_argv(r, resume=bad)


def test_a_subscription_codex_worker_keeps_the_attended_tui(git_repo: Path) -> None:
    req = _worker(git_repo, role(provider="codex-cli", model="gpt-5.5"))
    assert req.cmd == ("codex", "--model", "gpt-5.5", WORKER_PROMPT)
    assert req.egress == "tunnel" and not req.no_input and req.codex_sessions is None


def test_an_unattended_claude_worker_accepts_edits_and_keeps_its_pane(tmp_path: Path) -> None:
    """The worker's launch (issue 31): interactive (no print mode), `acceptEdits` with the
    tools oms' PreToolUse hook covers, the prompt last; an attended one is as before."""
    from types import SimpleNamespace

    from gatekeeper.agent.worker_route import EndRule
    from gatekeeper.work.conductor.launch import WORKER_PROMPT, executor_request

    d = SimpleNamespace(run_id="20261201T150000Z-0a1b2c3d", envelope=SimpleNamespace(base="a" * 40))
    worker = role(auth="api-key", billing="none", unattended=True, name="impl")
    rule = EndRule(lambda: True)
    req = executor_request(worker, tmp_path, d, b"{}", "w-0123456789ab", 60, rule)  # type: ignore[arg-type]
    assert req.end_rule is rule and req.role == "impl" and req.worker == "w-0123456789ab"
    assert req.cmd[-1] == WORKER_PROMPT and _flag(req.cmd, "--permission-mode") == "acceptEdits"
    assert _flag(req.cmd, "--tools") == "Bash,Read,Edit,Write,Grep,Glob"
    assert not {"-p", "--print", "bypassPermissions"} & set(req.cmd)
    attended = executor_request(role(), tmp_path, d, b"{}", "w-0123456789ab", 60)  # type: ignore[arg-type]
    assert attended.cmd == ("claude", "--model", "claude-opus-4-1", WORKER_PROMPT)
    assert attended.end_rule is None
