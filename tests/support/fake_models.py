"""Loopback fakes of the Anthropic Messages API and the OpenAI Responses API.

A stand-in, not a mock of oms: a real provider cannot be contacted in tests (only loopback
addresses ever are), so these play the provider for the real Claude Code and Codex CLIs.
Each fake scripts one agent turn: a tool call that runs `command` in the agent's shell (it
edits a file), then, on the request that carries that tool's result, a final text answer.
Which answer a request gets is decided from its content, never from the order of requests:
the CLIs make side calls (a session title, a pre-connect `HEAD /`).

Every request is recorded (method, path with query, headers, body) so that a test can
check what reached the "provider": the injected key, never a placeholder or a secret.
A fake listens on 127.0.0.1:<free port> and, when given one, on a unix socket too (for a
CLI in a network namespace behind a relay). Use it as a context manager; it runs in a
thread with its own event loop.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

FINAL_TEXT = "oms-fake: the edit is done"
CALL_ID = "call_oms_fake_1"
TOOL_USE_ID = "toolu_oms_fake_1"
WAIT_MCP = "WaitForMcpServers"  # Claude Code's own tool for a server still connecting


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str  # with the query string
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


# -- Anthropic Messages -------------------------------------------------------------------


def _has_tool_result(body: dict[str, Any], call: str | None = None) -> bool:
    """Whether a tool_result (of the call `call`, when given) is in the request."""
    for msg in body.get("messages", []):
        content = msg.get("content")
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result"
            and (call is None or b.get("tool_use_id") == call) for b in content
        ):  # fmt: skip
            return True
    return False


def _offers_tool(body: dict[str, Any], name: str) -> bool:
    return any(isinstance(t, dict) and t.get("name") == name for t in body.get("tools", []))


def anthropic_events(
    body: dict[str, Any], command: str, tool: str = "Bash", tool_input: dict[str, Any] | None = None
) -> list[bytes]:
    """The SSE frames answering one Messages request: Bash(command) for the main turn (or
    the tool `tool` with `tool_input`, when the request offers it), the final text once a
    tool_result is back, a short text for any side call."""
    model = body.get("model", "claude-fake")
    done = _has_tool_result(body, TOOL_USE_ID if tool_input is not None else None)
    if not done and _offers_tool(body, tool):
        block = {"type": "tool_use", "id": TOOL_USE_ID, "name": tool, "input": {}}
        given = {"command": command, "description": "oms fake step"}
        args = json.dumps(given if tool_input is None else tool_input)
        delta = {"type": "input_json_delta", "partial_json": args}
        stop_reason = "tool_use"
    elif not done and tool.startswith("mcp__") and _offers_tool(body, WAIT_MCP):
        # Its MCP server has not connected yet: wait for it, as a model would.
        block = {"type": "tool_use", "id": "toolu_oms_fake_wait", "name": WAIT_MCP, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": "{}"}
        stop_reason = "tool_use"
    else:
        block = {"type": "text", "text": ""}
        text = FINAL_TEXT if done else "oms fake title"
        delta = {"type": "text_delta", "text": text}
        stop_reason = "end_turn"
    return anthropic_frames(model, block, delta, stop_reason)


def anthropic_call(body: dict[str, Any], use_id: str, name: str,
                   args: dict[str, Any]) -> list[bytes]:  # fmt: skip
    """The SSE frames of one assistant turn that calls the tool `name` with `args`."""
    block = {"type": "tool_use", "id": use_id, "name": name, "input": {}}
    delta = {"type": "input_json_delta", "partial_json": json.dumps(args)}
    return anthropic_frames(body.get("model", "claude-fake"), block, delta, "tool_use")


def anthropic_text(body: dict[str, Any], text: str) -> list[bytes]:
    """The SSE frames of one assistant turn that only answers `text` and ends."""
    block, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": text}
    return anthropic_frames(body.get("model", "claude-fake"), block, delta, "end_turn")


def anthropic_frames(model: str, block: dict[str, Any], delta: dict[str, Any],
                     stop_reason: str) -> list[bytes]:  # fmt: skip
    start = {"type": "message_start", "message": {
        "id": "msg_oms_fake", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1}}}  # fmt: skip
    return [
        sse("message_start", start),
        sse("content_block_start", {"type": "content_block_start", "index": 0,
                                    "content_block": block}),
        sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        sse("message_delta", {"type": "message_delta", "usage": {"output_tokens": 1},
                              "delta": {"stop_reason": stop_reason, "stop_sequence": None}}),
        sse("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip


# -- OpenAI Responses ---------------------------------------------------------------------


CALL_OUTPUTS = ("function_call_output", "custom_tool_call_output")


def _has_call_output(body: dict[str, Any]) -> bool:
    items = body.get("input")
    return isinstance(items, list) and any(
        isinstance(i, dict) and i.get("type") in CALL_OUTPUTS for i in items
    )


def openai_events(
    body: dict[str, Any], command: str | None, final_text: str = FINAL_TEXT, patch: bool = False
) -> list[bytes]:
    """The SSE frames answering one Responses request: exec_command(command) first (with
    `patch`: Codex's freeform apply_patch tool given `command` as its patch), a message
    (`final_text`) once the call's output is back, or at once when `command` is None (an
    advisor or grader that only answers)."""
    if command is None or _has_call_output(body):
        item: dict[str, Any] = {"type": "message", "role": "assistant", "id": "msg_oms_fake",
                                "status": "completed",
                                "content": [{"type": "output_text", "text": final_text,
                                             "annotations": []}]}  # fmt: skip
    elif patch:
        item = {"type": "custom_tool_call", "id": "ctc_oms_fake", "call_id": CALL_ID,
                "name": "apply_patch", "input": command, "status": "completed"}  # fmt: skip
    else:
        item = {"type": "function_call", "id": "fc_oms_fake", "call_id": CALL_ID,
                "name": "exec_command", "arguments": json.dumps({"cmd": command}),
                "status": "completed"}  # fmt: skip
    done = {"type": "response.output_item.done", "output_index": 0, "item": item}
    completed = {"type": "response.completed", "response": {
        "id": "resp_oms_fake", "object": "response", "status": "completed", "output": [item],
        "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
                  "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens_details": {"reasoning_tokens": 0}}}}  # fmt: skip
    return [sse("response.output_item.done", done), sse("response.completed", completed)]


# -- the server ---------------------------------------------------------------------------

Answer = Callable[[dict[str, Any], Any], list[bytes]]


@dataclass
class FakeModel:
    """One fake provider: `answer` builds the SSE frames for a model request on `route`."""

    route: str  # "/v1/messages" or "/v1/responses"
    answer: Answer
    command: str | None
    unix_path: Path | None = None
    requests: list[Recorded] = field(default_factory=list)
    port: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _runner: web.AppRunner | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def model_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.method == "POST" and r.path.startswith(self.route)]

    def tool_outputs(self) -> list[str]:
        """What the agent's tool printed, as the CLI sent it back: the text of every
        `tool_result` block (Messages) and `function_call_output` item (Responses)."""
        found: list[str] = []
        for req in self.model_requests():
            body = req.json()
            items = [b for m in body.get("messages", []) if isinstance(m.get("content"), list)
                     for b in m["content"] if b.get("type") == "tool_result"]  # fmt: skip
            items += [i for i in body.get("input", []) if i.get("type") in CALL_OUTPUTS]
            for item in items:
                content = item.get("content", item.get("output"))
                if isinstance(content, list):
                    content = "".join(c.get("text", "") for c in content)
                found.append(str(content))
        return found

    def seen(self, text: str) -> bool:
        """Whether `text` appeared anywhere in what reached this fake (headers or bodies)."""
        needle = text.encode()
        for r in self.requests:
            if needle in r.body or any(needle in v.encode() for v in r.headers.values()):
                return True
        return False

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(Recorded(request.method, request.path_qs,
                                      {k.lower(): v for k, v in request.headers.items()},
                                      body))  # fmt: skip
        if request.method != "POST" or not request.path.startswith(self.route):
            return web.Response(status=404, text="not a model endpoint")
        frames = self.answer(json.loads(body), self.command)
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        for frame in frames:
            await resp.write(frame)
        await resp.write_eof()
        return resp

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.port = self._runner.addresses[0][1]
        if self.unix_path is not None:
            await web.UnixSite(self._runner, str(self.unix_path)).start()
            self.unix_path.chmod(0o777)  # the sandbox uid must connect

    def __enter__(self) -> FakeModel:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._thread is not None
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()


def fake_anthropic(
    command: str,
    unix_path: Path | None = None,
    *,
    tool: str = "Bash",
    tool_input: dict[str, Any] | None = None,
) -> FakeModel:
    """A fake Messages API whose scripted Bash tool call runs `command` (or, with `tool`,
    whose scripted call is that tool with `tool_input`: an MCP tool, say)."""
    answer = functools.partial(anthropic_events, tool=tool, tool_input=tool_input)
    return FakeModel("/v1/messages", answer, command, unix_path)


def fake_openai(
    command: str | None,
    unix_path: Path | None = None,
    *,
    final_text: str = FINAL_TEXT,
    patch: bool = False,
) -> FakeModel:
    """A fake Responses API whose scripted exec_command call runs `command` (None: no tool
    call; with `patch`, an apply_patch call of the patch `command`), then answers
    `final_text`."""
    answer = functools.partial(openai_events, final_text=final_text, patch=patch)
    return FakeModel("/v1/responses", answer, command, unix_path)
