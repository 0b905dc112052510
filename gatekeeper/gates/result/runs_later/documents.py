"""JSON objects and TOML tables read as data, for the readers of more than one family."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping

from gatekeeper.gates.result.runs_later.common import Unreadable


def json_object(text: str | None) -> dict[str, object]:
    if text is None:
        return {}
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise Unreadable from e
    if not isinstance(doc, dict):
        raise Unreadable
    return doc


def toml_object(text: str | None) -> dict[str, object]:
    if text is None:
        return {}
    try:
        return tomllib.loads(text)
    except (ValueError, RecursionError) as e:
        raise Unreadable from e


def table(doc: Mapping[str, object], *keys: str) -> dict[str, object]:
    """The table at `keys` ({} when absent); a value that is not a table reads as one entry."""
    value: object = doc
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    if value is None:
        return {}
    return value if isinstance(value, dict) else {"(value)": value}
