"""oms_process_result, oms_runs, oms_status: the result gate and what it recorded."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from evidence import Entry, EvidenceStore
from gatekeeper.agent.records import recorded_base
from gatekeeper.errors import Unavailable
from gatekeeper.gates.result import pipeline as result_gate
from gatekeeper.mcp.actions import listed
from gatekeeper.mcp.bounds import Result, bounded, tool_errors
from gatekeeper.mcp.context import ToolContext, in_thread
from gatekeeper.mcp.tools import READ_ONLY, RECORDS
from gatekeeper.mcp.tools.verdicts import unavailable_actions, verdict_actions
from gatekeeper.repo.refs import resolve_commit

TAIL_CHARS = 600  # of each check's stdout and stderr
RUN_KINDS = ("result", "transfer.preview", "transfer.release")
SHOWN_KEYS = ("decision", "candidate", "digest", "destination", "bytes")
MAX_RUNS = 50

Candidate = Annotated[str, Field(description="The agent's commit to judge: a commit id or "
                                 "any ref (branch, tag, refs/oms/runs/<id>).")]  # fmt: skip
Ticket = Annotated[str | None, Field(description="Ticket id, recorded in evidence.")]
Attempt = Annotated[int | None, Field(description="Attempt number (1 or more), recorded "
                                      "in evidence.")]  # fmt: skip
RunsLimit = Annotated[int, Field(description=f"How many entries, newest first (1 to {MAX_RUNS}).")]


def _row(e: Entry) -> dict[str, Any]:
    """The few fields of an entry that say what it was about."""
    return {"seq": e.seq, "kind": e.kind, "time": e.time,
            **{k: e.data[k] for k in SHOWN_KEYS if k in e.data}}  # fmt: skip


def recent(store: EvidenceStore, kinds: tuple[str, ...], limit: int) -> list[dict[str, Any]]:
    """The newest `limit` entries of `kinds`, newest first."""
    newest_first = store.entries(kinds)[::-1]  # one read of the log, in log order
    return [_row(e) for e in newest_first[:limit]]


def _runs(ctx: ToolContext, kinds: tuple[str, ...], limit: int) -> list[dict[str, Any]]:
    return recent(ctx.store(), kinds, limit)


def _status(ctx: ToolContext) -> dict[str, Any]:
    head = resolve_commit(ctx.repo.top, "HEAD")
    store = ctx.store()
    last = recent(store, ("result",), 1)
    return {"head": head, "evidence_entries": store.head(),
            "last_verdict": last[0] if last else None}  # fmt: skip


def _verdict(ctx: ToolContext, candidate: str, ticket: str | None,
             attempt: int | None) -> dict[str, Any]:  # fmt: skip
    """The gate's verdict with each check's output cut to its tail."""
    base = recorded_base(ctx.repo, candidate)  # an agent run's: from evidence, not the caller
    verdict = result_gate.process_result(ctx.repo.top, candidate, base, ticket, attempt,
                                         requested_by=ctx.requested_by)  # fmt: skip
    out = verdict.to_json()
    for c in out["checks"]:
        c["stdout_tail"] = c["stdout_tail"][-TAIL_CHARS:]
        c["stderr_tail"] = c["stderr_tail"][-TAIL_CHARS:]
    return out


def register(server: MCPServer[Any], ctx: ToolContext) -> None:
    # No base: the caller (an agent) never chooses what the candidate is compared with.
    @server.tool(description="Run the result gate on a commit: the default branch's plan in the "
                 "sandbox, both secret scanners, signed evidence. Ends at READY_FOR_HUMAN at best; "
                 "never merges or pushes.", annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_process_result(candidate: Candidate, request: Context, ticket: Ticket = None,
                                 attempt: Attempt = None) -> Result:  # fmt: skip
        # `request` (the SDK's Context, known by its type) carries progress; not in the schema
        await request.report_progress(0, 3, "resolving and scanning")
        asked = {"candidate": candidate, "ticket": ticket, "attempt": attempt}
        try:
            out = await in_thread(_verdict, ctx, candidate, ticket, attempt)
        except Unavailable as exc:
            await request.report_progress(3, 3, "unavailable")
            recorded = exc.data or {}
            data: dict[str, Any] = {k: recorded[k] for k in ("decision", "reasons", "evidence_seq")
                                    if k in recorded}  # fmt: skip
            data["next_actions"] = listed(unavailable_actions(ctx.repo.top, exc, asked))
            # The same refusal with only what fits one result, and what to do about it.
            raise Unavailable(str(exc), data=data) from exc
        await request.report_progress(3, 3, out["decision"])
        actions = verdict_actions(ctx.repo.top, out, asked)
        # ok as on the CLI: exit 0 only for READY_FOR_HUMAN
        return bounded({**out, "next_actions": listed(actions)},
                       ok=out["decision"] == "READY_FOR_HUMAN")  # fmt: skip

    @server.tool(description="Recent result-gate verdicts and transfers, newest first.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_runs(limit: RunsLimit = 20) -> Result:
        limit = max(1, min(limit, MAX_RUNS))
        return bounded({"runs": await in_thread(_runs, ctx, RUN_KINDS, limit)})

    @server.tool(description="Compact status: HEAD, evidence entries, the last verdict.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_status() -> Result:
        return bounded(await in_thread(_status, ctx))
