"""The run tools (oms_plan, oms_orchestrate, oms_consult, oms_summon, oms_fanout,
oms_continue, oms_loop, oms_reconcile, oms_abort, oms_capture_evidence): thin callers of
`gatekeeper.work.runs`, one function each, as `oms run …` renders the same function.

Inputs are thehood's (snake_case) without `repo_path`: the server serves its one
repository. None of them can approve: `oms_continue` and `oms_reconcile` pass `via="mcp"`,
and an `approval: "approve"` comes back as `refused` with the next action naming what the
human runs at their terminal (the host must see that, not only an error line).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from gatekeeper.mcp.bounds import Result, bounded, hide_paths_in, tool_errors
from gatekeeper.mcp.context import ToolContext, in_thread
from gatekeeper.mcp.tools import RECORDS
from gatekeeper.work.runs import actions, api, capture, flow, guests, reconcile
from gatekeeper.work.runs.gates import ApprovalRefused

Goal = Annotated[str, Field(description="What the run is for (data: never argv or shell).")]
Constraints = Annotated[list[str] | None, Field(description="Constraints the roles are "
                                                "given, at most 20.")]  # fmt: skip
AutoLoop = Annotated[bool, Field(description="Advance the new run as oms_loop does (it never "
                                 "approves; autopilot rules of policy still apply).")]  # fmt: skip
MaxCycles = Annotated[int | None, Field(description="With auto_loop: cycles at most "
                                        "(default 8).", ge=1)]  # fmt: skip
MaxSteps = Annotated[int | None, Field(description="With auto_loop: steps per cycle at most "
                                       "(default 10).", ge=1)]  # fmt: skip
RunId = Annotated[str, Field(description="The run id, r-<12 hex>.")]
Agent = Annotated[str | None, Field(description="A policy role name or its provider:model, "
                                    "for this call only (the run's mapping stays).")]  # fmt: skip
RunRoleMap = Annotated[dict[str, str] | None,
                       Field(description="Run role -> a policy role name or provider:model; "
                             "only roles the default branch's policy defines.")]  # fmt: skip
ModeArg = Annotated[Literal["plan", "research", "implement", "review"],
                    Field(description="What the run does.")]  # fmt: skip
GuestRole = Annotated[Literal["orchestrator", "planner", "researcher", "qa", "critic"],
                      Field(description="The read-only guest role.")]  # fmt: skip
SummonRole = Annotated[Literal["orchestrator", "planner", "researcher", "qa", "verifier",
                               "critic"], Field(description="The read-only role.")]  # fmt: skip
SummonKindArg = Annotated[Literal["review", "qa", "critique", "research", "plan"] | None,
                          Field(description="What kind of answer is asked for.")]  # fmt: skip
Brief = Annotated[str, Field(description="What the role is asked.")]
Persona = Annotated[str | None, Field(description="A short role brief.")]
EvidenceRefs = Annotated[list[str] | None, Field(description="Artifact refs of this run the "
                                                 "role is shown.")]  # fmt: skip
Items = Annotated[list[dict[str, Any]], Field(description="Summons: each {role, brief, "
                                              "agent?, kind?, persona?, constraints?, "
                                              "evidence_refs?}; at most 8 run.")]  # fmt: skip
MaxItems = Annotated[int | None, Field(description="At most this many items (policy may "
                                       "lower it; the hard cap is 8).", ge=1)]  # fmt: skip
ApprovalArg = Annotated[Literal["approve", "reject", "revise", "none"],
                        Field(description="reject, revise (with message) or none. approve "
                              "is refused here: a human approves at a terminal.")]  # fmt: skip
Message = Annotated[str | None, Field(description="With revise: what to change; with reject: "
                                      "why.")]  # fmt: skip
Reason = Annotated[str, Field(description="Why the run is aborted (recorded).")]
ReconcileRole = Annotated[Literal["planner", "orchestrator"] | None,
                          Field(description="Who reconciles (default: planner).")]  # fmt: skip
Check = Annotated[str, Field(description="A check name of the default branch's plan.")]

Out = tuple[dict[str, Any], int]


def ran(out: Out) -> Result:
    """A run function's answer as a tool result: paths hidden, bounded, `ok` as exit 0."""
    data, code = out
    return bounded(hide_paths_in(data), ok=code == 0)


def refused_approval(exc: ApprovalRefused, run_id: str) -> Result:
    """`approve` asked for over MCP: what the human must run, as a result the host reads."""
    shown = (exc.data or {}).get("next_actions") or [actions.approve_command(run_id).to_json()]
    return bounded(hide_paths_in({"refused": exc.message, "run_id": run_id,
                                  "next_actions": list(shown)}), ok=False)  # fmt: skip


async def deciding(fn: Callable[..., Out], run_id: str, *args: Any, **kwargs: Any) -> Result:
    try:
        return ran(await in_thread(lambda: fn(*args, **kwargs)))
    except ApprovalRefused as exc:
        return refused_approval(exc, run_id)


