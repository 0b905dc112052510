"""oms_doctor: readiness of oms on this machine, with the pin of these tools."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from gatekeeper.agent.inside import inside_agent_sandbox, marker
from gatekeeper.gates import doctor as doctor_gate
from gatekeeper.gates.authority import AgentSandbox
from gatekeeper.mcp.actions import NextAction, listed
from gatekeeper.mcp.bounds import Result, bounded, hide_paths_in, tool_errors
from gatekeeper.mcp.context import ToolContext, in_thread
from gatekeeper.mcp.listing import listed_digest
from gatekeeper.mcp.tools import READ_ONLY


def register(server: MCPServer[Any], ctx: ToolContext) -> None:
    @server.tool(description="Readiness of oms on this machine: sandbox probe, scanners, "
                 "signing key, evidence chain, AppArmor. Contacts no provider.",
                 annotations=READ_ONLY)  # fmt: skip
    @tool_errors
    async def oms_doctor() -> Result:
        here = AgentSandbox.of(inside_agent_sandbox(), marker())
        found = await in_thread(doctor_gate.doctor, ctx.repo.top, here)
        report, ready = found.to_json(), found.ready
        report["mcp_tools_digest"] = (await listed_digest(server))[0]
        actions = [NextAction(action="fix_readiness", label="Fix what makes oms not ready",
                              description=remedy, owner="human")
                   for remedy in report.get("remedies", [])]  # fmt: skip
        # ok as on the CLI: `oms doctor` exits 0 only when ready
        return bounded(hide_paths_in({**report, "ready": ready, "next_actions": listed(actions)}),
                       ok=ready)  # fmt: skip
