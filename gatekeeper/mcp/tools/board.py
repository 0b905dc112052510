"""oms_roles, oms_assign_roles, oms_agent_board, oms_recommend_loop, oms_pro_access: display
and configuration within policy; no authority, no provider call. STUB: the board helper
fills it."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from gatekeeper.mcp.context import ToolContext


def register(server: MCPServer[Any], ctx: ToolContext) -> None:
    return None