def register(server: MCPServer[Any], ctx: ToolContext) -> None:
    repo = ctx.repo.top
    asker = ctx.requested_by  # the agent run this server answers for: named by what it starts

    @server.tool(description="Create a read-only plan run: the planner answers; the plan is a "
                 "run artifact, its summary inline. auto_loop advances it (never approving).",
                 annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_plan(goal: Goal, orchestrator: Agent = None, constraints: Constraints = None,
                       auto_loop: AutoLoop = False, max_cycles: MaxCycles = None,
                       max_steps_per_cycle: MaxSteps = None) -> Result:  # fmt: skip
        return ran(await in_thread(lambda: api.plan(repo, goal, orchestrator, constraints,
                                                    auto_loop, max_cycles, max_steps_per_cycle,
                                                    requested_by=asker)))  # fmt: skip

    @server.tool(description="Start a run in a mode (plan, research, implement, review). An "
                 "implement run plans, stops at a plan gate, then goes through oms' lease, "
                 "dispatch, receipt and verify; it ends on human hold at best.",
                 annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_orchestrate(goal: Goal, mode: ModeArg = "implement",
                              role_mapping: RunRoleMap = None, constraints: Constraints = None,
                              auto_loop: AutoLoop = False, max_cycles: MaxCycles = None,
                              max_steps_per_cycle: MaxSteps = None) -> Result:  # fmt: skip
        return ran(await in_thread(lambda: api.orchestrate(repo, goal, mode, role_mapping,
                                                           constraints, auto_loop, max_cycles,
                                                           max_steps_per_cycle,
                                                           requested_by=asker)))  # fmt: skip

    @server.tool(description="Ask one read-only guest role now, as a run of its own: its "
                 "markdown answer is an artifact, a bounded summary inline. An external role "
                 "stops at awaiting_approval until a human approves its transfer manifest.",
                 annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_consult(goal: Goal, role: GuestRole, agent: Agent = None,
                          constraints: Constraints = None) -> Result:  # fmt: skip
        return ran(await in_thread(lambda: api.consult(repo, goal, role, agent, constraints,
                                                       requested_by=asker)))  # fmt: skip

    @server.tool(description="Summon a read-only, advisory role onto an existing run (records "
                 "agent_summoned and a typed handoff); its answer satisfies no gate.",
                 annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_summon(run_id: RunId, role: SummonRole, brief: Brief, agent: Agent = None,
                         kind: SummonKindArg = None, persona: Persona = None,
                         constraints: Constraints = None,
                         evidence_refs: EvidenceRefs = None) -> Result:  # fmt: skip
        return ran(await in_thread(lambda: guests.summon(repo, run_id, role, brief, agent, kind,
                                                         persona, constraints,
                                                         evidence_refs)))  # fmt: skip

    @server.tool(description="Up to 8 read-only summons on a run, one after another (policy "
                 "may lower the cap). A transfer gate stops the group; a malformed answer "
                 "fails its item only. Sidecar evidence: it satisfies no gate.",
                 annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_fanout(run_id: RunId, items: Items, max_items: MaxItems = None) -> Result:
        return ran(await in_thread(lambda: guests.fanout(repo, run_id, items, max_items)))

    @server.tool(description="Continue a run to its next gate or end. approval: none, reject, "
                 "or revise with a message. This server never approves: approve is refused "
                 "with the command a human runs at their terminal.",
                 annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_continue(run_id: RunId, approval: ApprovalArg = "none",
                           message: Message = None) -> Result:  # fmt: skip
        return await deciding(flow.continue_run, run_id, repo, run_id, approval, message,
                              via="mcp")  # fmt: skip

    @server.tool(description="Advance a run until terminal, a manual gate, no progress or the "
                 "cycle cap (default 8 x 10 steps). Never approves.",
                 annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_loop(run_id: RunId, max_cycles: MaxCycles = None,
                       max_steps_per_cycle: MaxSteps = None) -> Result:  # fmt: skip
        return ran(await in_thread(lambda: flow.loop_run(repo, run_id, max_cycles,
                                                         max_steps_per_cycle)))  # fmt: skip

    @server.tool(description="Reconcile a completed run from a progress packet: its transfer "
                 "manifest first (pauses for a human's approval when it leaves), then the "
                 "planner's answer as a reconciliation artifact. Never approves.",
                 annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_reconcile(run_id: RunId, role: ReconcileRole = None,
                            approval: ApprovalArg = "none",
                            message: Message = None) -> Result:  # fmt: skip
        return await deciding(reconcile.reconcile, run_id, repo, run_id, role, approval,
                              message, via="mcp", requested_by=asker)  # fmt: skip

    @server.tool(description="Abort a run for good, with a reason (recorded).",
                 annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_abort(run_id: RunId, reason: Reason) -> Result:
        return ran(await in_thread(lambda: flow.abort(repo, run_id, reason)))

    @server.tool(description="Run a named check of the default branch's plan in the sandbox "
                 "on the run's workspace and attach its output: runtime-captured validation "
                 "evidence, the only kind a runtime QA gate accepts.",
                 annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_capture_evidence(run_id: RunId, check: Check) -> Result:
        return ran(await in_thread(lambda: capture.capture(repo, run_id, check)))
