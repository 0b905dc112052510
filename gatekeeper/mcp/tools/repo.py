"""oms_repo_tree, oms_repo_search, oms_repo_read_file, oms_git_status, oms_git_diff:
the read-only repo gateway (`gatekeeper.mcp.gateway`), bounded."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from gatekeeper.mcp import gateway
from gatekeeper.mcp.bounds import Result, bounded, sanitize_lines, tool_errors
from gatekeeper.mcp.context import ToolContext, in_thread
from gatekeeper.mcp.tools import READ_ONLY, Offset, RepoPath

MAX_TREE = 500
MAX_HITS = 200
STATUS_CHARS = 4000

TreeLimit = Annotated[int, Field(description=f"Most names in this page (1 to {MAX_TREE}).")]
Query = Annotated[str, Field(description="The text to find (or a Python regex with "
                             "regex=true).")]  # fmt: skip
Regex = Annotated[bool, Field(description="Read query as a regular expression, run under a "
                              "time bound.")]  # fmt: skip
HitLimit = Annotated[int, Field(description=f"Most hits returned (1 to {MAX_HITS}).")]
FilePath = Annotated[str, Field(description="A repository-relative path of a text file.")]
DiffBase = Annotated[str | None, Field(description="A ref to diff the worktree against "
                                       "(default: the index).")]  # fmt: skip


def register(server: MCPServer[Any], ctx: ToolContext) -> None:
    @server.tool(description="List files of the repository (tracked and untracked, not "
                 "ignored; secret-looking and dependency paths skipped), paged.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_repo_tree(path: RepoPath = "", offset: Offset = 0,
                            limit: TreeLimit = 500) -> Result:  # fmt: skip
        listing = await in_thread(gateway.tree, ctx.repo, path, max(0, offset),
                                  max(1, min(limit, MAX_TREE)))  # fmt: skip
        return bounded(listing.to_json())

    @server.tool(description="Search the repository's text files (literal by default; "
                 "regex=true runs under a time bound). Lines with findings are never matched.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_repo_search(query: Query, regex: Regex = False, path: RepoPath = "",
                              limit: HitLimit = 50) -> Result:  # fmt: skip
        matches = await in_thread(gateway.search, ctx.repo, query, regex, path,
                                  max(1, min(limit, MAX_HITS)), ctx.policy())  # fmt: skip
        return bounded(matches.to_json())

    @server.tool(description="Read a text file inside the repository, paged; lines with "
                 "secret findings are redacted.", annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_repo_read_file(path: FilePath, offset: Offset = 0) -> Result:
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
    async def oms_git_diff(base: DiffBase = None, path: RepoPath = "",
                           offset: Offset = 0) -> Result:  # fmt: skip
        found = await in_thread(gateway.diff, ctx.repo, base, path, max(0, offset), ctx.policy())
        return bounded(found.to_json())
