"""What a tool's wrong input becomes: one line of `field: why`, for every tool of every server.

The SDK validates a call's arguments against the tool's model before the tool runs, and
reports a failure as pydantic's dump: several lines, the rejected values (the caller's
data, which may be a secret) and an `errors.pydantic.dev` link. `Server.call_tool` is the
one place where that becomes the tool error, so no tool can forget it (`oms mcp` and
`oms conductor bridge` are both this class).
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.context import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, InputRequiredResult
from pydantic import ValidationError

from gatekeeper.errors import UsageError
from gatekeeper.mcp.bounds import clean_error


def input_error(exc: ValidationError) -> UsageError:
    """`field: why` for each wrong argument, joined on one line: the location and pydantic's
    reason, never the value given nor a link."""
    why = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False):
        where = ".".join(str(part) for part in err["loc"]) or "arguments"
        why.append(f"{where}: {err['msg']}")
    return UsageError("; ".join(why) or "the arguments do not fit the tool's input schema")


class Server(MCPServer[Any]):
    """An `MCPServer` whose input errors are one clean line (`usage: field: why`)."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None
                        ) -> CallToolResult | InputRequiredResult:  # fmt: skip
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            # Chained to the ValidationError: the SDK logs its field names (never values).
            line = clean_error(input_error(cause))
            raise ToolError(f"Error executing tool {name}: {line}") from cause
