"""Inside an agent run, the `oms mcp` it reaches acts only on the runs that agent run started.

The broker of `oms agent run` starts this server outside with the run's id in its
environment (`ToolContext.requested_by`); a run created through it names that agent run in
its `work.run.create` entry. Every tool argument that addresses a run is checked here,
before the tool runs, against what the signed log says: `run_id`, and `seq` when that entry
is about a run (its artifacts are blobs of the run's entries). Anything else is refused in
one line (exit 3's kind, `blocked`), the same for a run of another agent run, of the CLI or
one that does not exist. A server started by a human (no agent run) is not restricted.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from gatekeeper.errors import OmsError
from gatekeeper.mcp.bounds import clean_error
from gatekeeper.mcp.context import ToolContext, in_thread
from gatekeeper.work.runs import api as runs_api

RUN_SUBJECT = "oms-run:"  # the subject a run's entries name (gatekeeper.work.runs.store's)
ADDRESSING = ("run_id", "seq")  # the arguments that can name a run, directly or by entry


def runs_named(ctx: ToolContext, args: Mapping[str, Any]) -> list[str]:
    """The run ids a call's arguments address."""
    named = [args["run_id"]] if args.get("run_id") is not None else []
    seq = args.get("seq")
    if isinstance(seq, int) and seq >= 0:
        subjects = ctx.store().entry(seq).subject
        named += [s.name.removeprefix(RUN_SUBJECT) for s in subjects
                  if s.name.startswith(RUN_SUBJECT)]  # fmt: skip
    return named


def check(ctx: ToolContext, args: Mapping[str, Any]) -> None:
    """ForeignRun (one line) unless every run the arguments address was started by the
    agent run this server answers for."""
    for run_id in runs_named(ctx, args):
        for requester in ctx.requested_by:
            runs_api.require_started_by(ctx.repo.top, run_id, str(requester["name"]))


def _guarded(ctx: ToolContext, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def wrapper(**kwargs: Any) -> Any:
        try:
            await in_thread(check, ctx, kwargs)
        except OmsError as exc:
            raise ToolError(clean_error(exc)) from None
        return await fn(**kwargs)

    return wrapper


def only_own_runs(server: MCPServer[Any], ctx: ToolContext) -> None:
    """Every tool with an argument that addresses a run checks it first, when this server
    answers for an agent run."""
    if not ctx.requested_by:
        return
    for tool in server._tool_manager.list_tools():
        if set(ADDRESSING) & set(tool.fn_metadata.arg_model.model_fields):
            tool.fn = _guarded(ctx, tool.fn)
