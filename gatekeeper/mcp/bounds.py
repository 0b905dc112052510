"""What may leave the server in one tool result: bounded, paged, with no host path.

Every tool returns a `Result` (`{ok, truncated, data}`) as compact JSON text (and as
structured content) under `MAX_RESULT_BYTES`; `ok` is what the CLI's exit code 0 means;
long text is paged with `offset`/`next_offset`; an error is one clean line without
traceback, `$OMS_HOME` or the home directory (docs/mcp.md).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ParamSpec

import pydantic_core
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict

from evidence import state_root
from gatekeeper.errors import OmsError, classify
from gatekeeper.text import sanitize

MAX_RESULT_BYTES = 7600  # of the compact JSON text sent, under 8 KiB
PAGE_BYTES = 5000  # JSON-encoded bytes of text per page (results stay under 8 KiB)
ERROR_CHARS = 400
LINE_CHARS = 300
CUT_NOTE = "[cut: too long for one tool result; use the CLI or a paged tool]"
P = ParamSpec("P")


class Result(BaseModel):
    """Every tool's structured output: a compact JSON document as `data`."""

    # Frozen only: extra="forbid" would add additionalProperties to the output schema
    # and so change the tools digest that hosts pin.
    model_config = ConfigDict(defer_build=True, frozen=True)

    ok: bool
    truncated: bool
    data: dict[str, Any]


def hide_paths(text: str) -> str:
    """`$OMS_HOME` and `~` in place of their real paths: a client learns neither."""
    root = state_root()
    for secret_path, shown in (
        (os.path.realpath(root), "$OMS_HOME"),
        (str(root), "$OMS_HOME"),
        (os.path.expanduser("~"), "~"),
    ):
        if len(secret_path) > 1:
            text = text.replace(secret_path, shown)
    return text


def hide_paths_in(value: Any) -> Any:
    """`value` (JSON-shaped) with `hide_paths` applied to every string in it."""
    if isinstance(value, str):
        return hide_paths(value)
    if isinstance(value, dict):
        return {k: hide_paths_in(v) for k, v in value.items()}
    if isinstance(value, list):
        return [hide_paths_in(v) for v in value]
    return value


def clean_error(exc: BaseException) -> str:
    """`kind: first line`, paths hidden, control characters neutralised, bounded."""
    known = classify(exc)
    kind = known[1] if known else "internal"
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return sanitize(f"{kind}: {hide_paths(text)}", limit=ERROR_CHARS)


def sanitize_lines(text: str) -> list[str]:
    return [sanitize(line, limit=LINE_CHARS) for line in text.splitlines()]


def compact(result: Result) -> str:
    """The text content of a result: JSON without indentation or spaces."""
    return pydantic_core.to_json(result).decode()


def _sent_size(result: Result) -> int:
    """Bytes of the text content sent for a result."""
    return len(compact(result).encode())


# Keys a cut keeps: what the caller must do next is never replaced by the cut note.
KEPT = frozenset({"next_actions"})


def bounded(data: dict[str, Any], ok: bool = True) -> Result:
    """The result, or, when it would exceed the bound, the result with its largest fields
    replaced by a note (tools that page keep their pages under the bound themselves).
    `ok` is what exit code 0 means for the same command on the CLI."""
    result = Result(ok=ok, truncated=bool(data.get("truncated", False)), data=data)
    if _sent_size(result) <= MAX_RESULT_BYTES:
        return result
    cut = dict(data)
    by_size = sorted(cut, key=lambda k: -len(json.dumps(cut[k], ensure_ascii=False)))
    for key in [k for k in by_size if k not in KEPT] + [k for k in by_size if k in KEPT]:
        cut[key] = CUT_NOTE
        result = Result(ok=ok, truncated=True, data=cut)
        if _sent_size(result) <= MAX_RESULT_BYTES:
            break
    return result


def answer(result: Result) -> CallToolResult:
    """What goes on the wire: the compact JSON text and the same document as structured
    content (the SDK's own conversion would indent the text)."""
    return CallToolResult(content=[TextContent(type="text", text=compact(result))],
                          structured_content=result.model_dump(mode="json"))  # fmt: skip


def refused(exc: OmsError) -> CallToolResult:
    """A refusal that says what to do next: `isError` with its one clean line as text, and
    `{ok: false, truncated, data}` (the refusal's data, with `next_actions`) as structured
    content, for clients that read it."""
    line = clean_error(exc)
    doc = bounded(hide_paths_in({"error": line, **(exc.data or {})}), ok=False)
    return CallToolResult(content=[TextContent(type="text", text=line)],
                          structured_content=doc.model_dump(mode="json"),
                          is_error=True)  # fmt: skip


def tool_errors(fn: Callable[P, Awaitable[Result]]) -> Callable[P, Awaitable[CallToolResult]]:
    """The tool `fn`'s result as `answer`, and every failure of it as one clean line
    (`isError`), never a traceback. The SDK reads `fn`'s signature (`functools.wraps`), so
    the output schema stays `Result`'s."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> CallToolResult:
        try:
            return answer(await fn(*args, **kwargs))
        except ToolError:
            raise
        except OmsError as exc:
            if exc.data is not None and "next_actions" in exc.data:
                return refused(exc)
            raise ToolError(clean_error(exc)) from None
        except Exception as exc:  # every failure is one clean line (isError)
            raise ToolError(clean_error(exc)) from None

    return wrapper


# -- paging --------------------------------------------------------------------------------


def json_size(value: Any) -> int:
    """Bytes `value` takes in the JSON text that goes to the client."""
    return len(json.dumps(value, ensure_ascii=False).encode())


def fit(text: str, offset: int, budget: int) -> str:
    """The longest piece of `text` from `offset` whose JSON form fits `budget` bytes."""
    lo, hi = 0, min(len(text) - offset, budget)
    if hi > 0 and json_size(text[offset : offset + hi]) <= budget:
        return text[offset : offset + hi]  # the common case (plain text): no search
    while lo < hi:  # JSON escaping can make a character take up to 6 bytes
        mid = (lo + hi + 1) // 2
        if json_size(text[offset : offset + mid]) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return text[offset : offset + max(lo, 0)]


@dataclass(frozen=True)
class Page:
    """One page of a text under `key`: the piece, where it starts and where the next does."""

    key: str
    chunk: str
    offset: int
    total_chars: int

    @property
    def next_offset(self) -> int | None:
        nxt = self.offset + len(self.chunk)
        return nxt if nxt < self.total_chars else None

    def to_json(self) -> dict[str, Any]:
        more = self.next_offset is not None
        return {self.key: self.chunk, "offset": self.offset, "total_chars": self.total_chars,
                "next_offset": self.next_offset, "truncated": more}  # fmt: skip


def page(text: str, offset: int, key: str, budget: int = PAGE_BYTES) -> Page:
    """One page of `text` from `offset` under `key` whose text fits `budget` JSON bytes."""
    return Page(key, fit(text, offset, budget), offset, len(text))
