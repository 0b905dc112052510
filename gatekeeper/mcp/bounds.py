"""What may leave the server in one tool result: bounded, paged, with no host path.

Every tool returns a `Result` (`{ok, truncated, data}`) under `MAX_RESULT_BYTES` of the
JSON text the SDK sends; long text is paged with `offset`/`next_offset`; an error is one
clean line without traceback, `$OMS_HOME` or the home directory (docs/mcp.md).
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
from pydantic import BaseModel, ConfigDict

from evidence import state_root
from gatekeeper.errors import classify
from gatekeeper.text import sanitize

MAX_RESULT_BYTES = 7600  # of the JSON text the SDK sends (indent=2), under 8 KiB
PAGE_BYTES = 5000  # JSON-encoded bytes of text per page (results stay under 8 KiB)
ERROR_CHARS = 400
LINE_CHARS = 300
CUT_NOTE = "[cut: too long for one tool result; use the CLI or a paged tool]"
P = ParamSpec("P")


class Result(BaseModel):
    """Every tool's structured output: a compact JSON document as `data`."""

    # Frozen only: extra="forbid" would add additionalProperties to the output schema
    # and so change the tools digest that hosts pin.
    model_config = ConfigDict(frozen=True)

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


def _sent_size(result: Result) -> int:
    """Bytes of the text content the SDK sends for a structured result (indent=2 JSON)."""
    return len(pydantic_core.to_json(result, indent=2))


def bounded(data: dict[str, Any]) -> Result:
    """The result, or, when it would exceed the bound, the result with its largest fields
    replaced by a note (tools that page keep their pages under the bound themselves)."""
    result = Result(ok=True, truncated=bool(data.get("truncated", False)), data=data)
    if _sent_size(result) <= MAX_RESULT_BYTES:
        return result
    cut = dict(data)
    for key in sorted(cut, key=lambda k: -len(json.dumps(cut[k], ensure_ascii=False))):
        cut[key] = CUT_NOTE
        result = Result(ok=True, truncated=True, data=cut)
        if _sent_size(result) <= MAX_RESULT_BYTES:
            break
    return result


def tool_errors(fn: Callable[P, Awaitable[Result]]) -> Callable[P, Awaitable[Result]]:
    """Every failure of the tool `fn` as one clean line (`isError`), never a traceback."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> Result:
        try:
            return await fn(*args, **kwargs)
        except ToolError:
            raise
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
