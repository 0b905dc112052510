"""The `oms mcp` an agent run reaches (`OMS_AGENT_RUN_ID` set by its broker) acts only on the
runs that agent run started: every tool argument that addresses a run (`run_id`, or `seq`
of an entry about a run) is checked against the run's `work.run.create` entry in the signed
log. A run of another agent run, of the CLI, or no run at all is refused in one line and
changes nothing; the agent's own run is acted on. Real git, work.db and evidence log."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from support.env import clean_env
from support.repos import make_repo
from support.work import initialised_work, snapshot

from gatekeeper.agent.payloads import run_subject
from gatekeeper.errors import UsageError
from gatekeeper.mcp.own_runs import ADDRESSING
from gatekeeper.mcp.server import build_server, requested_by
from gatekeeper.work.fence import Work
from gatekeeper.work.runs.store import NewArtifact, Runs

MINE, OTHER = "20261201T150000Z-0a1b2c3d", "20261201T150000Z-ffffffff"
MISSING = "r-0123456789ab"
REFUSED = "blocked: run {} was not started by this agent run"


@dataclass
class Lab:
    repo: Path
    work: Work
    runs: dict[str, str]  # whose -> run id
    seqs: dict[str, int]  # whose -> the entry that attached its artifact
    blob: dict[str, str]  # whose -> that artifact's blob digest


def started(runs: Runs, asker: str | None) -> tuple[str, int, str]:
    """A run started at `asker`'s request (None: at the CLI), with one artifact."""
    run = runs.create("plan", "plan", "a goal", (), {}, step="start",
                      requested_by=run_subject(asker) if asker else ())  # fmt: skip
    got = runs.step(run, artifacts=[NewArtifact("plan", b"# the plan\n", "the plan")])
    return run.id, got.seq, runs.artifact(run.id, "plan-1").blob.removeprefix("sha256:")


def _lab(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lab]:
    with initialised_work(repo) as work:
        runs, seqs, blobs = {}, {}, {}
        for whose, asker in (("mine", MINE), ("other agent run", OTHER), ("cli", None)):
            runs[whose], seqs[whose], blobs[whose] = started(Runs(work), asker)
        monkeypatch.setenv("OMS_AGENT_RUN_ID", MINE)
        yield Lab(repo, work, runs, seqs, blobs)


@pytest.fixture
def lab(git_repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Lab]:
    yield from _lab(git_repo, monkeypatch)


@pytest.fixture(scope="module")
def untouched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """One lab for the refusals: each asserts that it changed nothing, so they may share
    it (one that did change something fails there, before another reads the lab)."""
    root = tmp_path_factory.mktemp("own-runs")
    home, state = root / "home", root / "oms-state"
    home.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(home))
        mp.setenv("OMS_HOME", str(state))
        mp.delenv("XDG_STATE_HOME", raising=False)
        repo = make_repo(root / "repo", env=clean_env(home, state))
        yield from _lab(repo, mp)


# Every tool with an argument that addresses a run, and a call of it on run `{run}` (entry
# `{seq}`, blob `{blob}`). A new such tool fails `test_the_table_is_every_tool_...`.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("oms_status", {"run_id": "{run}", "detail": "full"}),
    ("oms_read_artifact", {"run_id": "{run}", "ref": "plan-1"}),
    ("oms_read_artifact", {"seq": "{seq}", "digest": "{blob}"}),
    ("oms_transfer_preview", {"run_id": "{run}"}),
    ("oms_agent_board", {"run_id": "{run}"}),
    ("oms_summon", {"run_id": "{run}", "role": "critic", "brief": "look"}),
    ("oms_fanout", {"run_id": "{run}", "items": [{"role": "critic", "brief": "look"}]}),
    ("oms_continue", {"run_id": "{run}", "approval": "reject", "message": "no"}),
    ("oms_continue", {"run_id": "{run}", "approval": "revise", "message": "again"}),
    ("oms_loop", {"run_id": "{run}"}),
    ("oms_reconcile", {"run_id": "{run}"}),
    ("oms_abort", {"run_id": "{run}", "reason": "not mine"}),
    ("oms_capture_evidence", {"run_id": "{run}", "check": "unit"}),
]


