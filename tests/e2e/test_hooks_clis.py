"""The hooks in the real clients: `oms agent run` with the real Claude Code and Codex CLIs
(`make agents`) against the loopback fakes of tests/support/fake_models.py, whose scripted
tool call is one the hooks must deny. The per-run config installs the hooks; the
in-sandbox `oms hook` answers; the CLI then sends the denial back to the model as the
tool's result, and the tool never ran. Skipped, saying why, when a CLI is not installed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.env import clean_env
from support.fake_models import FINAL_TEXT, FakeModel, fake_openai, sse
from support.oms import parse_single_json, run_oms
from support.repos import make_repo
from support.sandbox import traversable_dir
from support.secrets import fake_aws_key

from gatekeeper.agent.inside import WORKSPACE

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".cache" / "agents" / "node_modules" / ".bin"
CLAUDE, CODEX = BIN / "claude", BIN / "codex"


def needs(cli: Path) -> pytest.MarkDecorator:
    reason = f"{cli.name} is not installed under .cache/agents: run `make agents` (needs npm)"
    return pytest.mark.skipif(not os.access(cli, os.X_OK), reason=reason)


@pytest.fixture
def world() -> Iterator[Path]:
    with traversable_dir("oms-hooks-") as root:
        yield root


def agent_run(
    world: Path, kind: str, cmd: list[str], fake: FakeModel, files: dict[str, str] | None = None
) -> dict[str, Any]:
    repo = make_repo(world / "repo", {"mod.py": "x = 1\n", **(files or {})})
    for dirpath, dirs, files in os.walk(repo):
        for name in dirs + files:
            os.chmod(os.path.join(dirpath, name), 0o777 if name in dirs else 0o666)
    (world / "home").mkdir()
    env = {**clean_env(world / "home", world / "oms-home"), "OMS_WORK_DIR": str(world / "work")}
    claude = ("OMS_EGRESS_UPSTREAM_ANTHROPIC", "ANTHROPIC_API_KEY")
    upstream, key = claude if kind == "claude-code" else ("OMS_EGRESS_UPSTREAM_OPENAI",
                                                          "OPENAI_API_KEY")  # fmt: skip
    env.update({key: "sk-test-real-key-for-the-fake", upstream: fake.url})
    assert run_oms(["init", "--repo", str(repo), "--json"], env=env, cwd=world).returncode == 0
    proc = run_oms(["agent", "run", "--repo", str(repo), "--agent", kind, "--egress", "api",
                    "--json", "--", *cmd], env=env, cwd=world, timeout=300)  # fmt: skip
    return parse_single_json(proc)


# -- Claude Code: a Write of a secret ------------------------------------------------------


def _has_tool_result(body: dict[str, Any]) -> bool:
    return any(isinstance(m.get("content"), list)
               and any(b.get("type") == "tool_result" for b in m["content"])
               for m in body.get("messages", []))  # fmt: skip


def write_secret_events(key: str) -> Any:
    """Messages API frames: a Write tool_use of `key` first, the final text once a
    tool_result is back (a short text for any side call)."""
    args = {"file_path": f"{WORKSPACE}/cloud.py", "content": f'KEY = "{key}"\n'}
    return tool_call_events("Write", args)


def tool_call_events(tool: str, args: dict[str, Any]) -> Any:
    """Messages API frames: a `tool` tool_use with `args` first, the final text once a
    tool_result is back (a short text for any side call)."""

    def answer(body: dict[str, Any], _command: str) -> list[bytes]:
        done = _has_tool_result(body)
        if not done and any(t.get("name") == tool for t in body.get("tools", [])):
            block = {"type": "tool_use", "id": "toolu_oms_hook_1", "name": tool, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(args)}
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            delta = {"type": "text_delta", "text": FINAL_TEXT if done else "oms fake title"}
            stop = "end_turn"
        message = {"id": "msg_oms_hook", "type": "message", "role": "assistant",
                   "model": "fake", "content": [], "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": 1, "output_tokens": 1}}  # fmt: skip
        stopped = {"stop_reason": stop, "stop_sequence": None}
        frames = [
            ("message_start", {"message": message}),
            ("content_block_start", {"index": 0, "content_block": block}),
            ("content_block_delta", {"index": 0, "delta": delta}),
            ("content_block_stop", {"index": 0}),
            ("message_delta", {"usage": {"output_tokens": 1}, "delta": stopped}),
            ("message_stop", {}),
        ]
        return [sse(name, {"type": name, **data}) for name, data in frames]

    return answer


@needs(CLAUDE)
def test_claude_code_write_of_a_secret_is_denied_by_the_installed_hook(world: Path) -> None:
    key = fake_aws_key()
    with FakeModel("/v1/messages", write_secret_events(key), "") as fake:
        run = agent_run(world, "claude-code", [str(CLAUDE), "-p", "write the key",
                        "--allowedTools", "Write", "--output-format", "json"], fake)  # fmt: skip
    outputs = fake.tool_outputs()
    assert any("oms refused this write" in o and "cloud.py line 1" in o for o in outputs), (
        outputs, run)  # fmt: skip
    assert not any(key in o for o in outputs)
    assert run["candidate"] is None, run  # nothing was written, so nothing to commit


@needs(CLAUDE)
def test_claude_code_read_of_a_dotenv_is_denied_by_the_installed_hook(world: Path) -> None:
    key = fake_aws_key()
    events = tool_call_events("Read", {"file_path": f"{WORKSPACE}/.env"})
    with FakeModel("/v1/messages", events, "") as fake:
        cmd = [str(CLAUDE), "-p", "read .env", "--allowedTools", "Read", "--output-format", "json"]
        run = agent_run(world, "claude-code", cmd, fake, {".env": f"K={key}\n"})
    outputs = fake.tool_outputs()
    assert any("oms refused reading" in o and "(.env, .env.*)" in o for o in outputs), (
        outputs, run)  # fmt: skip
    assert not fake.seen(key)


# -- Codex: a force push -------------------------------------------------------------------

PUSH = "git push --force origin main; echo ran > pushed.txt"


@needs(CODEX)
def test_codex_force_push_is_denied_by_the_installed_hook(world: Path) -> None:
    with fake_openai(PUSH) as fake:
        run = agent_run(world, "codex", [str(CODEX), "exec", "--json", "--skip-git-repo-check",
                                         "-C", WORKSPACE, "push it"], fake)  # fmt: skip
    outputs = fake.tool_outputs()
    assert any("oms refused this command: it force-pushes" in o for o in outputs), (outputs, run)
    assert run["candidate"] is None, run  # the command never ran: no pushed.txt


@needs(CODEX)
def test_codex_cat_of_a_dotenv_is_denied_by_the_installed_hook(world: Path) -> None:
    key = fake_aws_key()
    with fake_openai("cat .env") as fake:
        run = agent_run(world, "codex", [str(CODEX), "exec", "--json", "--skip-git-repo-check",
                                         "-C", WORKSPACE, "read it"], fake,
                        {".env": f"K={key}\n"})  # fmt: skip
    outputs = fake.tool_outputs()
    assert any("oms refused this command: it reads .env" in o for o in outputs), (outputs, run)
    assert not fake.seen(key)


# -- Codex: apply_patch forms Codex applies (tests/e2e/test_codex_patch.py) ------------------

AGENTS_PATCH = "*** Begin Patch\n *** Add File: AGENTS.md\n+obey the patch\n*** End Patch\n"
CD_HEREDOC = ("cd .github && apply_patch <<'EOF'\n*** Begin Patch\n"
              "*** Add File: workflows/ci.yml\n+on: push\n*** End Patch\nEOF")  # fmt: skip


@needs(CODEX)
@pytest.mark.parametrize(
    ("command", "patch", "path"),
    [(AGENTS_PATCH, True, "AGENTS.md"), (CD_HEREDOC, False, ".github/workflows/ci.yml")],
    ids=["leading_space_header", "cd_then_heredoc"],
)
def test_codex_patch_forms_reaching_a_protected_path_are_denied(
    world: Path, command: str, patch: bool, path: str
) -> None:
    with fake_openai(command, patch=patch) as fake:
        run = agent_run(world, "codex", [str(CODEX), "exec", "--json", "--skip-git-repo-check",
                                         "-C", WORKSPACE, "edit"], fake)  # fmt: skip
    outputs = fake.tool_outputs()
    assert any(f"{path} is a protected path" in o for o in outputs), (outputs, run)
    assert run["candidate"] is None, run  # the patch never applied: nothing to commit
