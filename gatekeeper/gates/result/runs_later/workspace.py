"""VS Code `*.code-workspace` files, read as JSONC: tasks (a folderOpen task runs on opening
the folder) and the settings that name what runs."""

from __future__ import annotations

import re

from gatekeeper.gates.result.runs_later.common import Said, Unreadable, pair
from gatekeeper.gates.result.runs_later.documents import json_object


def _jsonc(text: str | None) -> dict[str, object]:
    """JSON with `//` and `/* */` comments and trailing commas, as VS Code reads it."""
    if text is None:
        return {}
    out: list[str] = []
    comma: int | None = None  # index in `out` of a comma not yet followed by a value
    i = 0
    while i < len(text):
        ch, two = text[i], text[i : i + 2]
        if ch == '"':
            end = _string_end(text, i)
            out.append(text[i:end])
            comma, i = None, end
            continue
        if two in ("//", "/*"):
            end = text.find("\n" if two == "//" else "*/", i + 2)
            if end < 0 and two == "/*":
                raise Unreadable
            out.append(" ")
            i = len(text) if end < 0 else end + (1 if two == "//" else 2)
            continue
        if ch in "]}" and comma is not None:
            out[comma] = " "
        if not ch.isspace():
            comma = len(out) if ch == "," else None
        out.append(ch)
        i += 1
    return json_object("".join(out))


def _string_end(text: str, start: int) -> int:
    """The index after the JSON string that opens at `start`."""
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == '"':
            return i + 1
        else:
            i += 1
    raise Unreadable


_WATCHED_SETTING = re.compile(r"task\..*|terminal\.integrated\..*|.*(?:path|executable)", re.I)


def _flat(value: object, prefix: str = "") -> dict[str, object]:
    """Settings by dotted key, nested objects spelled out; a `[language]` override reads as
    the settings it holds."""
    out: dict[str, object] = {}
    for key, v in value.items() if isinstance(value, dict) else ():
        name = prefix.rstrip(".") if key.startswith("[") else f"{prefix}{key}"
        if isinstance(v, dict):
            out.update(_flat(v, f"{name}." if name else ""))
        else:
            out[name or key] = v
    return out


def _folder_open(value: object) -> bool:
    """Any task, at any depth, with `runOptions.runOn` "folderOpen"."""
    if isinstance(value, list):
        return any(_folder_open(v) for v in value)
    if not isinstance(value, dict):
        return False
    run = value.get("runOptions")
    if isinstance(run, dict) and run.get("runOn") == "folderOpen":
        return True
    return any(_folder_open(v) for v in value.values())


def code_workspace(base: str | None, cand: str) -> Said:
    b, c = pair(_jsonc, base, cand)
    if "tasks" in c and c["tasks"] != b.get("tasks"):
        # A folderOpen task runs its dependencies and the shared options too: any change
        # to the tasks while one exists runs on opening the folder.
        auto = _folder_open(c["tasks"])
        yield ("folderOpen task added or changed" if auto else "tasks changed"), auto
    bs, cs = _flat(b.get("settings")), _flat(c.get("settings"))
    for key in sorted(set(bs) | set(cs)):
        if bs.get(key) != cs.get(key) and _WATCHED_SETTING.fullmatch(key):
            yield f"setting {key} changed", False