def filled(args: dict[str, Any], lab: Lab, whose: str) -> dict[str, Any]:
    run = lab.runs.get(whose, MISSING)
    values = {"{run}": run, "{seq}": lab.seqs.get(whose), "{blob}": lab.blob.get(whose)}
    return {k: values.get(v, v) if isinstance(v, str) else v for k, v in args.items()}


def call(server: MCPServer[Any], tool: str, args: dict[str, Any]) -> CallToolResult | str:
    """The tool's result, or the text of its error."""

    async def go() -> CallToolResult | str:
        try:
            got = await server.call_tool(tool, args)
        except ToolError as exc:
            return str(exc)
        assert isinstance(got, CallToolResult)
        return got

    return anyio.run(go)


def test_the_table_is_every_tool_with_an_argument_that_addresses_a_run(lab: Lab) -> None:
    tools = build_server(lab.repo, "all")._tool_manager.list_tools()
    addressing = {t.name for t in tools if set(ADDRESSING) & set(t.parameters["properties"])}
    assert addressing == {tool for tool, _ in CALLS}


# Each call on a run of another agent run, of the CLI, and on no run (but an entry that
# does not exist names no run: `seq` is only asked of entries that do).
FOREIGN = [pytest.param(tool, args, whose, id=f"{tool}-{i}-{whose}")
           for i, (tool, args) in enumerate(CALLS)
           for whose in ("other agent run", "cli", "missing")
           if not (whose == "missing" and "seq" in args)]  # fmt: skip


@pytest.mark.parametrize(("tool", "args", "whose"), FOREIGN)
def test_a_run_this_agent_run_did_not_start_is_refused_in_one_line(
    untouched: Lab, tool: str, args: dict[str, Any], whose: str
) -> None:
    lab = untouched
    before = snapshot(lab.work)
    got = call(build_server(lab.repo, "all"), tool, filled(args, lab, whose))
    assert isinstance(got, str), (tool, whose, got)
    run = lab.runs.get(whose, MISSING)
    assert got == f"Error executing tool {tool}: {REFUSED.format(run)}: an agent acts only " \
                  "on the runs it started"  # fmt: skip
    assert snapshot(lab.work) == before, "a refusal changed something"


@pytest.mark.parametrize(("tool", "args"), CALLS, ids=[f"{t}-{i}" for i, (t, _) in
                                                      enumerate(CALLS)])  # fmt: skip
def test_the_run_this_agent_run_started_passes_the_check(
    lab: Lab, tool: str, args: dict[str, Any]
) -> None:
    got = call(build_server(lab.repo, "all"), tool, filled(args, lab, "mine"))
    # The tool itself may still refuse (no role to summon, no such check): not as foreign.
    assert isinstance(got, CallToolResult) or "not started by this agent run" not in got, got


def test_the_run_this_agent_run_started_is_read_and_aborted(lab: Lab) -> None:
    server, run = build_server(lab.repo, "all"), lab.runs["mine"]
    status = call(server, "oms_status", {"run_id": run})
    assert isinstance(status, CallToolResult) and status.structured_content, status
    assert status.structured_content["data"]["run_id"] == run
    read = call(server, "oms_read_artifact", {"seq": lab.seqs["mine"], "digest": lab.blob["mine"]})
    assert isinstance(read, CallToolResult) and "# the plan" in str(read.structured_content)
    aborted = call(server, "oms_abort", {"run_id": run, "reason": "done with it"})
    assert isinstance(aborted, CallToolResult), aborted
    assert Runs(lab.work).get(run).state == "aborted"


def test_a_server_no_agent_run_started_acts_on_every_run(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMS_AGENT_RUN_ID")
    aborted = call(build_server(lab.repo, "all"), "oms_abort",
                   {"run_id": lab.runs["other agent run"], "reason": "a human asked"})  # fmt: skip
    assert isinstance(aborted, CallToolResult), aborted
    assert Runs(lab.work).get(lab.runs["other agent run"]).state == "aborted"


@pytest.mark.parametrize("value", ["r-0123456789ab", "../20261201T150000Z-0a1b2c3d", " "])
def test_a_malformed_agent_run_id_is_refused_rather_than_read_as_none(value: str) -> None:
    with pytest.raises(UsageError, match="OMS_AGENT_RUN_ID"):
        requested_by({"OMS_AGENT_RUN_ID": value})
    assert requested_by({}) == ()
