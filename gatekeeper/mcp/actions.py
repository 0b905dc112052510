"""`next_actions`: who must act next on a tool's answer, and how (docs/mcp.md).

The shape follows the seed MCP spec's `next_actions` (action, label, description, owner,
blocking, required, tool, arguments). They are guidance for the client, never a grant:
an action a human owns carries the exact command for their own terminal (`command`, one
copyable line, and `argv`), absolute so that it works from any directory.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mcp.server.mcpserver import MCPServer

from gatekeeper.integrations import oms_command
from gatekeeper.mcp.bounds import hide_paths

Owner = Literal["human", "agent"]
OWNER_LABELS: Mapping[Owner, str] = {
    "human": "a human, in their own terminal (the agent cannot do this)",
    "agent": "the agent, through this server's tools",
}


def oms_argv() -> list[str]:
    """The argv prefix that runs this installation of oms (the one the installer writes)."""
    return oms_command()


def copyable(argv: Sequence[str]) -> str:
    """One shell line for `argv`; a leading `~/` (a hidden home) stays unquoted so the
    shell still expands it."""
    words = []
    for word in argv:
        if word.startswith("~/"):
            words.append("~/" + shlex.quote(word[2:]))
        else:
            words.append(shlex.quote(word))
    return " ".join(words)


@dataclass(frozen=True)
class NextAction:
    """One thing someone must do before the work can go on."""

    action: str
    label: str
    description: str
    owner: Owner
    blocking: bool = True
    required: bool = True
    argv: tuple[str, ...] = ()  # a command for the owner's terminal (human actions)
    tool: str | None = None  # or a tool of this server to call, with `arguments`
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "action": self.action, "label": self.label, "description": self.description,
            "owner": {"kind": self.owner, "label": OWNER_LABELS[self.owner]},
            "blocking": self.blocking, "required": self.required,
        }  # fmt: skip
        if self.argv:
            shown = [hide_paths(a) for a in self.argv]
            out["command"] = copyable(shown)
            out["argv"] = shown
        if self.tool is not None:
            out["tool"] = self.tool
            out["arguments"] = dict(self.arguments)
        return out


def listed(actions: Sequence[NextAction]) -> list[dict[str, Any]]:
    return [a.to_json() for a in actions]


def served(server: MCPServer[Any], actions: Sequence[NextAction]) -> list[NextAction]:
    """The actions this server can serve: a tool left out of its profile (`profile`) is never
    offered as the next call."""
    tools = server._tool_manager
    return [a for a in actions if a.tool is None or tools.get_tool(a.tool) is not None]
