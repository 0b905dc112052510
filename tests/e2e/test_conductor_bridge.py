"""`oms conductor bridge` end to end: the real MCP client over stdio against the command,
and from inside a conductor's real `oms agent run` (bwrap, a `command` agent) through the
broker's relay to the bridge outside.

One `oms init`ed repository for the module (the bridge lab: scripted `command:` roles, a
scripted advisor) and one conductor session record.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters
from support.bridge import bridge_lab, new_session
from support.mcp_session import session as mcp_session
from support.mcp_session import text_of
from support.oms import run_oms
from support.repos import commit_on
from support.runs import NEEDS, RunLab, module_env
from support.work import facts, nonce, open_work

from gatekeeper.agent.run import AgentRunRequest, agent_run, inside_oms_argv
from gatekeeper.work.conductor import bridge as b
from gatekeeper.work.conductor import tokens
from gatekeeper.work.conductor.bridge import TOOLS

pytestmark = pytest.mark.skipif(not NEEDS, reason="needs /usr/bin/bwrap and /usr/bin/python3")
START, END = "OMS-BRIDGE-START", "OMS-BRIDGE-END"


@dataclass
class World:
    lab: RunLab
    conductor: str

    def params(self, *args: str) -> StdioServerParameters:
        return StdioServerParameters(command=sys.executable, args=["-P", "-m", "gatekeeper",
                                     "conductor", "bridge", "--repo", str(self.lab.repo),
                                     *args], env=self.lab.env)  # fmt: skip


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    root = tmp_path_factory.mktemp("bridge-e2e")
    with pytest.MonkeyPatch.context() as mp:
        env = module_env(root, mp)
        lab = bridge_lab(root, env)
        work = open_work(lab.repo)
        try:
            cid = new_session(work)
        finally:
            work.close()
        yield World(lab, cid)


async def _drive(w: World, errlog: Any) -> dict[str, Any]:
    """Over one client session: the listing, the happy path, and refusals."""
    out: dict[str, Any] = {}
    async with mcp_session(w.params("--session", w.conductor), errlog, 120) as s:
        listed = (await s.list_tools()).tools
        out["tools"] = {t.name: t.input_schema for t in listed}

        async def call(name: str, args: dict[str, Any]) -> tuple[bool, Any]:
            r = await s.call_tool(name, args)
            text = text_of(r)
            return bool(r.is_error), (text if r.is_error else json.loads(text))

        n = nonce()
        goal_args = {"objective": "ship", "stop_when": "shipped", "horizon": "12h", "nonce": n}
        out["goal"] = await call("propose_goal", goal_args)
        out["replay"] = await call("propose_goal", goal_args)
        out["extra"] = await call("propose_goal", {**goal_args, "nonce": nonce(), "shell": "x"})
        goal = out["goal"][1]["data"]["goal"]
        work = open_work(w.lab.repo)
        try:
            ticket = work.add_ticket(goal, "a ticket", None, nonce()).id
        finally:
            work.close()
        prep = await call("prepare_dispatch", {"goal": goal, "ticket": ticket,
                                               "role": "implementer", "task": "add feature()",
                                               "nonce": nonce()})  # fmt: skip
        out["prepare"] = prep
        intent, digest = prep[1]["data"]["intent"], prep[1]["data"]["digest"]
        ref = {"intent": intent, "digest": digest}
        out["early"] = await call("propose_dispatch", {**ref, "nonce": nonce()})
        out["advise"] = await call("advise_dispatch", {**ref, "nonce": nonce()})
        out["propose"] = await call("propose_dispatch", {**ref, "nonce": nonce()})
        out["team9"] = await call("start_team", {"dispatches": [f"d-{i:012x}" for i in range(9)],
                                                 "nonce": nonce()})  # fmt: skip
    return out


def test_the_bridge_lists_exactly_seven_strict_tools_and_walks_an_intent(
    world: World, tmp_path: Path
) -> None:
    with open(tmp_path / "bridge.stderr", "w") as errlog:
        got = asyncio.run(_drive(world, errlog))
    assert sorted(got["tools"]) == sorted(TOOLS) and len(got["tools"]) == 7
    for name, schema in got["tools"].items():
        assert schema["additionalProperties"] is False, name
        assert "nonce" in schema["required"], name
    assert got["tools"]["start_team"]["properties"]["dispatches"]["maxItems"] == 8
    ok, goal = got["goal"]
    assert not ok and goal["ok"] and goal["data"]["state"] == "open"
    assert got["replay"][0] and "blocked: nonce" in got["replay"][1]
    assert got["extra"][0] and "shell" in got["extra"][1]
    assert not got["prepare"][0] and got["prepare"][1]["data"]["ticket_version"] >= 2
    assert got["early"][0] and "blocked: " in got["early"][1]  # not advised yet
    assert not got["advise"][0] and got["advise"][1]["data"]["verdict"] == "approve"
    ok, proposed = got["propose"]
    assert not ok and proposed["data"]["state"] == "accepted"
    assert proposed["data"]["dispatch"].startswith("d-")
    assert got["team9"][0]
    assert "lease-" not in json.dumps(got)  # a lease token never reaches the conductor


def test_the_bridge_of_an_unknown_session_refuses_to_start(world: World) -> None:
    proc = run_oms(["conductor", "bridge", "--repo", str(world.lab.repo), "--session",
                    "c-" + "0" * 12], env=world.lab.env, timeout=120)  # fmt: skip
    assert proc.returncode != 0 and proc.stdout == ""
    assert "no conductor session" in proc.stderr and "Traceback" not in proc.stderr


# -- from inside a conductor's agent run --------------------------------------------------------

INSIDE = """
import asyncio, json, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
print(START, flush=True)
argv = json.loads(sys.argv[1])
async def main():
    params = StdioServerParameters(command=argv[0], args=argv[1:])
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            tools = (await s.list_tools()).tools
            print("TOOLS " + json.dumps(sorted(t.name for t in tools)), flush=True)
