"""The pin of the tool definitions: SHA-256 of the canonical `tools/list` result."""

from __future__ import annotations

from typing import Any

import rfc8785
from mcp.server.mcpserver import MCPServer

from gatekeeper.digest import Sha256Digest


async def listed_digest(server: MCPServer[Any]) -> tuple[str, list[str]]:
    """(digest, tool names): RFC 8785 JSON of the tools sorted by name, so a host can pin
    the definitions and notice when they change."""
    tools = await server.list_tools()
    docs = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
    docs.sort(key=lambda d: d["name"])
    return str(Sha256Digest.of(rfc8785.dumps(docs))), [d["name"] for d in docs]
