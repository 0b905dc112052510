"""Agent kinds (gatekeeper/agent/kinds.py): what claude-code, codex and command get inside.

The CLIs here are npm package layouts made in tmp_path (a package.json and the files its
`bin` names), so these tests need neither npm nor the real CLIs; the real ones run in
tests/e2e/test_agent_clis.py.
"""

from __future__ import annotations

import json
import os
import platform
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from support.npm import exe as _exe
from support.npm import fake_npm
from support.npm import package as _package

from gatekeeper.agent.inside import HOME, WORKSPACE
from gatekeeper.agent.kinds import (
    CLAUDE_QUIET,
    CODEX_OWN_FLAGS,
    CODEX_TRIPLES,
    KindSetup,
    codex_config,
    prepare_kind,
    require_keys,
)
from gatekeeper.errors import InternalError, Unavailable, UsageError
from gatekeeper.integrations.hooks.config import claude_hooks, codex_hooks

RELAY = "http://127.0.0.1:47100"
MCP = ("/opt/oms/venv/bin/python", "-m", "gatekeeper", "mcp")
TRIPLE = CODEX_TRIPLES.get(platform.machine(), "x86_64-unknown-linux-musl")
PLACEHOLDER = re.compile(r"^oms-placeholder-[a-z-]+$")


@pytest.fixture
def npm(tmp_path: Path) -> Path:
    """A prefix like `.cache/agents`: both CLIs under node_modules, links in `bin/`."""
    return fake_npm(tmp_path / "prefix")


def prep(kind: Any, cmd: list[str], tmp_path: Path, npm: Path, **over: Any) -> KindSetup:
    run_dir = tmp_path / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    args: dict[str, Any] = {"run_dir": run_dir, "egress": "api", "relay_url": RELAY,
                            "oms_mcp_argv": MCP, "search_path": f"{npm}:/usr/bin:/bin"}  # fmt: skip
    return prepare_kind(kind, cmd, **{**args, **over})


def home(tmp_path: Path) -> Path:
    return tmp_path / "run" / "home"


# -- claude-code --------------------------------------------------------------------------


def test_claude_code_flags_come_right_after_the_cli_and_close_the_mcp_config_list(
    tmp_path: Path, npm: Path
) -> None:
    s = prep("claude-code", ["claude", "-p", "hi", "--allowedTools", "Bash"], tmp_path, npm)
    exe = (npm / "claude").resolve()
    assert s.argv == (str(exe), "--strict-mcp-config", "--mcp-config",
                      f"{HOME}/.claude/oms-mcp.json", "--setting-sources", "user",
                      "-p", "hi", "--allowedTools", "Bash")  # fmt: skip


def test_claude_code_env_is_the_relay_a_placeholder_key_and_the_quiet_switches(
    tmp_path: Path, npm: Path
) -> None:
    s = prep("claude-code", ["claude"], tmp_path, npm)
    env = dict(s.env)
    assert env["ANTHROPIC_BASE_URL"] == RELAY
    assert PLACEHOLDER.match(env["ANTHROPIC_API_KEY"])
    assert s.placeholders == {"ANTHROPIC_API_KEY"}
    assert env["CLAUDE_CONFIG_DIR"] == f"{HOME}/.claude" and env["TMPDIR"] == "/tmp"
    assert set(CLAUDE_QUIET) <= set(s.env)
    assert "IS_SANDBOX" not in env and s.agent_flags == ()
    assert len(env) == len(s.env)  # each name once


def test_claude_code_config_dir_is_seeded_past_onboarding_trust_and_the_key_prompt(
    tmp_path: Path, npm: Path
) -> None:
    s = prep("claude-code", ["claude"], tmp_path, npm)
    assert s.home_dirs == (".claude",)
    conf = home(tmp_path) / ".claude"
    state = json.loads((conf / ".claude.json").read_text())
    key = dict(s.env)["ANTHROPIC_API_KEY"]
    assert state["hasCompletedOnboarding"] is True
    assert state["customApiKeyResponses"]["approved"] == [key[-20:]]
    assert state["projects"][WORKSPACE]["hasTrustDialogAccepted"] is True
    settings = json.loads((conf / "settings.json").read_text())
    assert settings["hooks"] == claude_hooks(("/run/oms/bin/oms",), 60)
    assert settings["env"]["DISABLE_TELEMETRY"] == "1"
    assert settings["env"]["DISABLE_AUTOUPDATER"] == "1"
    assert oct(conf.stat().st_mode & 0o777) == "0o700"


