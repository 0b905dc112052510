"""mise: the hooks, tasks, plugins, tools from a URL, env directives and `exec()` templates
a mise configuration adds or changes."""

from __future__ import annotations

import json
from collections.abc import Mapping

from gatekeeper.gates.result.runs_later.common import Said, key_changes, pair
from gatekeeper.gates.result.runs_later.documents import table, toml_object


def _env_directives(doc: Mapping[str, object]) -> dict[str, object]:
    """`env._.*` (`source`, `file`, `path`, `python`) across `[env]` and `[[env]]`."""
    env = doc.get("env")
    out: dict[str, list[object]] = {}
    for part in env if isinstance(env, list) else [env]:
        for key, value in table({"env": part}, "env", "_").items():
            out.setdefault(key, []).append(value)
    return dict(out)


def _url_tools(doc: Mapping[str, object]) -> dict[str, object]:
    """Tools installed from a URL (a plugin's git repository, an asset)."""
    return {k: v for k, v in table(doc, "tools").items() if "://" in k + json.dumps(v)}


def _exec_templates(value: object, at: str = "") -> set[tuple[str, str]]:
    """Strings whose template runs a command (`{{ exec(...) }}`) where mise renders them."""
    if isinstance(value, dict):
        return {x for k, v in value.items() for x in _exec_templates(v, f"{at}.{k}")}
    if isinstance(value, list):
        return {x for v in value for x in _exec_templates(v, at)}
    return {(at, value)} if isinstance(value, str) and "exec(" in value else set()


def mise_toml(base: str | None, cand: str) -> Said:
    b, c = pair(toml_object, base, cand)
    for _, what in key_changes(table(b, "hooks"), table(c, "hooks"), "hook ", "added"):
        yield what, True
    for _, what in key_changes(table(b, "tasks"), table(c, "tasks"), "task ", "added"):
        yield what, False
    for _, what in key_changes(table(b, "plugins"), table(c, "plugins"), "plugin ", "added"):
        yield what, False
    for _, what in key_changes(_url_tools(b), _url_tools(c), "tool ", "added"):
        yield what, False
    for key, what in key_changes(_env_directives(b), _env_directives(c), "env._.", "added"):
        yield what, key == "source"  # sourced by the shell on entering the directory
    if _exec_templates(c) - _exec_templates(b):
        yield "exec() template added", True
