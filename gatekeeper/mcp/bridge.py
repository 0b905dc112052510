"""`oms conductor bridge`: the conductor session's stdio MCP server, exactly seven tools.

A thin caller of `gatekeeper.work.conductor.bridge`: each tool's arguments are validated by
its strict model (unknown fields refused, every string bounded), the repository's state is
opened fresh for the call (the default branch's policy of now), and the answer is bounded
status and opaque ids. There is no other tool: no filesystem, shell, GitHub, merge,
release or approval. Errors are one clean line with the error's kind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp_types import ToolAnnotations
from pydantic import ConfigDict, Field

from gatekeeper.mcp.bounds import Result, bounded, hide_paths_in, tool_errors
from gatekeeper.mcp.context import in_thread
from gatekeeper.mcp.inputs import Server
from gatekeeper.mcp.server import oms_version
from gatekeeper.repo.git import open_repo
from gatekeeper.work.conductor import bridge as b
from gatekeeper.work.conductor import intents as m
from gatekeeper.work.conductor import sessions
from gatekeeper.work.fence import Work

INSTRUCTIONS = (
    "The oms conductor bridge: propose goals, prepare, advise and propose dispatches, start "
    "teams of accepted dispatches, manage workers and process results. It cannot approve, "
    "merge or release anything, and it has no filesystem or shell."
)
CHANGES = ToolAnnotations(read_only_hint=False, destructive_hint=False,
                          idempotent_hint=False, open_world_hint=False)  # fmt: skip

Notification = Annotated[m.BatchId | None, Field(description="A pending notification batch "
                                                "(n-…) the conductor has read: consumed "
                                                "after the call succeeds.")]  # fmt: skip
Nonce = Annotated[m.Nonce, Field(description="A fresh nonce (8-96 of A-Z a-z 0-9 . _ : -); "
                                 "a used one is refused and changes nothing.")]  # fmt: skip


class _Answerer:
    def __init__(self, repo_dir: Path, conductor: str) -> None:
        self.repo_dir = repo_dir
        self.conductor = conductor

    def _call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        work = Work.open(self.repo_dir)
        try:
            return b.call(work, self.conductor, tool, args)
        finally:
            work.close()

    async def __call__(self, tool: str, **args: Any) -> Result:
        given = {k: v for k, v in args.items() if v is not None}
        data = await in_thread(self._call, tool, given)
        return bounded(hide_paths_in(data))


def _strict(server: MCPServer[Any]) -> None:
    """Every tool's argument model refuses unknown fields (and says so in its schema)."""
    for tool in server._tool_manager.list_tools():
        loose = tool.fn_metadata.arg_model
        strict: type[ArgModelBase] = type(loose.__name__, (loose,),
                      {"model_config": ConfigDict(extra="forbid",
                                                  arbitrary_types_allowed=True),
                       "__module__": loose.__module__})  # fmt: skip
        tool.fn_metadata.arg_model = strict
        tool.parameters = strict.model_json_schema(by_alias=True)


def build_bridge(repo_dir: Path, conductor: str) -> MCPServer[Any]:
    """The bridge of conductor session `conductor` (which must exist) of the repository."""
    served = open_repo(repo_dir)
    work = Work.open(served.top)
    try:
        sessions.get(work, sessions.checked_id(conductor))
    finally:
        work.close()
    ask = _Answerer(served.top, conductor)
    server = Server(name="oms-conductor", version=oms_version(), instructions=INSTRUCTIONS)

    @server.tool(description="Record a durable goal (objective, stop condition, horizon) "
                 "before any dispatch. Returns the goal id.", annotations=CHANGES)  # fmt: skip
    @tool_errors
    async def propose_goal(objective: m.Objective, stop_when: m.Objective,
                           horizon: Literal["until-empty", "12h", "24h"],
                           nonce: Nonce, notification: Notification = None) -> Result:  # fmt: skip
        return await ask("propose_goal", objective=objective, stop_when=stop_when,
                         horizon=horizon, nonce=nonce, notification=notification)  # fmt: skip

    @server.tool(description="Lease an open goal's ticket for a worktree-write role of the "
                 "policy and record the dispatch intent (task as data); with attach_from (the "
                 "goal the ticket is in now) it is attached to this goal first. Returns the "
                 "intent, its digest and the ticket version.", annotations=CHANGES)  # fmt: skip
    @tool_errors
    async def prepare_dispatch(goal: m.GoalId, ticket: m.TicketId, role: m.RoleName,
                               task: m.Task, nonce: Nonce,
                               transfer: m.Digest | None = None,
                               notification: Notification = None,
                               attach_from: m.GoalId | None = None) -> Result:  # fmt: skip
        return await ask("prepare_dispatch", goal=goal, ticket=ticket, role=role, task=task,
                         nonce=nonce, transfer=transfer, notification=notification,
                         attach_from=attach_from)  # fmt: skip

    @server.tool(description="Ask a fresh read-only advisor for a verdict (approve, revise, "
                 "reject) on exactly this intent digest.", annotations=CHANGES)  # fmt: skip
    @tool_errors
    async def advise_dispatch(intent: m.IntentId, digest: m.Digest, nonce: Nonce,
                              transfer: m.Digest | None = None,
                              notification: Notification = None) -> Result:  # fmt: skip
        return await ask("advise_dispatch", intent=intent, digest=digest, nonce=nonce,
                         transfer=transfer, notification=notification)  # fmt: skip

    @server.tool(description="Turn an intent the advisor approved, at the same digest, into "
                 "a persisted dispatch. Starts no worker.", annotations=CHANGES)  # fmt: skip
    @tool_errors
    async def propose_dispatch(intent: m.IntentId, digest: m.Digest, nonce: Nonce,
                               notification: Notification = None) -> Result:  # fmt: skip
        return await ask("propose_dispatch", intent=intent, digest=digest, nonce=nonce,
                         notification=notification)  # fmt: skip

    @server.tool(description="Observe, park, resume or stop a worker pane.",
                 annotations=CHANGES)  # fmt: skip
    @tool_errors
    async def manage_worker(worker: m.WorkerId,
                            action: Literal["observe", "park", "resume", "stop"],
                            nonce: Nonce) -> Result:  # fmt: skip
        return await ask("manage_worker", worker=worker, action=action, nonce=nonce)

    @server.tool(description="Start one worker pane per accepted dispatch (1 to 8, one "
                 "goal) as a team.", annotations=CHANGES)  # fmt: skip
    @tool_errors
    async def start_team(dispatches: Annotated[list[m.DispatchId],
                                               Field(min_length=1, max_length=m.MAX_TEAM)],
                         nonce: Nonce) -> Result:  # fmt: skip
        return await ask("start_team", dispatches=dispatches, nonce=nonce)

    @server.tool(description="Run the installed gate (result gate and one grade) on a "
                 "verifying ticket; deliver a READY_FOR_HUMAN ticket when a remote is "
                 "configured. Never approves or merges.", annotations=CHANGES)  # fmt: skip
    @tool_errors
    async def process_result(ticket: m.TicketId, nonce: Nonce) -> Result:
        return await ask("process_result", ticket=ticket, nonce=nonce)

    _strict(server)
    return server


def serve(repo_dir: Path, conductor: str) -> None:
    build_bridge(repo_dir, conductor).run("stdio")
