"""`oms mcp` for the people and tools that read it: a description (and an enum) on every
parameter, `serverInfo.version`, compact JSON, `ok` as the CLI's exit code 0, and
`next_actions` that say who must act and how — driven by a real MCP client over stdio
against a real repository, the real scanners and the real sandbox.

The approval command a blocked preview hands a human is run as copied, from another
directory and without a controlling terminal: it gets as far as asking for the terminal
(so its argv parsed, its digest named the manifest and its code matched), and a digest
that names nothing fails differently.

Fake secrets are built at runtime from pieces: this file holds no string a scanner would match.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from support import warm
from support.env import clean_env
from support.oms import parse_single_json, run_oms
from support.repos import commit_on, make_repo
from support.secrets import fake_aws_key
from support.toolchains import python_lock

PY = "/usr/bin/python3"  # Debian's python: present inside the sandbox
DESTINATION = "anthropic:claude-sonnet"
POLICY = (
    'version = 1\n\n[[checks]]\nname = "unit"\n'
    f'cmd = ["{PY}", "-m", "unittest", "-q"]\ntimeout_s = 30\n'
)
TOOLCHAIN_POLICY = """version = 1

[[toolchains]]
name = "py"
kind = "python-venv"
lock = "requirements.lock"
python = "/usr/bin/python3"

[[checks]]
name = "tests"
cmd = ["python", "-m", "pytest", "-q", "tests"]
toolchain = "py"
timeout_s = 60
"""
MOD = "def add(a, b):\n    return a + b\n"
TEST_MOD = (
    "import unittest\n\nimport mod\n\n\n"
    "class TestMod(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(mod.add(1, 2), 3)\n"
)


@dataclass
class World:
    root: Path
    repo: Path
    env: dict[str, str]

    def commit(self, branch: str, files: dict[str, str]) -> str:
        index = self.root / f"index-{branch.replace('/', '-')}"
        return commit_on(self.repo, branch, files, env=self.env, index=index)

    def params(self) -> StdioServerParameters:
        command, args = warm.command(["mcp", "--repo", str(self.repo), "--tools", "all"], self.env)
        return StdioServerParameters(command=command, args=args, env=self.env, cwd=str(self.root))


def make_world(root: Path, files: dict[str, str]) -> World:
    home = root / "home"
    home.mkdir(parents=True)
    env = clean_env(home, root / "oms-state")
    env["OMS_TOOLCHAIN_DIR"] = str(root / "toolchains")
    repo = make_repo(root / "repo", files, env=env, readme=None, message="base")
    proc = run_oms(["init", "--repo", str(repo), "--json"], env=env, cwd=root)
    assert proc.returncode == 0, proc.stderr
    return World(root, repo, env)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    secret = f'AWS_KEY = "{fake_aws_key()}"\n'
    files = {"oms.toml": POLICY, "mod.py": MOD, "test_mod.py": TEST_MOD, "cloud.py": secret,
             "README.md": "demo\n"}  # fmt: skip
    return make_world(tmp_path_factory.mktemp("mcp-actions"), files)


Calls = list[tuple[str, dict[str, Any]]]


def session(world: World, calls: Calls) -> tuple[types.InitializeResult, list[types.Tool],
                                                 list[types.CallToolResult]]:  # fmt: skip
    """One server process: initialize, tools/list, then each call in order."""

    async def run() -> tuple[types.InitializeResult, list[types.Tool], list[types.CallToolResult]]:
        with open(world.root / "server.stderr", "a") as errlog:
            async with stdio_client(world.params(), errlog=errlog) as (read, write):
                async with ClientSession(read, write, read_timeout_seconds=120) as s:
                    init = await s.initialize()
                    tools = list((await s.list_tools()).tools)
                    results = [await s.call_tool(name, args) for name, args in calls]
        return init, tools, results

    return asyncio.run(run())


def text_of(result: types.CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))


def actions_of(result: types.CallToolResult) -> list[dict[str, Any]]:
    assert result.structured_content is not None, text_of(result)
    return result.structured_content["data"]["next_actions"]


def by_action(actions: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = [a for a in actions if a["action"] == name]
    assert len(found) == 1, actions
    return found[0]


def walk_properties(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property of an input schema, nested ones and those under `$defs` too."""
    for name, prop in schema.get("properties", {}).items():
        yield name, prop
        yield from walk_properties(prop)
    for sub in schema.get("$defs", {}).values():
        yield from walk_properties(sub)


# -- tools/list and initialize ------------------------------------------------------------


@pytest.fixture(scope="module")
def listed(world: World) -> tuple[types.InitializeResult, list[types.Tool]]:
    init, tools, _ = session(world, [])
    return init, tools


