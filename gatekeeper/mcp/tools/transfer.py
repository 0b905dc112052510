"""oms_model_access, oms_transfer_preview, oms_transfer_status: the transfer gate's
preflight and state. They record manifests; none can approve or release."""

from __future__ import annotations

import re
import shlex
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from gatekeeper.errors import NotFound, UsageError
from gatekeeper.gates.transfer.preview import preview as preview_transfer
from gatekeeper.gates.transfer.state import show as show_transfer
from gatekeeper.mcp.actions import NextAction, listed, oms_argv
from gatekeeper.mcp.bounds import Result, bounded, hide_paths_in, tool_errors
from gatekeeper.mcp.context import ToolContext, in_thread
from gatekeeper.mcp.tools import READ_ONLY, RECORDS
from gatekeeper.work.runs.api import opened_runs
from gatekeeper.work.runs.store import Runs, checked_run_id

EXCLUDED_SHOWN = 50
NEXT_STEP = ("a human runs the copyable_text_block command at a terminal; "
             "this server cannot approve or release")  # fmt: skip
PURPOSE_BLOCK = "the purpose text itself contains a secret"

DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
MANIFEST_KEYS = ("destination", "visibility", "totals", "blocked", "block_reasons")

To = Annotated[str, Field(description="Destination as PROVIDER:MODEL, e.g. "
                          "anthropic:claude-sonnet.")]  # fmt: skip
Purpose = Annotated[str, Field(description="Why the context leaves; it is sent too and "
                               "scanned like the files.")]  # fmt: skip
ToOpt = Annotated[str | None, Field(description="Destination as PROVIDER:MODEL, e.g. "
                                    "anthropic:claude-sonnet (with purpose).")]  # fmt: skip
PurposeOpt = Annotated[str | None, Field(description="Why the context leaves; it is sent too "
                                         "and scanned like the files (with to).")]  # fmt: skip
RunIdOpt = Annotated[str | None, Field(description="Instead of to and purpose: a run id "
                                       "(r-<12 hex>), to read that run's latest manifest; "
                                       "records nothing.")]  # fmt: skip
ContextKind = Annotated[
    Literal["repo", "diff", "paths", "none"],
    Field(description="What leaves: the repository's files, the diff against `base`, the "
          "files named in `paths`, or nothing but the purpose."),
]  # fmt: skip
Paths = Annotated[list[str] | None, Field(description="With context=paths: repository-"
                                          "relative files or folders.")]  # fmt: skip
Base = Annotated[str | None, Field(description="With context=diff: the base ref (default: "
                                   "the default branch).")]  # fmt: skip
Redact = Annotated[bool, Field(description="Replace lines with secret findings instead of "
                               "blocking the transfer.")]  # fmt: skip
Digest = Annotated[str, Field(description="The manifest digest, sha256:<64 hex>, as a "
                              "preview returned it.")]  # fmt: skip


def approve_action(block: str) -> NextAction:
    """The packet's copyable command with this installation's absolute oms in front."""
    words = shlex.split(block)
    return NextAction(
        action="approve_transfer", label="Approve this transfer at your terminal",
        description="A human reads the packet and runs this in their own terminal (it asks "
        "there, or an autopilot rule of the policy approves); this server cannot approve.",
        owner="human", argv=(*oms_argv(), *words[1:]),
    )  # fmt: skip


def preview_actions(tool: str, args: dict[str, Any], data: dict[str, Any]) -> list[NextAction]:
    """Approve (a human) when it can be approved; else preview again with `redact: true`
    (the agent) when the files' findings are what blocks it."""
    m = data["manifest"]
    if data["status"] != "blocked":
        return [approve_action(data["approval_packet"]["copyable_text_block"])]
    if PURPOSE_BLOCK in m["block_reasons"]:
        rest = {k: v for k, v in args.items() if k != "purpose"}
        return [NextAction(action="rewrite_purpose", label="Preview again with another purpose",
                           description="The purpose text holds a secret: write it without "
                           "one and call the tool again.", owner="agent", tool=tool,
                           arguments=rest)]  # fmt: skip
    if m["totals"]["findings"] and not args.get("redact"):
        return [NextAction(action="preview_redacted", label="Preview again with redact: true",
                           description="Secret findings block it: the same preview with "
                           "those lines replaced can be approved instead.", owner="agent",
                           tool=tool, arguments={**args, "redact": True})]  # fmt: skip
    return []


