"""JSON config files as the user keeps them: key order kept, the file's own indent kept
(two spaces when it has none), its final newline kept; only a JSON object is accepted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gatekeeper.errors import UsageError


def load(data: bytes | None, path: Path) -> dict[str, Any]:
    if data is None or not data.strip():
        return {}
    try:
        obj = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, json.JSONDecodeError) else ""
        raise UsageError(f"{path} is not valid JSON{where}; fix it, then run again") from None
    if not isinstance(obj, dict):
        raise UsageError(f"{path} does not hold a JSON object; oms will not rewrite it")
    return obj


def _indent(text: str) -> int | str:
    for line in text.splitlines()[1:]:
        body = line.lstrip(" \t")
        if body and len(body) < len(line):
            lead = line[: len(line) - len(body)]
            return "\t" if lead.startswith("\t") else len(lead)
    return 2


def dump(obj: dict[str, Any], like: bytes | None) -> bytes | None:
    """`obj` formatted like the file's old bytes `like`; None (delete the file) when it is
    left empty: only oms' entries were in it."""
    if not obj:
        return None
    old = like.decode("utf-8") if like else ""
    text = json.dumps(obj, indent=_indent(old), ensure_ascii=False)
    return (text + ("\n" if not old or old.endswith("\n") else "")).encode("utf-8")


def prune(obj: dict[str, Any], *keys: str) -> None:
    """Drop `obj[keys[0]]...` containers left empty, innermost first."""
    if not keys or not isinstance(obj.get(keys[0]), dict):
        return
    inner = obj[keys[0]]
    prune(inner, *keys[1:])
    if not inner:
        del obj[keys[0]]