asyncio.run(main())
print(END, flush=True)
"""


def _inside(world: World, conductor: str | None, script: str, *args: str) -> Any:
    cmd = (sys.executable, "-I", "-c", f"START, END = {START!r}, {END!r}\n{script}", *args)
    return agent_run(AgentRunRequest(repo_dir=world.lab.repo, cmd=cmd, capture=True,
                                     conductor=conductor, timeout_s=120))  # fmt: skip


def test_inside_a_conductor_run_the_bridge_relays_to_the_one_outside(world: World) -> None:
    """The session passed inside (`--session c-0…`) is ignored: the broker starts the bridge
    for the run's own binding, whose tools are listed."""
    argv = inside_oms_argv("conductor", "bridge", "--session", "c-" + "0" * 12)
    got = _inside(world, world.conductor, INSIDE, json.dumps(argv))
    lines = got.stdout.splitlines()
    assert lines[:1] == [START] and lines[-1:] == [END], (got.stdout, got.stderr)
    (listed,) = [json.loads(x[6:]) for x in lines if x.startswith("TOOLS ")]
    assert sorted(listed) == sorted(TOOLS)


NO_BINDING = """
import subprocess, sys, json
print(START, flush=True)
p = subprocess.run(json.loads(sys.argv[1]), stdin=subprocess.DEVNULL, capture_output=True,
                   text=True)
print("RC %d" % p.returncode)
print("ERR " + p.stderr.strip().replace("\\n", " | "))
print(END, flush=True)
"""


def test_inside_a_run_without_a_conductor_the_bridge_is_unavailable(world: World) -> None:
    argv = inside_oms_argv("conductor", "bridge")
    got = _inside(world, None, NO_BINDING, json.dumps(argv))
    lines = got.stdout.splitlines()
    assert lines[:1] == [START] and lines[-1:] == [END], (got.stdout, got.stderr)
    assert "RC 4" in lines and any(x.startswith("ERR oms: unavailable") for x in lines)


# -- process_result: the installed gate on a verifying ticket -----------------------------------


def test_process_result_runs_the_gate_and_one_grade_on_a_verifying_ticket(world: World) -> None:
    """A ticket taken through the bridge to a dispatch; the worker's part (its run and its
    receipt, a worker pane's part) is done here with the core's own calls. No remote
    is configured, so nothing is delivered."""
    work = open_work(world.lab.repo)
    try:
        c = world.conductor

        def call(tool: str, **args: Any) -> dict[str, Any]:
            return b.call(work, c, tool, {"nonce": nonce(), **args})

        goal = call("propose_goal", objective="o", stop_when="s", horizon="12h")["goal"]
        ticket = work.add_ticket(goal, "add feature", None, nonce()).id
        prep = call("prepare_dispatch", goal=goal, ticket=ticket, role="implementer",
                    task="add feature()")  # fmt: skip
        ref = {"intent": prep["intent"], "digest": prep["digest"]}
        call("advise_dispatch", **ref)
        d = work.dispatch(call("propose_dispatch", **ref)["dispatch"])
        sha = commit_on(world.lab.repo, f"cand-{ticket}", {"feature.py": "X = 1\n"},
                        env=world.lab.env, index=world.lab.root / f"idx-{ticket}",
                        parent=d.envelope.base)  # fmt: skip
        token = tokens.held(work.repo.repo_id, ticket)
        work.record_run(d.id, token, facts(candidate=sha), nonce())
        work.file_receipt(d.id, token, nonce(), sha)
        out = call("process_result", ticket=ticket)
    finally:
        work.close()
    assert out == {"ticket": ticket, "state": "completed", "decision": "READY_FOR_HUMAN",
                   "delivery": None}  # fmt: skip
