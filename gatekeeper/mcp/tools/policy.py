"""oms_policy: the effective policy at HEAD and the transfer policy's digest."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from gatekeeper.gates.transfer.autopilot import trusted_policy
from gatekeeper.mcp.bounds import Result, bounded, tool_errors
from gatekeeper.mcp.context import ToolContext
from gatekeeper.mcp.tools import READ_ONLY
from policy import policy_json


def register(server: MCPServer[Any], ctx: ToolContext) -> None:
    @server.tool(
        description="The effective policy of this repository (at HEAD) and, for "
        "transfers, the default branch's, with their digests.",
        annotations=READ_ONLY,
    )
    @tool_errors
    async def oms_policy() -> Result:
        here = ctx.policy()
        trusted = trusted_policy(ctx.repo)
        return bounded({"head": {"origin": here.origin, "digest": here.digest,
                                 "policy": policy_json(here.policy)},
                        "transfer_policy_digest": trusted.digest})  # fmt: skip
