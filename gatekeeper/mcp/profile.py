"""Which tools `oms mcp` serves: the gatekeeper's by default, every tool on request.

A user comes for the gates (DESIGN, "Gatekeeper in front"): an agent session sees the
gates and the repo gateway; the run and orchestration tools only when the trusted base's
policy says `[mcp] tools = "all"` or the server is started with `--tools all`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from gatekeeper.errors import OmsError
from gatekeeper.gates.mark import base_policy
from gatekeeper.repo.git import Repo
from policy import PolicyError

if TYPE_CHECKING:  # the SDK is for serving: `oms mcp config` reads PROFILES only
    from mcp.server.mcpserver import MCPServer

Profile = Literal["gatekeeper", "all"]
PROFILES: tuple[Profile, ...] = ("gatekeeper", "all")
GATEKEEPER_TOOLS = frozenset({
    "oms_doctor", "oms_policy", "oms_transfer_preview", "oms_transfer_status",
    "oms_process_result", "oms_evidence_audit", "oms_repo_tree", "oms_repo_search",
    "oms_repo_read_file", "oms_git_status", "oms_git_diff",
})  # fmt: skip


def profile_for(repo: Repo, asked: Profile | None) -> Profile:
    """`asked` when given; else the base's `[mcp] tools`. A base that cannot be read (no
    default branch yet, a bad policy) gives the smaller profile: never more by failing."""
    if asked is not None:
        return asked
    try:
        return base_policy(repo)[1].policy.mcp.tools
    except (OmsError, PolicyError):
        return "gatekeeper"


def keep_profile(server: MCPServer[Any], profile: Profile) -> None:
    """Remove every tool outside `profile`: unlisted, and a call to it is an unknown tool."""
    if profile == "all":
        return
    for tool in server._tool_manager.list_tools():
        if tool.name not in GATEKEEPER_TOOLS:
            server.remove_tool(tool.name)
