"""`oms hook claude-code|codex EVENT`: the agent clients' hooks, in their own protocols.

The one command whose exit codes are the client's, not DESIGN.md's table: exit 0 with
the event's JSON (a deny, a block, context), or exit 2 with the reason on stderr, as
docs/hooks.md describes per event. No `--json` envelope: the client reads this output.
"""

from __future__ import annotations

import sys

import click

from gatekeeper.agent.inside import inside_agent_sandbox, marker
from gatekeeper.cli.options import FullHelpGroup
from gatekeeper.integrations.hooks import run_hook
from gatekeeper.integrations.hooks.events import refusal
from gatekeeper.integrations.hooks.protocol import STDIN_MAX, HookAnswer


@click.group(cls=FullHelpGroup)
def hook() -> None:
    """Agent hooks in Claude Code's and Codex's protocols: deny secrets and protected writes."""


def _answer(client: str, event: str) -> None:
    data = sys.stdin.buffer.read(STDIN_MAX + 1)
    inside = inside_agent_sandbox()
    unattended = inside and marker().get("unattended") is True
    answer = run_hook(client, event, data, in_sandbox=inside, may_allow=unattended)
    if inside:  # a worker's run: one observation outside, and the broker's answer
        from gatekeeper.integrations.hooks.observe import publish_quietly  # HTTP: inside only

        sys.stderr.write(publish_quietly(client, event, data, marker()))
        answer = _brokered(client, event, data, answer)
    sys.stdout.write(answer.stdout)
    sys.stdout.flush()
    sys.stderr.write(answer.stderr)
    sys.stderr.flush()
    sys.exit(answer.exit_code)


def _brokered(client: str, event: str, data: bytes, answer: HookAnswer) -> HookAnswer:
    """The broker's answer where the run has the hook route; the local one where it has
    none (a plain `oms agent run`); a refusal in the event's form when it cannot be asked."""
    from gatekeeper.integrations.hooks.observe import HookNotRelayed, relay

    try:
        relayed = relay(client, event, data, answer, marker())
    except HookNotRelayed as exc:
        return refusal(event, f"oms outside could not record this hook call: {exc}")
    return answer if relayed is None else relayed


@hook.command("claude-code")
@click.argument("event", metavar="EVENT")
def claude_code(event: str) -> None:
    """Answer one Claude Code hook call (its JSON on stdin) in Claude Code's protocol.

    EVENT is Claude Code's own event name: PreToolUse, PostToolUse, Stop, SubagentStop,
    SessionStart.
    """
    _answer("claude-code", event)


@hook.command("codex")
@click.argument("event", metavar="EVENT")
def codex(event: str) -> None:
    """Answer one Codex hook call (its JSON on stdin) in Codex's protocol.

    EVENT is Codex's own event name: PreToolUse, PostToolUse, Stop, SubagentStop,
    SessionStart.
    """
    _answer("codex", event)
