"""`oms mcp`: a stdio MCP server that is a thin, bounded caller of the gates.

It parses input, calls one gate or store function, and returns a bounded result
(under 8 KiB of text; longer data is paged: `bounds`). It decides nothing and can
approve or release nothing: there is no such tool. Errors are one clean line, with no
traceback, no host path outside the repository and no secret. It serves the one
repository it was started for. The tools live in `tools/`, one module per group.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer

from gatekeeper.agent.payloads import RUN_ID_RE, run_subject
from gatekeeper.errors import UsageError
from gatekeeper.mcp.context import ToolContext
from gatekeeper.mcp.inputs import Server
from gatekeeper.mcp.listing import listed_digest
from gatekeeper.mcp.own_runs import only_own_runs
from gatekeeper.mcp.policy_cache import PolicyCache
from gatekeeper.mcp.profile import Profile, keep_profile, profile_for
from gatekeeper.mcp.tools import board, doctor, evidence, policy, repo, result, runs, transfer
from gatekeeper.repo.git import open_repo

INSTRUCTIONS = (
    "oms gates repository context and agent results. It can preview "
    "transfers and run the result gate; it cannot approve or release anything."
)
# In this order: `tools/list` lists tools as they were registered.
TOOL_GROUPS = (doctor, policy, transfer, result, evidence, repo, runs, board)
DISTRIBUTION = "oh-my-super-agent"


def oms_version() -> str:
    """The installed distribution's version (`oms --version`'s), for `serverInfo.version`."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # a source tree on the import path, never installed
        return "0+unknown"


def requested_by(environ: Mapping[str, str]) -> tuple[dict[str, Any], ...]:
    """The agent run this server answers for: `OMS_AGENT_RUN_ID`, which the broker of
    `oms agent run` sets for the `oms mcp` it starts outside. Set but malformed, it is
    refused: read as "no agent run", it would lift the restriction to the run's own runs."""
    run_id = environ.get("OMS_AGENT_RUN_ID", "")
    if not run_id:
        return ()
    if not RUN_ID_RE.fullmatch(run_id):
        raise UsageError(f"OMS_AGENT_RUN_ID is not an agent run id: {run_id[:40]!r}")
    return tuple(run_subject(run_id))


def build_server(repo_dir: Path, tools: Profile | None = None) -> MCPServer[Any]:
    """The server for the repository at `repo_dir`, serving the tools of profile `tools`
    (None: the one the base's policy names, else the gatekeeper's: `profile`)."""
    served = open_repo(repo_dir)
    ctx = ToolContext(repo=served, policies=PolicyCache(served.top),
                      requested_by=requested_by(os.environ))  # fmt: skip
    server = Server(name="oms", version=oms_version(), instructions=INSTRUCTIONS)
    for group in TOOL_GROUPS:
        group.register(server, ctx)
    keep_profile(server, profile_for(served, tools))
    only_own_runs(server, ctx)
    return server


async def tools_digest(repo_dir: Path, tools: Profile | None = None) -> tuple[str, list[str]]:
    """SHA-256 of the canonical `tools/list` result of one profile, so a host can pin the
    definitions."""
    return await listed_digest(build_server(repo_dir, tools))


def digest_for_doctor(repo_dir: Path, tools: Profile | None = None) -> str:
    """The tools digest for `oms doctor`: informational, never a reason to be "ready"
    (`digest_cache` remembers it)."""
    try:
        return anyio.run(tools_digest, repo_dir, tools)[0]
    except Exception as exc:  # reported as unavailable, never raised
        return f"unavailable: {type(exc).__name__}"


def serve(repo_dir: Path, tools: Profile | None = None) -> None:
    build_server(repo_dir, tools).run("stdio")
