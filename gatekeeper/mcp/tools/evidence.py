"""oms_read_artifact, oms_evidence_audit: bounded reads of the evidence store."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from evidence import audit
from gatekeeper.mcp.bounds import PAGE_BYTES, Result, bounded, hide_paths_in, page, tool_errors
from gatekeeper.mcp.context import ToolContext, in_thread
from gatekeeper.mcp.tools import READ_ONLY, Offset

Seq = Annotated[int, Field(description="The evidence entry's seq (e.g. a verdict's "
                           "evidence_seq).")]  # fmt: skip
BlobDigest = Annotated[str, Field(description="A blob digest that entry references, "
                                  "sha256:<64 hex> (e.g. a check's stderr_blob).")]  # fmt: skip
Limit = Annotated[int, Field(description=f"Most bytes of text in this page (at most "
                             f"{PAGE_BYTES}).")]  # fmt: skip


def artifact_page(ctx: ToolContext, seq: int, digest: str, offset: int,
                  limit: int) -> dict[str, Any]:  # fmt: skip
    """A page of a blob that entry `seq` references, and of nothing else."""
    store = ctx.store()
    if digest not in store.entry(seq).blobs:
        raise ToolError("not_found: that entry does not reference that blob")
    text = store.blobs.get(digest).decode("utf-8", "replace")
    budget = min(max(1, limit), PAGE_BYTES)
    return {"seq": seq, "digest": digest, **page(text, max(0, offset), "text", budget).to_json()}


def register(server: MCPServer[Any], ctx: ToolContext) -> None:
    @server.tool(
        description="Read part of an evidence blob that an entry references (by the "
        "entry's seq and the blob digest), and nothing else.",
        annotations=READ_ONLY,
    )
    @tool_errors
    async def oms_read_artifact(seq: Seq, digest: BlobDigest, offset: Offset = 0,
                                limit: Limit = 6000) -> Result:  # fmt: skip
        return bounded(await in_thread(artifact_page, ctx, seq, digest, offset, limit))

    @server.tool(description="Audit the evidence log offline (chain, Merkle root, checkpoint, "
                 "witness, blobs).", annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_evidence_audit() -> Result:
        report = (await in_thread(audit, ctx.audit_store())).to_json()
        # ok as on the CLI: `oms evidence audit` exits 0 only when the log is intact
        return bounded(hide_paths_in(report), ok=report["intact"] is True)
