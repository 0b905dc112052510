"""oms_roles, oms_assign_roles, oms_agent_board, oms_recommend_loop, oms_pro_access: display
and configuration within policy; no authority, no provider call. Thin callers of
`gatekeeper.work.runs.board`; only oms_assign_roles writes (oms' own state and evidence)."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from gatekeeper.mcp.bounds import Result, bounded, hide_paths_in, tool_errors
from gatekeeper.mcp.context import ToolContext, in_thread
from gatekeeper.mcp.tools import READ_ONLY, RECORDS
from gatekeeper.work.runs import board

RoleMapping = Annotated[dict[str, str], Field(description="Run role (orchestrator, planner, "
                        "researcher, implementer, qa, verifier, critic) -> a [roles.<name>] "
                        "of the policy or its provider:model.")]  # fmt: skip
RunId = Annotated[str | None, Field(description="A run's id (r-<12 hex>): its lanes, gate and "
                                    "next actions; omit for the repository's.")]  # fmt: skip
IncludeArtifact = Annotated[bool, Field(description="Add `artifact` (surface, manifest, "
                                        "snapshot): a bounded table to render.")]  # fmt: skip
Goal = Annotated[str, Field(description="What the loop should achieve.")]
OptGoal = Annotated[str | None, Field(description="A local-only handoff goal for a "
                                      "no-repo-context prompt.")]  # fmt: skip
Items = Annotated[list[str] | None, Field(description="Optional; at most 20 lines.")]
MaxIterations = Annotated[int | None, Field(description="1 to 20; default: [work] "
                                            "max_attempts.")]  # fmt: skip


def _out(got: tuple[dict[str, Any], int]) -> Result:
    data, code = got
    return bounded(hide_paths_in(data), ok=code == 0)


def register(server: MCPServer[Any], ctx: ToolContext) -> None:
    top = ctx.repo.top

    @server.tool(description="Which policy role plays each run role, its provider:model, "
                 "readiness and authority, and the policy's roster. Display only.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_roles() -> Result:
        return _out(await in_thread(board.roles_view, top))

    @server.tool(description="Persist which policy role plays each run role named (only "
                 "roles the policy defines; never widens it). Records an evidence entry.",
                 annotations=RECORDS)  # fmt: skip
    @tool_errors
    async def oms_assign_roles(role_mapping: RoleMapping) -> Result:
        return _out(await in_thread(board.assign_roles, top, role_mapping))

    @server.tool(description="Agent cards from role config and readiness; with a run, its "
                 "lanes, open gate and next actions. Display only: grants and schedules "
                 "nothing.", annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_agent_board(run_id: RunId = None, include_artifact: IncludeArtifact = False
                              ) -> Result:  # fmt: skip
        return _out(await in_thread(board.agent_board, top, run_id, include_artifact))

    @server.tool(description="A loop recipe, confidence, completion-contract draft and the "
                 "runAction that would start it. No side effects: nothing runs or is sent.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_recommend_loop(goal: Goal, constraints: Items = None,
                                 acceptance_criteria: Items = None,
                                 validation_commands: Items = None, allowed_paths: Items = None,
                                 forbidden_changes: Items = None,
                                 max_iterations: MaxIterations = None) -> Result:  # fmt: skip
        return _out(await in_thread(board.recommend_loop, top, goal, constraints,
                                    acceptance_criteria, validation_commands, allowed_paths,
                                    forbidden_changes, max_iterations))  # fmt: skip

    @server.tool(description="ChatGPT Pro paths: MCP connector mode through the Secure MCP "
                 "Tunnel, a no-repo-context prompt, the transfer path. No call is made and "
                 "no context is sent.", annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_pro_access(goal: OptGoal = None, constraints: Items = None) -> Result:
        return _out(await in_thread(board.pro_access, top, goal, constraints))
