"""Rendering a command's outcome: exactly one JSON object with --json, else short text.

Every refusal reaches the user as one line, mapped to its exit code by
`errors.refusal`; an unexpected exception is reported as an internal error
(exit 4, fail closed), never as a traceback.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec

import click

from gatekeeper.errors import InternalError, refusal
from gatekeeper.text import sanitize

P = ParamSpec("P")


@dataclass
class Outcome:
    data: dict[str, Any]
    code: int = 0
    lines: list[str] | None = None  # None: print the data as JSON; []: print nothing


def ascii_json(obj: Any, indent: int | None = None) -> str:
    """JSON that cannot carry a terminal control raw: every non-ASCII character (bidi
    overrides, C1 controls) as \\uXXXX, C0 controls escaped by JSON itself, and DEL —
    ASCII, so `ensure_ascii` keeps it — escaped too. DEL only occurs inside strings."""
    return json.dumps(obj, ensure_ascii=True, indent=indent).replace("\x7f", "\\u007f")


def emit_json(obj: dict[str, Any]) -> None:
    sys.stdout.write(ascii_json(obj) + "\n")
    sys.stdout.flush()


def emit_error(
    as_json: bool, code: int, kind: str, message: str, data: dict[str, Any] | None = None
) -> None:
    message = sanitize(message.splitlines()[0] if message else kind)
    if as_json:
        emit_json({"ok": False, "oms_exit_code": code, **(data or {}),
                   "error": {"kind": kind, "message": message}})  # fmt: skip
    else:
        click.echo(f"oms: {kind}: {message}", err=True)


def command(fn: Callable[P, Outcome]) -> Callable[P, None]:
    """Wrap a click callback: add --json, render its Outcome, map refusals to exit codes."""

    @click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object.")
    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        as_json = bool(kwargs.pop("as_json", False))
        try:
            outcome = fn(*args, **kwargs)
        except click.exceptions.Exit:
            raise
        except Exception as exc:
            err = refusal(exc)
            if isinstance(err, InternalError) and os.environ.get("OMS_DEBUG"):
                traceback.print_exc()
            code = err.exit_code
            # A refusal that was recorded carries its data (e.g. the evidence seq).
            emit_error(as_json, code, err.kind, err.message, err.data)
            sys.exit(code)
        if as_json:
            # `exit_code` is left to the data (e.g. a sandboxed command's own exit code).
            emit_json({"ok": outcome.code == 0, "oms_exit_code": outcome.code, **outcome.data})
        else:
            lines = outcome.lines
            if lines is None:
                lines = [ascii_json(outcome.data, indent=2)]
            for line in lines:
                click.echo(line)
        sys.exit(outcome.code)

    return wrapper
