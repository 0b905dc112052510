"""The real Claude Code CLI as the conductor: `oms conductor start --no-attach` in real tmux
on oms' private socket, the real CLI in its pane under the real `oms agent run` (bwrap),
against the loopback fake of the Anthropic Messages API (a real provider cannot be
contacted here; only loopback addresses ever are).

The fake scripts the conductor's first turn as a `tool_use` of `mcp__oms__propose_goal`.
The goal row appearing in work.db proves the whole path ran: the interactive CLI in a
tmux pane, its strict MCP config, the in-sandbox `oms conductor bridge` relayed over the
broker's socket to the bridge outside, and the fenced goal. The request that offered the
tool shows the tool list the CLI really gave the model. Skipped, saying why, without tmux,
bwrap or the CLI (`make agents`).
"""

from __future__ import annotations

import os
import random
import shutil
import string
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.fake_models import fake_anthropic
from support.repos import make_repo

from gatekeeper.gates.records import init
from gatekeeper.work.conductor import sessions
from gatekeeper.work.conductor.launch import mcp_tools
from gatekeeper.work.conductor.start import confirmed_path, start
from gatekeeper.work.conductor.tmux import Tmux, socket_for
from gatekeeper.work.fence import Work

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".cache" / "agents" / "node_modules" / ".bin"
CLAUDE = BIN / "claude"
pytestmark = [
    pytest.mark.skipif(
        shutil.which("tmux") is None or not os.access("/usr/bin/bwrap", os.X_OK),
        reason="needs tmux (Debian: apt-get install tmux) and /usr/bin/bwrap",
    ),
    pytest.mark.skipif(
        not os.access(CLAUDE, os.X_OK),
        reason="claude is not installed under .cache/agents: run `make agents` (needs npm)",
    ),
]
# Claude Code, interactive, on an API key the broker injects. A conductor never runs
# credit-billed (launch.py refuses `billing = "usage"`), so this role says "none": true of
# the fake provider here, which bills nothing. A real API key is usage-billed, so a real
# conductor is a subscription login (egress `tunnel`), which a loopback fake cannot stand
# in for.
POLICY = """version = 1

[roles.conductor]
provider = "claude-code"
model = "claude-sonnet-4-5"
auth = "api-key"
billing = "none"
transport = "interactive"
authority = "read-only"
"""
OBJECTIVE = "ship the conductor, end to end"
GOAL = {"objective": OBJECTIVE, "stop_when": "the tickets are done", "horizon": "until-empty",
        "nonce": "real-conductor-nonce-1"}  # fmt: skip
# What the conductor's model may be offered: the bridge's seven tools and the read-only
# diagnostics (Bash only for the allowed `git status|log|diff`, under dontAsk).
ALLOWED = {*mcp_tools(), "Read", "Grep", "Glob", "Bash", "WaitForMcpServers"}


def until(what: Callable[[], bool], why: str, limit_s: float = 90) -> None:
    """Poll for `what` (a bound on waiting, never an assertion on time)."""
    end = time.monotonic() + limit_s
    while not what():
        if time.monotonic() > end:
            raise AssertionError(f"never happened: {why}")
        time.sleep(0.2)


@pytest.fixture
def lab(tmp_path: Path, oms_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Work]:
    repo = make_repo(tmp_path / "repo", {"oms.toml": POLICY}, env=oms_env)
    init(repo)
    runtime = tempfile.mkdtemp(prefix="oms-rt-")  # short: a socket path is at most 107 bytes
    os.chmod(runtime, 0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    monkeypatch.setenv("OMS_WORK_DIR", str(tmp_path / "work"))
    for k in ("GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_GLOBAL", "GIT_TERMINAL_PROMPT"):
        monkeypatch.setenv(k, oms_env[k])
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ['PATH']}")
    key = "sk-ant-test-real-" + "".join(random.choices(string.ascii_letters, k=32))
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    work = Work.open(repo)
    try:
        yield work
    finally:
        Tmux(socket_for(work.repo.repo_id)).kill_server()
        work.close()
        shutil.rmtree(runtime, ignore_errors=True)


def objectives(work: Work) -> list[str]:
    return [r["objective"] for r in work.db.read("SELECT objective FROM goals")]


def test_the_real_claude_code_conductor_proposes_a_goal_through_the_bridge(
    lab: Work, monkeypatch: pytest.MonkeyPatch
) -> None:
    with fake_anthropic("true", tool="mcp__oms__propose_goal", tool_input=GOAL) as fake:
        monkeypatch.setenv("OMS_EGRESS_UPSTREAM_ANTHROPIC", fake.url)
        confirmed_path(lab).write_text("{}")  # confirmed once at a terminal before
        shown = start(lab, doctor=False)
        tm = Tmux(shown["socket"])
        try:
            until(lambda: OBJECTIVE in objectives(lab), "the conductor proposed the goal")
        except AssertionError:
            shown_pane = tm.capture(shown["pane"], 60) if shown["pane"] else ""
            raise AssertionError(f"no goal; the conductor's pane shows:\n{shown_pane}") from None
        # The bridge's answer (the new goal's id) goes back to the model as the tool's result.
        (goal,) = lab.db.read("SELECT id FROM goals")
        until(lambda: any(goal["id"] in out for out in fake.tool_outputs()),
              "the bridge's answer reached the model")  # fmt: skip
    tool_lists = [{t["name"] for t in r.json().get("tools", [])} for r in fake.model_requests()]
    offered = [names for names in tool_lists if "mcp__oms__propose_goal" in names]
    assert offered, "the model never was offered the bridge's tools"
    assert ALLOWED - {"WaitForMcpServers"} <= offered[0]  # (only while a server connects)
    for names in tool_lists:  # every request, side calls too (they offer none)
        assert names <= ALLOWED, f"offered beyond the strict list: {sorted(names - ALLOWED)}"
    # The recorded launch is interactive: no print mode, no SDK transport.
    c = sessions.get(lab, shown["conductor"])
    assert not {"-p", "--print", "--output-format", "--input-format"} & set(c.argv), c.argv
    assert c.argv[0] == "claude" and "dontAsk" in c.argv
    # On oms' private socket, in the 0700 runtime directory, not the user's tmux server.
    assert Path(shown["socket"]).parent == Path(os.environ["XDG_RUNTIME_DIR"]) / "oms"
    assert tm.has_session(shown["session"])
    assert lab.store.entries("agent.run.start")
