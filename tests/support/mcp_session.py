"""A real MCP client session over stdio for a test: `oms mcp` as a subprocess, initialised,
and the text content of a result as sent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import mcp_types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


@asynccontextmanager
async def session(params: StdioServerParameters, errlog: Any,
                  read_timeout_s: float) -> AsyncIterator[ClientSession]:  # fmt: skip
    async with stdio_client(params, errlog=errlog) as (read, write):
        async with ClientSession(read, write, read_timeout_seconds=read_timeout_s) as s:
            await s.initialize()
            yield s


def text_of(result: types.CallToolResult) -> str:
    """The text content of a tool result, as it went over the wire."""
    return "".join(c.text for c in result.content if isinstance(c, types.TextContent))
