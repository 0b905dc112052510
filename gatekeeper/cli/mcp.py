"""`oms mcp`: serve MCP over stdio for one repository, print client snippets, pin the tools."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import click

from gatekeeper.cli import render
from gatekeeper.cli.options import REPO_OPTION, FullHelpGroup
from gatekeeper.cli.render import Outcome, command
from gatekeeper.errors import OmsError
from gatekeeper.integrations import oms_command
from gatekeeper.integrations.install import claude, codex, trusted_policy
from gatekeeper.integrations.install.entries import (
    SERVER_NAME,
    McpServer,
    gate_budget_s,
    mcp_server,
)
from gatekeeper.mcp.profile import PROFILES, Profile

TOOLS_OPTION = click.option(
    "--tools", type=click.Choice(PROFILES), default=None,
    help="The tools served: gatekeeper (the gates and the repo gateway) or all (runs and "
    "orchestration too). Default: the base policy's [mcp] tools, else gatekeeper.",
)  # fmt: skip


@click.group(cls=FullHelpGroup, invoke_without_command=True)
@REPO_OPTION
@TOOLS_OPTION
@click.pass_context
def mcp(ctx: click.Context, repo: Path, tools: Profile | None) -> None:
    """Serve MCP over stdio for one repository (`oms mcp`), or print client snippets."""
    if ctx.invoked_subcommand is None:
        # The server (the MCP SDK, every tool module) only where it serves: `oms mcp
        # config` prints snippets.
        from gatekeeper.mcp.server import serve

        try:
            serve(repo, tools)
        except OmsError as err:
            # A client started it outside a repository: one line on stderr, never a
            # traceback, and nothing on stdout (the protocol's channel).
            render.emit_error(False, err.exit_code, err.kind, err.message)
            sys.exit(err.exit_code)


def _claude_add(server: McpServer) -> str:
    """`claude mcp add` at user scope: every repository, `oms mcp` serving the one it is
    started in."""
    env = [f"--env={k}={v}" for k, v in server.env]
    argv = ["claude", "mcp", "add", "--scope", "user", *env, SERVER_NAME, "--",
            server.command, *server.args]  # fmt: skip
    return shlex.join(argv)


def snippets(prefix: list[str], tool_timeout_s: int) -> dict[str, dict[str, Any]]:
    """How Claude Code and Codex start `oms mcp`, as printed: this oms by absolute path,
    `OMS_HOME` when set, no repository path (the server serves the one it is started in)."""
    installed = mcp_server(prefix)
    # -P: the current directory (a repository, the agent's ground) is never on the import path.
    source = mcp_server([str(Path(sys.executable)), "-P", "-m", "gatekeeper"])
    return {
        "claude-code": {
            "installed": _claude_add(installed),
            "source_checkout": _claude_add(source),
            ".mcp.json": {"mcpServers": {SERVER_NAME: claude.server_json(installed)}},
        },
        "codex": {
            "installed": codex.server_snippet(installed, tool_timeout_s),
            "source_checkout": codex.server_snippet(source, tool_timeout_s),
            "file": "~/.codex/config.toml",
        },
    }


@mcp.command("config")
@click.option("--client", type=click.Choice(["claude-code", "codex", "json"]), default="json",
              show_default=True)  # fmt: skip
@REPO_OPTION
@command
def mcp_config(client: str, repo: Path) -> Outcome:
    """Registration snippets for Claude Code and Codex that work as printed."""
    policy = trusted_policy(repo, need_repo=True)[1]
    every = snippets(oms_command(), gate_budget_s(policy))
    chosen = every if client == "json" else {client: every[client]}
    return Outcome({"snippets": chosen}, lines=render.snippet_lines(chosen))


@mcp.command("tools-digest")
@REPO_OPTION
@TOOLS_OPTION
@command
def mcp_tools_digest(repo: Path, tools: Profile | None) -> Outcome:
    """SHA-256 of the canonical tools/list result of one profile, to pin the tool definitions."""
    import anyio

    from gatekeeper.mcp.server import tools_digest

    digest, names = anyio.run(tools_digest, repo, tools)
    return Outcome({"tools_digest": digest, "tools": names}, lines=[digest])