def test_claude_code_mcp_config_holds_only_oms_mcp_as_started_inside(
    tmp_path: Path, npm: Path
) -> None:
    prep("claude-code", ["claude"], tmp_path, npm)
    mcp = json.loads((home(tmp_path) / ".claude/oms-mcp.json").read_text())
    assert mcp == {"mcpServers": {"oms": {"type": "stdio", "command": MCP[0],
                                          "args": list(MCP[1:])}}}  # fmt: skip


def test_no_real_key_reaches_the_config_or_env(
    tmp_path: Path, npm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = "sk-ant-test-real-" + "x" * 20
    monkeypatch.setenv("ANTHROPIC_API_KEY", real)
    monkeypatch.setenv("OPENAI_API_KEY", real)
    a = prep("claude-code", ["claude"], tmp_path / "a", npm)
    b = prep("codex", ["codex"], tmp_path / "b", npm)
    written = "".join(p.read_text() for p in tmp_path.rglob("run/home/**/*") if p.is_file())
    assert real not in written and real not in repr(a) + repr(b)
    assert dict(a.env)["ANTHROPIC_API_KEY"] == "oms-placeholder-anthropic-api-key"
    assert dict(b.env)["OPENAI_API_KEY"] == "oms-placeholder-openai-api-key"
    assert "mcpServers" in written and "model_provider" in written  # both dirs were read


@pytest.mark.parametrize("flags", [
    ["--dangerously-skip-permissions"],
    ["--permission-mode", "bypassPermissions"],
    ["--permission-mode=bypassPermissions"],
])  # fmt: skip
def test_claude_code_skipping_permissions_sets_is_sandbox_and_records_it(
    tmp_path: Path, npm: Path, flags: list[str]
) -> None:
    s = prep("claude-code", ["claude", "-p", "x", *flags], tmp_path, npm)
    assert dict(s.env)["IS_SANDBOX"] == "1"
    assert s.agent_flags == ("IS_SANDBOX=1",)


def test_claude_code_permission_mode_prompt_named_bypass_does_not_set_is_sandbox(
    tmp_path: Path, npm: Path
) -> None:
    s = prep("claude-code", ["claude", "-p", "bypassPermissions"], tmp_path, npm)
    assert "IS_SANDBOX" not in dict(s.env)


@pytest.mark.parametrize("flag", ["--setting-sources", "--setting-sources=project",
                                  "--mcp-config", "--strict-mcp-config"])  # fmt: skip
def test_claude_code_refuses_a_flag_oms_sets_itself(tmp_path: Path, npm: Path, flag: str) -> None:
    with pytest.raises(UsageError, match="oms sets"):
        prep("claude-code", ["claude", flag, "x"], tmp_path, npm)


# -- codex --------------------------------------------------------------------------------


def test_codex_refuses_strict_config_given_twice(tmp_path: Path, npm: Path) -> None:
    with pytest.raises(UsageError, match="oms sets --strict-config for Codex"):
        prep("codex", ["codex", "--strict-config", "exec"], tmp_path, npm)


def test_codex_runs_its_native_binary_with_the_wrappers_env(tmp_path: Path, npm: Path) -> None:
    s = prep("codex", ["codex", "exec", "--json", "hi"], tmp_path, npm)
    mods = npm.parent
    plat = next(mods.glob("@openai/codex-linux-*")).resolve()
    assert s.argv == (str(plat / "vendor" / TRIPLE / "bin/codex"), "--strict-config",
                      "--dangerously-bypass-hook-trust", "exec", "--json", "hi")  # fmt: skip
    env = dict(s.env)
    assert env["CODEX_HOME"] == f"{HOME}/.codex" and env["TMPDIR"] == "/tmp"
    assert not f"{env['CODEX_HOME']}/".startswith(env["TMPDIR"] + "/")
    assert env["CODEX_MANAGED_BY_NPM"] == "1"
    assert env["CODEX_MANAGED_PACKAGE_ROOT"] == str((mods / "@openai/codex").resolve())
    assert env["OPENAI_BASE_URL"] == RELAY + "/v1"
    assert PLACEHOLDER.match(env["OPENAI_API_KEY"]) and s.placeholders == {"OPENAI_API_KEY"}
    assert s.ro_paths == (str((mods / "@openai/codex").resolve()), str(plat))
    assert s.home_dirs == (".codex",)
    assert s.agent_flags == ("sandbox_mode=danger-full-access", "hook_trust=bypassed")


def test_codex_config_toml_is_the_relay_provider_quiet_and_oms_mcp(
    tmp_path: Path, npm: Path
) -> None:
    prep("codex", ["codex"], tmp_path, npm)
    conf = tomllib.loads((home(tmp_path) / ".codex/config.toml").read_text())
    assert conf == {
        "sandbox_mode": "danger-full-access",
        "check_for_update_on_startup": False,
        "model_provider": "oms",
        "model_providers": {"oms": {
            "name": "oms", "base_url": RELAY + "/v1", "wire_api": "responses",
            "env_key": "OPENAI_API_KEY", "request_max_retries": 0, "stream_max_retries": 0,
            "supports_websockets": False}},
        "analytics": {"enabled": False},
        "feedback": {"enabled": False},
        "features": {"plugins": False},
        "mcp_servers": {"oms": {"command": MCP[0], "args": list(MCP[1:])}},
        "hooks": codex_hooks(("/run/oms/bin/oms",), 60),
    }  # fmt: skip
    assert "projects" not in conf  # an untrusted /workspace: its .codex/config.toml never loads


def test_codex_given_the_native_binary_itself_is_accepted(tmp_path: Path, npm: Path) -> None:
    native = next(npm.parent.glob("@openai/codex-linux-*")) / "vendor" / TRIPLE / "bin/codex"
    s = prep("codex", [str(native), "exec"], tmp_path, npm)
    assert s.argv == (str(native.resolve()), *CODEX_OWN_FLAGS, "exec")
    assert s.cli_version == "0.171.0-linux-x64"


def test_codex_without_its_platform_package_is_refused(tmp_path: Path, npm: Path) -> None:
    for plat in npm.parent.glob("@openai/codex-linux-*"):
        (plat / "vendor" / TRIPLE / "bin/codex").unlink()
    with pytest.raises(UsageError, match="platform package"):
        prep("codex", ["codex"], tmp_path, npm)


@pytest.mark.parametrize("arg", ['a"b', "back\\slash", "new\nline", "tab\tdel\x7f", "ünï ✓ 😀"])
def test_codex_config_writes_any_mcp_argument_as_that_exact_string(arg: str) -> None:
    conf = tomllib.loads(codex_config("api", RELAY, ["/x/oms", arg]))
    assert conf["mcp_servers"]["oms"] == {"command": "/x/oms", "args": [arg]}


def test_codex_config_refuses_text_toml_cannot_hold() -> None:
    with pytest.raises(UsageError):
        codex_config("api", RELAY, ["/x/oms", "\udcff"])


# -- both: egress, versions, the CLI as data -----------------------------------------------


@pytest.mark.parametrize(("kind", "cli", "names"), [
    ("claude-code", "claude", ("ANTHROPIC_BASE_URL", "ANTHROPIC_API_KEY")),
    ("codex", "codex", ("OPENAI_BASE_URL", "OPENAI_API_KEY")),
])  # fmt: skip
def test_tunnel_egress_gives_no_base_url_and_no_placeholder_key(
    tmp_path: Path, npm: Path, kind: str, cli: str, names: tuple[str, ...]
) -> None:
    s = prep(kind, [cli], tmp_path, npm, egress="tunnel")
    assert not set(names) & set(dict(s.env)) and s.placeholders == frozenset()
    if kind == "codex":
        conf = tomllib.loads((home(tmp_path) / ".codex/config.toml").read_text())
        assert "model_provider" not in conf and "model_providers" not in conf


@pytest.mark.parametrize(("kind", "cli", "name"), [
    ("claude-code", "claude", "ANTHROPIC_BASE_URL"), ("codex", "codex", "OPENAI_BASE_URL"),
])  # fmt: skip
def test_no_egress_still_points_at_the_relay_never_at_a_provider(
    tmp_path: Path, npm: Path, kind: str, cli: str, name: str
) -> None:
    s = prep(kind, [cli], tmp_path, npm, egress="none")
    assert dict(s.env)[name].startswith(RELAY)


def test_cli_versions_are_read_from_package_json(tmp_path: Path, npm: Path) -> None:
    assert prep("claude-code", ["claude"], tmp_path / "a", npm).cli_version == "2.1.197"
    assert prep("codex", ["codex"], tmp_path / "b", npm).cli_version == "0.171.0"


def test_claude_code_binds_its_package_dir_read_only(tmp_path: Path, npm: Path) -> None:
    s = prep("claude-code", [str(npm / "claude")], tmp_path, npm)
    assert s.ro_paths == (str((npm.parent / "@anthropic-ai/claude-code").resolve()),)


@pytest.mark.parametrize("kind", ["claude-code", "codex"])
def test_a_cli_not_on_path_is_refused(tmp_path: Path, npm: Path, kind: str) -> None:
    with pytest.raises(UsageError, match="not found"):
        prep(kind, ["no-such-cli-oms"], tmp_path, npm)


@pytest.mark.parametrize("kind", ["claude-code", "codex"])
def test_a_relative_cli_path_is_refused(tmp_path: Path, npm: Path, kind: str) -> None:
    with pytest.raises(UsageError, match="absolute path or a bare name"):
        prep(kind, ["./claude"], tmp_path, npm)


@pytest.mark.parametrize("kind", ["claude-code", "codex"])
def test_a_program_that_is_not_the_cli_is_refused(tmp_path: Path, npm: Path, kind: str) -> None:
    with pytest.raises(UsageError, match="is not the"):
        prep(kind, [_exe(tmp_path / "elsewhere/claude").as_posix()], tmp_path, npm)


def test_the_other_cli_is_refused(tmp_path: Path, npm: Path) -> None:
    with pytest.raises(UsageError, match="is not the @openai/codex CLI"):
        prep("codex", ["claude"], tmp_path, npm)


def test_a_package_named_like_the_cli_elsewhere_is_refused(tmp_path: Path, npm: Path) -> None:
    fake = _package(tmp_path / "evil", {"name": "claude-code-helper", "bin": "bin/claude"})
    with pytest.raises(UsageError, match="is not the"):
        prep("claude-code", [str(_exe(fake / "bin/claude"))], tmp_path, npm)


def test_a_file_in_the_cli_package_that_is_not_its_bin_is_refused(
    tmp_path: Path, npm: Path
) -> None:
    other = _exe(npm.parent / "@anthropic-ai/claude-code/bin/other")
    with pytest.raises(UsageError, match="is not the"):
        prep("claude-code", [str(other)], tmp_path, npm)


def test_a_second_prepare_in_the_same_run_dir_is_refused(tmp_path: Path, npm: Path) -> None:
    prep("claude-code", ["claude"], tmp_path, npm)
    with pytest.raises(InternalError, match="already exists"):
        prep("claude-code", ["claude"], tmp_path, npm)


def test_an_empty_mcp_command_is_refused(tmp_path: Path, npm: Path) -> None:
    with pytest.raises(UsageError, match="oms mcp"):
        prep("claude-code", ["claude"], tmp_path, npm, oms_mcp_argv=())


# -- command ------------------------------------------------------------------------------


def test_command_runs_as_given_with_nothing_added(tmp_path: Path, npm: Path) -> None:
    s = prep("command", ["sh", "-c", "echo hi"], tmp_path, npm)
    assert s == KindSetup(("sh", "-c", "echo hi"), (), frozenset(), (), (), None, ())
    assert not home(tmp_path).exists()


def test_command_may_name_a_path_inside_the_sandbox(tmp_path: Path, npm: Path) -> None:
    s = prep("command", [f"{WORKSPACE}/run.sh"], tmp_path, npm)
    assert s.argv == (f"{WORKSPACE}/run.sh",)


@pytest.mark.parametrize("cmd", [[], ["no-such-program-oms"]])
def test_command_refuses_nothing_to_run_or_a_name_not_on_path(
    tmp_path: Path, npm: Path, cmd: list[str]
) -> None:
    with pytest.raises(UsageError):
        prep("command", cmd, tmp_path, npm)


def test_an_unknown_kind_is_refused(tmp_path: Path, npm: Path) -> None:
    with pytest.raises(UsageError, match="unknown agent kind"):
        prep("aider", ["sh"], tmp_path, npm)


def test_nothing_is_executable_only_because_it_exists(tmp_path: Path, npm: Path) -> None:
    exe = npm.parent / "@anthropic-ai/claude-code/bin/claude.exe"
    os.chmod(exe, 0o644)
    with pytest.raises(UsageError, match="not found"):
        prep("claude-code", [str(exe)], tmp_path, npm)


# -- the provider environment under `--egress api` (issue 29) -----------------------------

PROVIDER_ENV = {
    "anthropic": {"ANTHROPIC_BASE_URL": RELAY,
                  "ANTHROPIC_API_KEY": "oms-placeholder-anthropic-api-key"},
    "openai": {"OPENAI_BASE_URL": RELAY + "/v1",
               "OPENAI_API_KEY": "oms-placeholder-openai-api-key"},
}  # fmt: skip
CMDS: dict[str, list[str]] = {"command": ["sh"], "claude-code": ["claude"], "codex": ["codex"]}


@pytest.mark.parametrize(("kind", "egress", "held", "has"), [
    ("command", "api", ("anthropic",), ("anthropic",)),
    ("command", "api", ("openai",), ("openai",)),
    ("command", "api", ("anthropic", "openai"), ("anthropic", "openai")),
    ("command", "none", ("anthropic", "openai"), ()),
    ("command", "tunnel", ("anthropic", "openai"), ()),
    ("claude-code", "api", ("anthropic",), ("anthropic",)),
    ("claude-code", "api", ("anthropic", "openai"), ("anthropic", "openai")),
    ("claude-code", "none", ("anthropic", "openai"), ("anthropic",)),
    ("codex", "api", ("openai",), ("openai",)),
    ("codex", "api", ("anthropic", "openai"), ("anthropic", "openai")),
    ("codex", "tunnel", ("anthropic", "openai"), ()),
])  # fmt: skip
def test_every_kind_under_api_gets_the_environment_of_each_provider_oms_holds_a_key_for(
    tmp_path: Path, npm: Path, kind: str, egress: str, held: tuple[str, ...], has: tuple[str, ...]
) -> None:
    s = prep(kind, CMDS[kind], tmp_path, npm, egress=egress, held=held)
    env = dict(s.env)
    want = {k: v for p in has for k, v in PROVIDER_ENV[p].items()}
    assert {k: v for k, v in env.items() if k in {*PROVIDER_ENV["anthropic"],
                                                  *PROVIDER_ENV["openai"]}} == want  # fmt: skip
    assert s.placeholders == {k for k in want if k.endswith("_API_KEY")}


@pytest.mark.parametrize(("kind", "egress", "held", "refused"), [
    ("command", "api", (), True),
    ("command", "api", ("openai",), False),
    ("command", "api", ("anthropic",), False),
    ("claude-code", "api", ("openai",), True),
    ("claude-code", "api", ("anthropic",), False),
    ("codex", "api", ("anthropic",), True),
    ("codex", "api", ("openai",), False),
    ("codex", "none", (), False),
    ("command", "tunnel", (), False),
])  # fmt: skip
def test_egress_api_needs_a_key_for_the_kinds_provider(
    kind: Any, egress: Any, held: tuple[Any, ...], refused: bool
) -> None:
    if not refused:
        require_keys(kind, egress, held)
        return
    with pytest.raises(Unavailable, match=r"--egress api needs .*\$OMS_HOME/providers/"):
        require_keys(kind, egress, held)
