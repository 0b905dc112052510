"""oms_read_artifact, oms_evidence_audit: bounded reads of the evidence store."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from evidence.audit import audit
from gatekeeper.errors import UsageError
from gatekeeper.mcp.bounds import PAGE_BYTES, Result, bounded, hide_paths_in, page, tool_errors
from gatekeeper.mcp.context import ToolContext, in_thread
from gatekeeper.mcp.tools import READ_ONLY, Offset
from gatekeeper.work.runs import api as runs_api

Seq = Annotated[int | None, Field(description="The evidence entry's seq (e.g. a verdict's "
                                  "evidence_seq), with digest.")]  # fmt: skip
BlobDigest = Annotated[str | None, Field(description="A blob digest that entry references, "
                                         "sha256:<64 hex> (e.g. a check's "
                                         "stderr_blob).")]  # fmt: skip
RunIdOpt = Annotated[str | None, Field(description="Or a run id (r-<12 hex>), with ref.")]
Ref = Annotated[str | None, Field(description="An artifact ref recorded on that run "
                                  "(e.g. plan-1).")]  # fmt: skip
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


def run_artifact_page(ctx: ToolContext, run_id: str, ref: str, offset: int,
                      limit: int) -> dict[str, Any]:  # fmt: skip
    """A page of an artifact recorded on run `run_id` (`oms run artifact`), and of nothing
    else: the function reads at most the page's bytes, this cuts it to what fits."""
    budget = min(max(1, limit), PAGE_BYTES)
    start = max(0, offset)
    data, _ = runs_api.read_artifact(ctx.repo.top, run_id, ref, start, budget)
    text = data["text"]
    got = page(text, 0, "text", budget)  # JSON escaping may make the bytes read too many
    if len(got.chunk) == len(text):
        nxt = data["next_offset"]
    else:
        nxt = start + len(got.chunk.encode("utf-8"))
    return {**data, "text": got.chunk, "next_offset": nxt,
            "truncated": nxt is not None}  # fmt: skip


def chosen_read(seq: int | None, digest: str | None, run_id: str | None,
                ref: str | None) -> str:  # fmt: skip
    """Which read is asked for: (seq, digest) or (run_id, ref), exactly one of them whole."""
    by_entry = seq is not None or digest is not None
    by_run = run_id is not None or ref is not None
    if by_entry == by_run:
        raise UsageError("give seq and digest (an evidence blob) or run_id and ref (a run's "
                         "artifact), not both and not neither")  # fmt: skip
    if by_entry and (seq is None or digest is None):
        raise UsageError("seq and digest go together")
    if by_run and (run_id is None or ref is None):
        raise UsageError("run_id and ref go together")
    return "entry" if by_entry else "run"


def register(server: MCPServer[Any], ctx: ToolContext) -> None:
    @server.tool(
        description="Read part of an evidence blob that an entry references (by the "
        "entry's seq and the blob digest), or of an artifact recorded on a run (by run_id "
        "and ref), and nothing else.",
        annotations=READ_ONLY,
    )
    @tool_errors
    async def oms_read_artifact(seq: Seq = None, digest: BlobDigest = None, offset: Offset = 0,
                                limit: Limit = 6000, run_id: RunIdOpt = None,
                                ref: Ref = None) -> Result:  # fmt: skip
        if chosen_read(seq, digest, run_id, ref) == "entry":
            assert seq is not None and digest is not None
            return bounded(await in_thread(artifact_page, ctx, seq, digest, offset, limit))
        assert run_id is not None and ref is not None
        got = await in_thread(run_artifact_page, ctx, run_id, ref, offset, limit)
        return bounded(hide_paths_in(got))

    @server.tool(description="Audit the evidence log offline (chain, Merkle root, checkpoint, "
                 "witness, blobs).", annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_evidence_audit() -> Result:
        report = (await in_thread(audit, ctx.audit_store())).to_json()
        # ok as on the CLI: `oms evidence audit` exits 0 only when the log is intact
        return bounded(hide_paths_in(report), ok=report["intact"] is True)
