"""A wrong input to any tool is one line, `field: why`: every field of every tool of both
servers (`oms mcp` and `oms conductor bridge`), given a value of a type it does not take,
is refused before the tool runs in one line that names the field, with no link and
without the value given (it may be a secret)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from support.bridge import new_session
from support.work import initialised_work

from gatekeeper.mcp.bridge import build_bridge
from gatekeeper.mcp.server import build_server
from gatekeeper.work.conductor import bridge

MARK = "wrong-input-7f3c9a"  # the value given; never echoed back
LINE = re.compile(r"^Error executing tool (?P<tool>\w+): usage: (?P<why>[^\n]+)$")
PART = re.compile(r"^(?P<field>[A-Za-z_][\w.]*): (?P<why>\S[^;]*)$")


def types_of(schema: dict[str, Any]) -> set[str]:
    """The JSON types a property's schema takes."""
    if "anyOf" in schema:
        return set().union(*(types_of(s) for s in schema["anyOf"]))
    kind = schema.get("type")
    return {kind} if isinstance(kind, str) else set(kind or ())


def wrong_for(schema: dict[str, Any]) -> Any:
    """A value of a JSON type the property does not take."""
    taken = types_of(schema)
    assert taken and not {"array", "object"} <= taken, schema
    return {"given": MARK} if "array" in taken else [MARK]


def fields_of(server: MCPServer[Any]) -> list[tuple[str, str, Any]]:
    return [(t.name, name, wrong_for(prop)) for t in server._tool_manager.list_tools()
            for name, prop in t.parameters.get("properties", {}).items()]  # fmt: skip


@pytest.fixture
def servers(git_repo: Path) -> Iterator[dict[str, MCPServer[Any]]]:
    with initialised_work(git_repo) as work:
        conductor = new_session(work)
    yield {"oms mcp": build_server(git_repo, "all"), "bridge": build_bridge(git_repo, conductor)}


def refusal(server: MCPServer[Any], tool: str, args: dict[str, Any]) -> str:
    async def go() -> str:
        with pytest.raises(ToolError) as err:
            await server.call_tool(tool, args)
        return str(err.value)

    return anyio.run(go)


def test_every_field_of_every_tool_refuses_a_wrong_type_in_one_line_naming_it(
    servers: dict[str, MCPServer[Any]],
) -> None:
    walked = 0
    for label, server in servers.items():
        for tool, field, wrong in fields_of(server):
            text = refusal(server, tool, {field: wrong})
            line = LINE.fullmatch(text)
            assert line and line["tool"] == tool, (label, tool, field, text)
            parts = [PART.fullmatch(p) for p in line["why"].split("; ")]
            assert all(parts), (label, tool, field, text)
            assert field in [p["field"] for p in parts if p], (label, tool, field, text)
            for leak in (MARK, "http", "pydantic", "input_value", "[type="):
                assert leak not in text, (label, tool, field, text)
            walked += 1
    assert walked >= 60  # both servers' fields: a walk that found nothing would pass


@pytest.mark.parametrize(
    ("tool", "args", "expected"),
    [
        ("oms_status", {"run_id": 5},
         "run_id: Input should be a valid string"),
        ("oms_status", {"detail": "all"},
         "detail: Input should be 'summary' or 'full'"),
        ("oms_fanout", {"run_id": "r-0123456789ab", "items": [3]},
         "items.0: Input should be a valid dictionary"),
        ("oms_abort", {},
         "run_id: Field required; reason: Field required"),
        ("oms_repo_read_file", {"path": "a", "offset": "later"},
         "offset: Input should be a valid integer, unable to parse string as an integer"),
    ],
)  # fmt: skip
def test_the_line_is_the_tool_then_field_and_why(
    git_repo: Path, tool: str, args: dict[str, Any], expected: str
) -> None:
    got = refusal(build_server(git_repo, "all"), tool, args)
    assert got == f"Error executing tool {tool}: usage: {expected}"


def test_each_bridge_tool_takes_every_field_of_its_request_model(
    servers: dict[str, MCPServer[Any]],
) -> None:
    """The MCP tool is the only way in: a field the bridge's request model takes (say
    prepare_dispatch's attach_from) but its tool lacks would be refused as unknown."""
    tools = {t.name: t for t in servers["bridge"]._tool_manager.list_tools()}
    assert set(tools) == set(bridge.HANDLERS)
    for name, (model, _) in bridge.HANDLERS.items():
        assert set(tools[name].parameters["properties"]) == set(model.model_fields), name
