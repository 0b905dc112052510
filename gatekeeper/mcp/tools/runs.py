"""The run tools (oms_plan, oms_orchestrate, oms_consult, oms_summon, oms_fanout,
oms_continue, oms_loop, oms_reconcile, oms_abort, oms_capture_evidence): thin callers of
`gatekeeper.work.runs`. None can approve. STUB: the surface helper fills it."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from gatekeeper.mcp.context import ToolContext


def register(server: MCPServer[Any], ctx: ToolContext) -> None:
    return None
