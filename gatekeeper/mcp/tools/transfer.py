"""oms_model_access, oms_transfer_preview, oms_transfer_status: the transfer gate's
preflight and state. They record manifests; none can approve or release."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from gatekeeper.gates.transfer.preview import preview as preview_transfer
from gatekeeper.gates.transfer.state import show as show_transfer
from gatekeeper.mcp.bounds import Result, bounded, tool_errors
from gatekeeper.mcp.context import ToolContext, in_thread
from gatekeeper.mcp.tools import READ_ONLY, RECORDS

EXCLUDED_SHOWN = 50
NEXT_STEP = ("a human runs the copyable_text_block command at a terminal; "
             "this server cannot approve or release")  # fmt: skip


def _preview(
    ctx: ToolContext,
    to: str,
    purpose: str,
    context: str,
    paths: list[str] | None,
    base: str | None,
    redact: bool,
) -> dict[str, Any]:
    """`oms transfer preview`, shaped to what fits one tool result."""
    data = preview_transfer(ctx.repo.top, to, purpose, context, paths or [], base, redact,
                            requested_by=ctx.requested_by).to_json()  # fmt: skip
    m = data["manifest"]
    return {"digest": data["digest"], "status": data["status"],
            "visibility": m["visibility"], "totals": m["totals"],
            "excluded": m["excluded"][:EXCLUDED_SHOWN],
            "approval_packet": data["approval_packet"],
            "evidence_seq": data["evidence_seq"]}  # fmt: skip


def register(server: MCPServer[Any], ctx: ToolContext) -> None:
    @server.tool(description="Preflight before consulting a model: destination, repository "
                 "visibility, what would leave and an approval packet for a human. Records a "
                 "signed manifest; sends nothing.", annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_model_access(to: str, purpose: str, context: str = "none",
                               paths: list[str] | None = None, base: str | None = None,
                               redact: bool = False) -> Result:  # fmt: skip
        data = await in_thread(_preview, ctx, to, purpose, context, paths, base, redact)
        return bounded({**data, "ready_to_send": False, "next_step": NEXT_STEP})

    @server.tool(description="Build and record a transfer manifest (as `oms transfer "
                 "preview`). Sends nothing.", annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_transfer_preview(to: str, purpose: str, context: str = "none",
                                   paths: list[str] | None = None, base: str | None = None,
                                   redact: bool = False) -> Result:  # fmt: skip
        return bounded(await in_thread(_preview, ctx, to, purpose, context, paths, base, redact))

    @server.tool(description="State of one transfer manifest (previewed, approved, released, "
                 "expired, blocked).", annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_transfer_status(digest: str) -> Result:
        data = (await in_thread(show_transfer, ctx.repo.top, digest)).to_json()
        return bounded({"digest": digest, "status": data["status"],
                        "summary": data["approval_packet"]["summary"],
                        "approvals": len(data["approvals"]),
                        "releases": len(data["releases"])})  # fmt: skip
