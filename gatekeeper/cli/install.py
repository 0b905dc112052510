"""`oms install claude-code|codex`: wire oms into an agent client in one command."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import click

from gatekeeper.cli.options import REPO_OPTION, FullHelpGroup
from gatekeeper.cli.render import Outcome, command
from gatekeeper.integrations.install import Client, InstallRequest, Scope
from gatekeeper.integrations.install import install as run_install
from gatekeeper.text import sanitize

_WOULD = {"created": "would create", "updated": "would update", "removed": "would remove"}


@click.group(cls=FullHelpGroup)
def install() -> None:
    """Wire oms into Claude Code or Codex: MCP server, hooks and agent instructions."""


def install_lines(data: Mapping[str, Any]) -> list[str]:
    """What changed, file by file; or that nothing had to."""
    what = "uninstall" if data["uninstall"] else "install"
    head = f"oms {what} {data['client']} ({data['scope']} scope)"
    if not data["changed"]:
        done = "not installed: nothing to remove" if data["uninstall"] else "already installed"
        lines = [f"{head}: {done}; no file changed"]
    else:
        lines = [f"{head}{': dry run, nothing written' if data['dry_run'] else ''}"]
        for f in data["files"]:
            status = _WOULD.get(f["status"], f["status"]) if data["dry_run"] else f["status"]
            lines.append(f"  {status:<13} {sanitize(f['path'])}: {', '.join(f['what'])}")
    return lines + [f"note: {sanitize(n)}" for n in data["notes"]]


def _options(fn: Any) -> Any:
    fn = click.option("--uninstall", is_flag=True,
                      help="Remove exactly what oms added, nothing else.")(fn)  # fmt: skip
    fn = click.option("--dry-run", is_flag=True, help="Show the changes; write nothing.")(fn)
    fn = REPO_OPTION(fn)
    return click.option("--scope", type=click.Choice(["user", "project"]), default="user",
                        show_default=True,
                        help="user: your own config, every repository; project: files in the "
                        "repository, to commit.")(fn)  # fmt: skip


def _run(client: Client, scope: str, repo: Path, dry_run: bool, uninstall: bool) -> Outcome:
    # click.Choice has checked the scope; the cast only tells mypy so.
    request = InstallRequest(client, cast(Scope, scope), repo, dry_run, uninstall)
    data = run_install(request).to_json()
    return Outcome(data, lines=install_lines(data))


@install.command("claude-code")
@_options
@command
def claude_code(scope: str, repo: Path, dry_run: bool, uninstall: bool) -> Outcome:
    """Claude Code: .mcp.json or ~/.claude.json, settings.json hooks, CLAUDE.md."""
    return _run("claude-code", scope, repo, dry_run, uninstall)


@install.command("codex")
@_options
@command
def codex(scope: str, repo: Path, dry_run: bool, uninstall: bool) -> Outcome:
    """Codex: config.toml [mcp_servers.oms] and [[hooks.*]], AGENTS.md."""
    return _run("codex", scope, repo, dry_run, uninstall)
