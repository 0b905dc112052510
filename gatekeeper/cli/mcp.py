"""`oms mcp`: serve MCP over stdio for one repository, print client snippets, pin the tools."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import anyio
import click

from gatekeeper.cli import render
from gatekeeper.cli.options import REPO_OPTION
from gatekeeper.cli.render import Outcome, command
from gatekeeper.mcp.server import serve, tools_digest
from gatekeeper.repo.git import open_repo


@click.group(invoke_without_command=True)
@REPO_OPTION
@click.pass_context
def mcp(ctx: click.Context, repo: Path) -> None:
    """Serve MCP over stdio for one repository (`oms mcp`), or print client snippets."""
    if ctx.invoked_subcommand is None:
        serve(repo)


def snippets(top: str, python: str) -> dict[str, dict[str, Any]]:
    """How Claude Code and Codex start `oms mcp` for the repository at `top`."""
    installed = ["oms", "mcp", "--repo", top]
    # -P: the current directory (a repository, the agent's ground) is never on the import path.
    source = [python, "-P", "-m", "gatekeeper", "mcp", "--repo", top]
    return {
        "claude-code": {
            "installed": f"claude mcp add oms -- {shlex.join(installed)}",
            "source_checkout": f"claude mcp add oms -- {shlex.join(source)}",
            ".mcp.json": {"mcpServers": {"oms": {"command": "oms", "args": installed[1:]}}},
        },
        "codex": {
            "installed": "[mcp_servers.oms]\n"
            f"command = {json.dumps('oms')}\n"
            f"args = {json.dumps(installed[1:])}\n",
            "source_checkout": "[mcp_servers.oms]\n"
            f"command = {json.dumps(python)}\n"
            f"args = {json.dumps(source[1:])}\n",
            "file": "~/.codex/config.toml",
        },
    }


@mcp.command("config")
@click.option("--client", type=click.Choice(["claude-code", "codex", "json"]), default="json",
              show_default=True)  # fmt: skip
@REPO_OPTION
@command
def mcp_config(client: str, repo: Path) -> Outcome:
    """Registration snippets for Claude Code and Codex (installed package and source checkout)."""
    every = snippets(str(open_repo(repo).top), str(Path(sys.executable)))
    chosen = every if client == "json" else {client: every[client]}
    return Outcome({"snippets": chosen}, lines=render.snippet_lines(chosen))


@mcp.command("tools-digest")
@REPO_OPTION
@command
def mcp_tools_digest(repo: Path) -> Outcome:
    """SHA-256 of the canonical tools/list result, to pin the tool definitions."""
    digest, names = anyio.run(tools_digest, repo)
    return Outcome({"tools_digest": digest, "tools": names}, lines=[digest])
