"""Gradle and Maven wrappers: the properties that name what a wrapper downloads and runs."""

from __future__ import annotations

import re

from gatekeeper.gates.result.runs_later.common import Said, pair

_PROP_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})|\\(.)", re.S)
_PROP_LINE = re.compile(r"((?:\\.|[^=:\s\\])*)\s*[=:]?\s*(.*)", re.S)


def _unescape(text: str) -> str:
    simple = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
    return _PROP_ESCAPE.sub(lambda m: chr(int(m[1], 16)) if m[1] else simple.get(m[2], m[2]), text)


def _properties(text: str | None) -> dict[str, str]:
    """Java properties: `key=value`, `key: value` or `key value`, backslash continuations."""
    if text is None:
        return {}
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.lstrip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if (len(line) - len(line.rstrip("\\"))) % 2:
            pending = line[:-1]
            continue
        pending = ""
        m = _PROP_LINE.fullmatch(line)
        if m is not None:
            out[_unescape(m[1])] = _unescape(m[2])
    return out


def wrapper_properties(base: str | None, cand: str) -> Said:
    b, c = pair(_properties, base, cand)
    for key in sorted(set(b) | set(c)):
        if b.get(key) == c.get(key) or (key.endswith("Sha256Sum") and key not in b):
            continue  # a checksum added only narrows what may run
        yield f"{key} {'removed' if key not in c else 'changed' if key in b else 'set'}", True
