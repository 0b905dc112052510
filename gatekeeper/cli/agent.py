"""`oms agent run`: an agent CLI contained, its provider traffic brokered, its commit a run ref."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import click

from gatekeeper.cli.options import REPO_OPTION, FullHelpGroup
from gatekeeper.cli.render import Outcome, agent_lines, command
from gatekeeper.errors import EXIT_FAILED


@click.group(cls=FullHelpGroup)
def agent() -> None:
    """Run an agent CLI contained: its own workspace, no authority, brokered egress."""


@agent.command("run", context_settings={"ignore_unknown_options": True})
@REPO_OPTION
@click.option("--agent", "kind", type=click.Choice(["claude-code", "codex", "command"]),
              default="command", show_default=True,
              help="What CMD is (claude-code, codex: oms writes a per-run config).")  # fmt: skip
@click.option("--egress", type=click.Choice(["none", "api", "tunnel"]),
              help="none: no network; api: only the providers' model APIs, through oms' "
              "broker (scanned, redacted, recorded); tunnel: opaque CONNECT to provider "
              "hosts, for subscription logins. Default: api for claude-code/codex with a "
              "key, else none.")  # fmt: skip
@click.option("--base", help="Clone this commit instead of HEAD (the run's recorded base).")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
@command
def agent_run(repo: Path, kind: str, egress: str | None, base: str | None,
              cmd: tuple[str, ...]) -> Outcome:  # fmt: skip
    """Run CMD in the agent profile on a fresh clone; its commit comes back as refs/oms/runs/ID."""
    # With --json the agent's output is captured (bounded) so that stdout stays one object.
    capture = bool(click.get_current_context().params.get("as_json"))
    from gatekeeper.agent.run import AgentRunRequest  # on use: `--help` imports no sandbox
    from gatekeeper.agent.run import agent_run as run_agent

    req = AgentRunRequest(repo_dir=repo, cmd=cmd, agent=cast(Any, kind),
                          egress=cast(Any, egress), base_ref=base, capture=capture)  # fmt: skip
    data = run_agent(req).to_json()
    code = 0 if data["exit_code"] == 0 else EXIT_FAILED
    return Outcome(data, code=code, lines=agent_lines(data))