def test_every_parameter_of_every_tool_has_a_description(
    listed: tuple[types.InitializeResult, list[types.Tool]],
) -> None:
    _, tools = listed
    seen = 0
    for tool in tools:
        for name, prop in walk_properties(tool.input_schema):
            assert (prop.get("description") or "").strip(), (tool.name, name, prop)
            seen += 1
    assert seen >= 30, seen  # the walk found the parameters (15 tools, most take some)


def test_a_parameter_with_a_fixed_set_of_values_lists_them_as_an_enum(
    listed: tuple[types.InitializeResult, list[types.Tool]],
) -> None:
    _, tools = listed
    for name in ("oms_model_access", "oms_transfer_preview"):
        (tool,) = [t for t in tools if t.name == name]
        context = tool.input_schema["properties"]["context"]
        assert context["enum"] == ["repo", "diff", "paths", "none"], context
        assert context["default"] == "none"


def test_server_info_version_is_the_installed_oms_version(
    listed: tuple[types.InitializeResult, list[types.Tool]], world: World
) -> None:
    init, _ = listed
    assert init.server_info.name == "oms"
    assert init.server_info.version == version("oh-my-super-agent")
    cli = subprocess.run([sys.executable, "-m", "gatekeeper", "--version"], env=world.env,
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert init.server_info.version in cli.stdout


# -- compact results, ok as on the CLI, next_actions ------------------------------------


def test_results_are_compact_json_equal_to_the_structured_content(world: World) -> None:
    _, _, results = session(world, [("oms_status", {}), ("oms_repo_tree", {}),
                                    ("oms_policy", {})])  # fmt: skip
    for result in results:
        text = text_of(result)
        assert not result.is_error, text
        assert "\n" not in text and ": " not in text and ", " not in text[:200], text[:200]
        assert json.loads(text) == result.structured_content
        compact = json.dumps(result.structured_content, separators=(",", ":"),
                             ensure_ascii=False)  # fmt: skip
        assert text == compact


def test_a_preview_waiting_for_approval_hands_the_human_a_command_that_works_as_copied(
    world: World,
) -> None:
    _, _, (preview, status) = session(world, [
        ("oms_transfer_preview", {"to": DESTINATION, "purpose": "t", "context": "paths",
                                  "paths": ["README.md"]}),
        ("oms_transfer_status", {"digest": "sha256:" + "0" * 64}),
    ])  # fmt: skip
    sc = preview.structured_content
    assert sc is not None and sc["ok"] is True and sc["data"]["status"] == "previewed", sc
    digest = sc["data"]["digest"]
    approve = by_action(actions_of(preview), "approve_transfer")
    assert approve["owner"]["kind"] == "human" and approve["blocking"] is True
    argv = approve["argv"]
    assert Path(argv[0]).is_absolute() and digest in argv
    assert argv[argv.index("approve") + 1] == digest
    assert approve["command"].split() == argv  # one copyable line; nothing here needs quotes
    assert status.is_error  # no manifest has that digest
    # As a human would copy it: another directory, no controlling terminal here.
    elsewhere = world.root / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    copied = subprocess.run([*argv, "--json"], cwd=elsewhere, env=world.env, text=True,
                            capture_output=True, stdin=subprocess.DEVNULL,
                            start_new_session=True, timeout=60, check=False)  # fmt: skip
    out = parse_single_json(copied)
    assert copied.returncode == 3, out
    assert "no controlling terminal" in out["error"]["message"], out
    wrong = [*argv[:-3], "sha256:" + "1" * 64, *argv[-2:]]
    missed = subprocess.run([*wrong, "--json"], cwd=elsewhere, env=world.env, text=True,
                            capture_output=True, stdin=subprocess.DEVNULL,
                            start_new_session=True, timeout=60, check=False)  # fmt: skip
    assert "no controlling terminal" not in missed.stdout and missed.returncode != 0


def test_a_preview_blocked_by_a_secret_is_not_ok_and_offers_redact(world: World) -> None:
    args = {"to": DESTINATION, "purpose": "t", "context": "paths", "paths": ["cloud.py"]}
    _, _, (blocked, access, redacted) = session(world, [
        ("oms_transfer_preview", args), ("oms_model_access", args),
        ("oms_transfer_preview", {**args, "redact": True}),
    ])  # fmt: skip
    for result, tool in ((blocked, "oms_transfer_preview"), (access, "oms_model_access")):
        sc = result.structured_content
        assert sc is not None and not result.is_error
        assert sc["ok"] is False and sc["data"]["status"] == "blocked", sc  # the CLI exits 3
        again = by_action(actions_of(result), "preview_redacted")
        assert again["owner"]["kind"] == "agent" and again["tool"] == tool
        assert again["arguments"] == {**args, "redact": True}
    cli = run_oms(["transfer", "preview", "--repo", str(world.repo), "--to", DESTINATION,
                   "--purpose", "t", "--context", "paths", "--path", "cloud.py", "--json"],
                  env=world.env, cwd=world.root)  # fmt: skip
    assert cli.returncode == 3 and parse_single_json(cli)["status"] == "blocked"
    sc = redacted.structured_content
    assert sc is not None and sc["ok"] is True and sc["data"]["status"] == "previewed", sc
    assert by_action(actions_of(redacted), "approve_transfer")["owner"]["kind"] == "human"


def test_a_failed_verdict_is_not_ok_and_says_read_fix_and_rerun(world: World) -> None:
    world.commit("cand/broken", {"mod.py": "def add(a, b):\n    return a - b\n"})
    world.commit("cand/ready", {"mod.py": MOD + "\n\ndef mul(a, b):\n    return a * b\n"})
    _, _, (failed, ready) = session(world, [
        ("oms_process_result", {"candidate": "cand/broken", "attempt": 1}),
        ("oms_process_result", {"candidate": "cand/ready"}),
    ])  # fmt: skip
    sc = failed.structured_content
    assert sc is not None and not failed.is_error
    assert sc["data"]["decision"] == "FAILED" and sc["ok"] is False  # the CLI exits 1
    actions = actions_of(failed)
    rerun = by_action(actions, "fix_and_rerun")
    assert rerun["tool"] == "oms_process_result" and rerun["owner"]["kind"] == "agent"
    assert rerun["arguments"] == {"candidate": "cand/broken", "attempt": 2}
    read = by_action(actions, "read_check_output")
    _, _, (artifact,) = session(world, [(read["tool"], read["arguments"])])
    assert artifact.structured_content is not None, text_of(artifact)
    assert "FAILED" in artifact.structured_content["data"]["text"]  # unittest's own report
    sc = ready.structured_content
    assert sc is not None and sc["ok"] is True and sc["data"]["decision"] == "READY_FOR_HUMAN"
    review = by_action(actions_of(ready), "human_review")
    assert review["argv"][-4:] == ["show", str(sc["data"]["evidence_seq"]), "--repo",
                                   str(world.repo)]  # fmt: skip


def test_an_unprepared_toolchain_is_an_error_whose_next_action_is_toolchain_prepare(
    tmp_path: Path,
) -> None:
    w = make_world(tmp_path, {"oms.toml": TOOLCHAIN_POLICY, "requirements.lock": python_lock(),
                              "tests/test_x.py": "def test_x():\n    pass\n"})  # fmt: skip
    w.commit("cand/any", {"tests/test_y.py": "def test_y():\n    pass\n"})
    _, _, (result,) = session(w, [("oms_process_result", {"candidate": "cand/any"})])
    assert result.is_error
    line = text_of(result)
    assert line.startswith("unavailable: toolchain py is not prepared") and "\n" not in line
    sc = result.structured_content
    assert sc is not None and sc["ok"] is False and sc["data"]["decision"] == "UNAVAILABLE"
    prepare = by_action(sc["data"]["next_actions"], "prepare_toolchain")
    assert prepare["owner"]["kind"] == "human"
    assert prepare["argv"][-4:] == ["toolchain", "prepare", "--repo", str(w.repo)]
    assert by_action(sc["data"]["next_actions"], "rerun")["tool"] == "oms_process_result"
    # The command parses as copied: `--help` after it shows the subcommand's own help.
    shown = subprocess.run([*prepare["argv"], "--help"], env=w.env, cwd=tmp_path, text=True,
                           capture_output=True, timeout=60, check=False)  # fmt: skip
    assert shown.returncode == 0 and "prepare" in shown.stdout, shown.stderr


def test_doctor_ok_is_its_readiness_with_the_remedies_as_human_actions(world: World) -> None:
    _, _, (doctor, audit) = session(world, [("oms_doctor", {}), ("oms_evidence_audit", {})])
    sc = doctor.structured_content
    assert sc is not None
    assert sc["ok"] is sc["data"]["ready"]
    remedies = sc["data"]["remedies"]
    assert [a["description"] for a in actions_of(doctor)] == remedies
    cli = run_oms(["doctor", "--repo", str(world.repo), "--json"], env=world.env, cwd=world.root)
    assert (cli.returncode == 0) is sc["ok"]
    assert audit.structured_content is not None and audit.structured_content["ok"] is True
