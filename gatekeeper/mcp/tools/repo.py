"""oms_repo_tree, oms_repo_search, oms_repo_read_file, oms_git_status, oms_git_diff:
the read-only repo gateway (`gatekeeper.mcp.gateway`), bounded."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from gatekeeper.mcp import gateway
from gatekeeper.mcp.bounds import Result, bounded, sanitize_lines, tool_errors
from gatekeeper.mcp.context import ToolContext, in_thread
from gatekeeper.mcp.tools import READ_ONLY

MAX_TREE = 500
MAX_HITS = 200
STATUS_CHARS = 4000


def register(server: MCPServer[Any], ctx: ToolContext) -> None:
    @server.tool(description="List files of the repository (tracked and untracked, not "
                 "ignored; secret-looking and dependency paths skipped), paged.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_repo_tree(path: str = "", offset: int = 0, limit: int = 500) -> Result:
        listing = await in_thread(gateway.tree, ctx.repo, path, max(0, offset),
                                  max(1, min(limit, MAX_TREE)))  # fmt: skip
        return bounded(listing.to_json())

    @server.tool(description="Search the repository's text files (literal by default; "
                 "regex=true runs under a time bound). Lines with findings are never matched.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_repo_search(query: str, regex: bool = False, path: str = "",
                              limit: int = 50) -> Result:  # fmt: skip
        matches = await in_thread(gateway.search, ctx.repo, query, regex, path,
                                  max(1, min(limit, MAX_HITS)), ctx.policy())  # fmt: skip
        return bounded(matches.to_json())

    @server.tool(description="Read a text file inside the repository, paged; lines with "
                 "secret findings are redacted.", annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_repo_read_file(path: str, offset: int = 0) -> Result:
        text = await in_thread(gateway.read_file, ctx.repo, path, max(0, offset), ctx.policy())
        return bounded(text.to_json())

    @server.tool(description="Worktree status of the repository (porcelain v1 letters), "
                 "computed by oms from the index and file bytes, bounded.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_git_status() -> Result:
        text = "\n".join(await in_thread(gateway.status, ctx.repo))
        return bounded({"status": sanitize_lines(text[:STATUS_CHARS]),
                        "truncated": len(text) > STATUS_CHARS})  # fmt: skip

    @server.tool(description="Diff of the worktree against the index (or `base`), computed by "
                 "oms, paged; lines with secret findings are redacted.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_git_diff(base: str | None = None, path: str = "", offset: int = 0) -> Result:
        found = await in_thread(gateway.diff, ctx.repo, base, path, max(0, offset), ctx.policy())
        return bounded(found.to_json())
