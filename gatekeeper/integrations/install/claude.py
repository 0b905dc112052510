"""Claude Code: the `oms` MCP server, the hooks in settings.json, the CLAUDE.md section.

Scopes as Claude Code documents them: user — `~/.claude.json` `mcpServers`,
`~/.claude/settings.json`, `~/.claude/CLAUDE.md` (all under `$CLAUDE_CONFIG_DIR` when set);
project — `.mcp.json`, `.claude/settings.json` and `CLAUDE.md` at the repository top.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gatekeeper.errors import UsageError
from gatekeeper.integrations.install import instructions, jsonfile
from gatekeeper.integrations.install.changes import FileEdit, read_config
from gatekeeper.integrations.install.entries import (
    SERVER_NAME,
    Hook,
    McpServer,
    hooks_summary,
    is_oms_hook,
    is_oms_server,
)

CLIENT = "claude-code"


def paths(scope: str, home: Path, top: Path | None) -> tuple[Path, Path, Path, Path]:
    """(root, MCP file, settings file, instructions file) of a scope."""
    if scope == "project":
        assert top is not None
        return top, top / ".mcp.json", top / ".claude" / "settings.json", top / "CLAUDE.md"
    conf = os.environ.get("CLAUDE_CONFIG_DIR")
    if conf:
        root = Path(conf)
        return root, root / ".claude.json", root / "settings.json", root / "CLAUDE.md"
    conf_dir = home / ".claude"
    return home, home / ".claude.json", conf_dir / "settings.json", conf_dir / "CLAUDE.md"


def server_json(server: McpServer) -> dict[str, Any]:
    """The stdio server entry as `claude mcp add` writes it."""
    entry: dict[str, Any] = {"type": "stdio", "command": server.command,
                             "args": list(server.args)}  # fmt: skip
    entry["env"] = dict(server.env)
    return entry


def with_server(doc: dict[str, Any], server: McpServer | None, path: Path) -> dict[str, Any]:
    """`doc` with oms' entry under `mcpServers.oms` (None: without it). A user's own
    server called `oms` that does not start oms is refused, not overwritten."""
    out = copy.deepcopy(doc)
    servers = out.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise UsageError(f"`mcpServers` in {path} is not an object; oms will not rewrite it")
    current = servers.get(SERVER_NAME)
    if current is not None and not is_oms_server(current):
        raise UsageError(f"{path} has its own MCP server named `{SERVER_NAME}` that does not "
                         "start oms; rename or remove it, then run again")  # fmt: skip
    if server is not None:
        out["mcpServers"] = {**servers, SERVER_NAME: server_json(server)}
    elif current is not None:
        del out["mcpServers"][SERVER_NAME]
        jsonfile.prune(out, "mcpServers")
    return out


def _strip(groups: list[Any]) -> list[Any]:
    """Matcher groups without oms' own handlers; a group left empty goes."""
    out = []
    for group in groups:
        if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
            out.append(group)
            continue
        kept = [h for h in group["hooks"]
                if not (isinstance(h, dict) and is_oms_hook(h.get("command"), CLIENT))]  # fmt: skip
        if kept:
            out.append({**group, "hooks": kept} if len(kept) != len(group["hooks"]) else group)
    return out


def group(prefix: Sequence[str], hook: Hook) -> dict[str, Any]:
    from gatekeeper.integrations.hooks.config import hook_command  # as in entries.hooks_for

    handler = {"type": "command", "command": hook_command(prefix, CLIENT, hook.event),
               "timeout": hook.timeout_s}  # fmt: skip
    out: dict[str, Any] = {"matcher": hook.matcher} if hook.matcher else {}
    out["hooks"] = [handler]
    return out


def with_hooks(doc: dict[str, Any], prefix: Sequence[str], hooks: Sequence[Hook],
               install: bool) -> dict[str, Any]:  # fmt: skip
    """`doc` with exactly one oms group per event (install) or none (uninstall); an
    event already holding exactly oms' group, and no other oms handler, stays as it is."""
    out = copy.deepcopy(doc)
    table = out.get("hooks", {})
    if not isinstance(table, dict):
        raise UsageError("`hooks` in settings.json is not an object; oms will not rewrite it")
    out["hooks"] = table
    for hook in hooks:
        groups = table.get(hook.event, [])
        groups = groups if isinstance(groups, list) else [groups]
        mine = group(prefix, hook)
        stripped = _strip(groups)
        if install and groups.count(mine) == 1 and len(stripped) == len(groups) - 1:
            continue
        table[hook.event] = [*stripped, mine] if install else stripped
        if not table[hook.event]:
            del table[hook.event]
    if not table and "hooks" not in doc:
        del out["hooks"]
    elif not install:
        jsonfile.prune(out, "hooks")
    return out


def _json_edit(path: Path, root: Path, what: str, change: Any) -> FileEdit:
    """`change` applied to the file's object; an uninstall that leaves `{}` removes it."""
    before = read_config(path, root)
    doc = jsonfile.load(before, path)
    after_doc = change(doc)
    after = before if after_doc == doc else jsonfile.dump(after_doc, before)
    return FileEdit(path, root, before, after, (what,))


def edits(scope: str, home: Path, top: Path | None, prefix: Sequence[str],
          server: McpServer, hooks: Sequence[Hook], install: bool) -> list[FileEdit]:  # fmt: skip
    root, mcp_file, settings, notes = paths(scope, home, top)

    def servers(doc: dict[str, Any]) -> dict[str, Any]:
        return with_server(doc, server if install else None, mcp_file)

    def handlers(doc: dict[str, Any]) -> dict[str, Any]:
        return with_hooks(doc, prefix, hooks, install)

    return [
        _json_edit(mcp_file, root, f"MCP server `{SERVER_NAME}`", servers),
        _json_edit(settings, root, hooks_summary(hooks), handlers),
        instructions.edit(notes, root, CLIENT, install),
    ]
