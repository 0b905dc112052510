"""oms_process_result, oms_runs, oms_status: the result gate and what it recorded."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from evidence import Entry, EvidenceStore
from gatekeeper.agent.records import recorded_base
from gatekeeper.errors import OmsError, Unavailable
from gatekeeper.mcp.actions import listed, served
from gatekeeper.mcp.bounds import Result, bounded, clean_error, hide_paths_in, tool_errors
from gatekeeper.mcp.context import ToolContext, in_thread
from gatekeeper.mcp.tools import READ_ONLY, RECORDS
from gatekeeper.mcp.tools.verdicts import unavailable_actions, verdict_actions
from gatekeeper.repo.refs import resolve_commit
from gatekeeper.work.runs import api as runs_api

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
RunIdOpt = Annotated[str | None, Field(description="A run id (r-<12 hex>): that run's status "
                                       "instead of the repository's.")]  # fmt: skip
Detail = Annotated[Literal["summary", "full"],
                   Field(description="With run_id: summary (compact), or full only when the "
                         "whole record is needed.")]  # fmt: skip
DetailOpt = Annotated[Literal["summary", "full"] | None,
                      Field(description="work_runs rows: summary (default) or full.")]  # fmt: skip


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


def _work_runs(ctx: ToolContext, limit: int, detail: str) -> dict[str, Any]:
    """The newest runs (`oms run list`) beside today's entries; a repository whose runs
    cannot be opened (no policy on its default branch) still gets today's answer."""
    try:
        return {"work_runs": runs_api.list_runs(ctx.repo.top, limit, detail)[0]["runs"]}
    except OmsError as exc:
        return {"work_runs": [], "work_runs_problem": clean_error(exc)}


def _verdict(ctx: ToolContext, candidate: str, ticket: str | None,
             attempt: int | None) -> dict[str, Any]:  # fmt: skip
    """The gate's verdict with each check's output cut to its tail."""
    # The gate (sandbox runner, scanners, toolchains) where it runs: building the server
    # (`oms mcp`, doctor's tools digest) lists this tool without it.
    from gatekeeper.gates.result import pipeline as result_gate

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
        actions = served(server, verdict_actions(ctx.repo.top, out, asked))
        # ok as on the CLI: exit 0 only for READY_FOR_HUMAN
        return bounded({**out, "next_actions": listed(actions)},
                       ok=out["decision"] == "READY_FOR_HUMAN")  # fmt: skip

    @server.tool(description="Recent result-gate verdicts and transfers, newest first (runs), "
                 "and the newest work runs (work_runs: plan, orchestrate, consult, "
                 "reconcile).", annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_runs(limit: RunsLimit = 20, detail: DetailOpt = None) -> Result:
        limit = max(1, min(limit, MAX_RUNS))
        runs = await in_thread(_runs, ctx, RUN_KINDS, limit)
        work = await in_thread(_work_runs, ctx, limit, detail or "summary")
        return bounded(hide_paths_in({"runs": runs, **work}))

    @server.tool(description="Compact status: HEAD, evidence entries, the last verdict; with "
                 "run_id, that run's state, counts, recent events, artifacts and "
                 "next_actions (detail: full only on request).",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_status(run_id: RunIdOpt = None, detail: Detail = "summary") -> Result:
        if run_id is None:
            return bounded(await in_thread(_status, ctx))
        data, code = await in_thread(runs_api.status, ctx.repo.top, run_id, detail)
        return bounded(hide_paths_in(data), ok=code == 0)