def _preview(ctx: ToolContext, tool: str, args: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """`oms transfer preview`, shaped to what fits one tool result, and whether the CLI
    would exit 0 (not blocked)."""
    data = preview_transfer(ctx.repo.top, args["to"], args["purpose"], args["context"],
                            args["paths"] or [], args["base"], args["redact"],
                            requested_by=ctx.requested_by).to_json()  # fmt: skip
    m = data["manifest"]
    shown = {k: v for k, v in args.items() if v is not None}
    out = {"digest": data["digest"], "status": data["status"],
           "visibility": m["visibility"], "totals": m["totals"],
           "excluded": m["excluded"][:EXCLUDED_SHOWN],
           "approval_packet": data["approval_packet"],
           "evidence_seq": data["evidence_seq"],
           "next_actions": listed(preview_actions(tool, shown, data))}  # fmt: skip
    return out, data["status"] != "blocked"


def latest_manifest(runs: Runs, run_id: str) -> str:
    """The digest of a run's latest manifest: its open transfer gate's, else the newest one
    a `transfer_manifest` artifact or an `approval_requested` event names."""
    run = runs.get(run_id)
    g = run.gate
    if g is not None and g.kind == "transfer" and g.transfer is not None:
        return g.transfer
    found: list[tuple[int, str]] = []
    for a in runs.artifacts(run_id):
        if a.kind == "transfer_manifest":
            m = DIGEST_RE.search(runs.content(a)[:65536].decode("utf-8", "replace"))
            if m is not None:
                found.append((a.seq, m.group(0)))
    for e in runs.events(run_id):
        named = e.data.get("transfer")
        if e.kind == "approval_requested" and isinstance(named, str) and DIGEST_RE.fullmatch(named):
            found.append((e.seq, named))
    if not found:
        raise NotFound(f"run {run_id} has no transfer manifest")
    return max(found)[1]


def run_manifest(ctx: ToolContext, run_id: str) -> dict[str, Any]:
    """A run's latest manifest as `oms transfer show` reads it (nothing is recorded)."""
    checked_run_id(run_id)
    with opened_runs(ctx.repo.top) as (_, runs):
        digest = latest_manifest(runs, run_id)
    data = show_transfer(ctx.repo.top, digest).to_json()
    m = data["manifest"]
    block = data["approval_packet"]["copyable_text_block"]
    actions = [approve_action(block)] if data["status"] == "previewed" and block else []
    return {"run_id": run_id, "digest": data["digest"], "status": data["status"],
            **{k: m[k] for k in MANIFEST_KEYS if k in m},
            "excluded": (m.get("excluded") or [])[:EXCLUDED_SHOWN],
            "approval_packet": data["approval_packet"],
            "approvals": len(data["approvals"]), "releases": len(data["releases"]),
            "next_actions": listed(actions)}  # fmt: skip


def register(server: MCPServer[Any], ctx: ToolContext) -> None:
    @server.tool(description="Preflight before consulting a model: destination, repository "
                 "visibility, what would leave and an approval packet for a human. Records a "
                 "signed manifest; sends nothing.", annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_model_access(to: To, purpose: Purpose, context: ContextKind = "none",
                               paths: Paths = None, base: Base = None,
                               redact: Redact = False) -> Result:  # fmt: skip
        args = {"to": to, "purpose": purpose, "context": context, "paths": paths, "base": base,
                "redact": redact}  # fmt: skip
        out, ok = await in_thread(_preview, ctx, "oms_model_access", args)
        return bounded({**out, "ready_to_send": False, "next_step": NEXT_STEP}, ok=ok)

    @server.tool(description="Build and record a transfer manifest (as `oms transfer "
                 "preview`), given to and purpose; or, given only run_id, read that run's "
                 "latest manifest and its state, recording nothing. Sends nothing.",
                 annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_transfer_preview(to: ToOpt = None, purpose: PurposeOpt = None,
                                   context: ContextKind = "none", paths: Paths = None,
                                   base: Base = None, redact: Redact = False,
                                   run_id: RunIdOpt = None) -> Result:  # fmt: skip
        if run_id is not None:
            if to is not None or purpose is not None:
                raise UsageError("give run_id (read a run's manifest) or to and purpose "
                                 "(a new preview), not both")  # fmt: skip
            if context != "none" or paths is not None or base is not None or redact:
                raise UsageError("context, paths, base and redact go with a new preview, "
                                 "not with run_id")  # fmt: skip
            return bounded(hide_paths_in(await in_thread(run_manifest, ctx, run_id)))
        if to is None or purpose is None:
            raise UsageError("give to and purpose (a new preview) or run_id (a run's "
                             "latest manifest)")  # fmt: skip
        args = {"to": to, "purpose": purpose, "context": context, "paths": paths, "base": base,
                "redact": redact}  # fmt: skip
        out, ok = await in_thread(_preview, ctx, "oms_transfer_preview", args)
        return bounded(out, ok=ok)

    @server.tool(description="State of one transfer manifest (previewed, approved, released, "
                 "expired, blocked).", annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_transfer_status(digest: Digest) -> Result:
        data = (await in_thread(show_transfer, ctx.repo.top, digest)).to_json()
        block = data["approval_packet"]["copyable_text_block"]
        actions = [approve_action(block)] if data["status"] == "previewed" and block else []
        return bounded({"digest": digest, "status": data["status"],
                        "summary": data["approval_packet"]["summary"],
                        "approvals": len(data["approvals"]),
                        "releases": len(data["releases"]),
                        "next_actions": listed(actions)})  # fmt: skip
