"""Codex: `[mcp_servers.oms]` and inline `[[hooks.<Event>]]` tables in config.toml, and the
AGENTS.md section. Edited with tomlkit, so the user's comments and other tables stay.

Scopes as Codex documents them: user — `$CODEX_HOME` (default `~/.codex`) `config.toml`
and `AGENTS.md`; project — `.codex/config.toml` and `AGENTS.md` at the repository top
(Codex loads a project's `.codex/` layer only once the project is trusted).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError
from tomlkit.items import AoT, Table

from gatekeeper.errors import UsageError
from gatekeeper.integrations.install import instructions
from gatekeeper.integrations.install.changes import FileEdit, read_config
from gatekeeper.integrations.install.entries import (
    SERVER_NAME,
    STARTUP_TIMEOUT_S,
    Hook,
    McpServer,
    hooks_summary,
    is_oms_hook,
    is_oms_server,
)

CLIENT = "codex"


def paths(scope: str, home: Path, top: Path | None) -> tuple[Path, Path, Path]:
    """(root, config.toml, AGENTS.md) of a scope."""
    if scope == "project":
        assert top is not None
        return top, top / ".codex" / "config.toml", top / "AGENTS.md"
    codex_home = os.environ.get("CODEX_HOME")
    root = Path(codex_home) if codex_home else home
    conf = root if codex_home else home / ".codex"
    return root, conf / "config.toml", conf / "AGENTS.md"


def server_table(server: McpServer, tool_timeout_s: int) -> Table:
    """`[mcp_servers.oms]`: a tool call may run a whole result gate."""
    table = tomlkit.table()
    table["command"] = server.command
    table["args"] = list(server.args)
    if server.env:
        env = tomlkit.inline_table()
        env.update(dict(server.env))
        table["env"] = env
    table["startup_timeout_sec"] = STARTUP_TIMEOUT_S
    table["tool_timeout_sec"] = tool_timeout_s
    return table


def server_snippet(server: McpServer, tool_timeout_s: int) -> str:
    """`[mcp_servers.oms]` on its own, as `oms mcp config` prints it."""
    doc = tomlkit.document()
    servers = tomlkit.table(is_super_table=True)
    servers[SERVER_NAME] = server_table(server, tool_timeout_s)
    doc["mcp_servers"] = servers
    return tomlkit.dumps(doc)


def _super(doc: Any, key: str) -> Any:
    table = doc.get(key)
    if table is None:
        table = tomlkit.table(is_super_table=True)
        doc[key] = table
    if not isinstance(table, Table):
        raise UsageError(f"`{key}` in config.toml is not a table; oms will not rewrite it")
    return table


def _set_server(doc: Any, server: McpServer | None, tool_timeout_s: int) -> None:
    servers = _super(doc, "mcp_servers")
    current = servers.get(SERVER_NAME)
    if current is not None and not is_oms_server(current):
        raise UsageError(f"config.toml has its own `[mcp_servers.{SERVER_NAME}]` that does not "
                         "start oms; rename or remove it, then run again")  # fmt: skip
    if server is not None:
        servers[SERVER_NAME] = server_table(server, tool_timeout_s)
    elif current is not None:
        del servers[SERVER_NAME]
    if not servers:
        del doc["mcp_servers"]


def _group(prefix: Sequence[str], hook: Hook) -> Table:
    from gatekeeper.integrations.hooks.config import hook_command  # as in entries.hooks_for

    group = tomlkit.table()
    if hook.matcher:
        group["matcher"] = hook.matcher
    handler = tomlkit.table()
    handler["type"] = "command"
    handler["command"] = hook_command(prefix, CLIENT, hook.event)
    handler["timeout"] = hook.timeout_s
    handlers = tomlkit.aot()
    handlers.append(handler)
    group["hooks"] = handlers
    return group


def _is_mine(group: Any) -> bool:
    handlers = group.get("hooks") if isinstance(group, Table) else None
    return isinstance(handlers, AoT) and any(
        is_oms_hook(h.get("command"), CLIENT) for h in handlers
    )


def _set_hooks(doc: Any, prefix: Sequence[str], hooks: Sequence[Hook], install: bool) -> None:
    """One oms group per event (install) or none; oms' groups are whole tables that hold an
    oms handler, so a user's group is never edited."""
    table = _super(doc, "hooks")
    for hook in hooks:
        groups = table.get(hook.event)
        if groups is not None and not isinstance(groups, AoT):
            raise UsageError(f"`hooks.{hook.event}` in config.toml is not an array of tables")
        mine = _group(prefix, hook)
        ours = [g for g in (groups or []) if _is_mine(g)]
        if install and len(ours) == 1 and ours[0].unwrap() == mine.unwrap():
            continue
        if groups is not None:
            for i in reversed(range(len(groups))):
                if _is_mine(groups[i]):
                    del groups[i]
        if install:
            if groups is None:
                groups = tomlkit.aot()
                table[hook.event] = groups
            groups.append(mine)
        elif groups is not None and not len(groups):
            del table[hook.event]
    if not table:
        del doc["hooks"]


def _load(data: bytes | None, path: Path) -> Any:
    try:
        return tomlkit.parse((data or b"").decode("utf-8"))
    except (UnicodeDecodeError, TOMLKitError) as exc:
        raise UsageError(f"{path} is not valid TOML ({str(exc)[:120]}); fix it first") from None


def config_edit(path: Path, root: Path, prefix: Sequence[str], server: McpServer,
                hooks: Sequence[Hook], tool_timeout_s: int, install: bool) -> FileEdit:  # fmt: skip
    before = read_config(path, root)
    doc = _load(before, path)
    _set_server(doc, server if install else None, tool_timeout_s)
    _set_hooks(doc, prefix, hooks, install)
    text = tomlkit.dumps(doc)
    if not install and text.strip():
        text = text.rstrip("\n") + "\n"  # the blank line tomlkit put before oms' tables
    after: bytes | None = text.encode("utf-8")
    if after == (before or b""):
        after = before
    elif not text.strip() and not install:
        after = None  # it held only oms' tables: oms made it
    what = (f"MCP server `{SERVER_NAME}`", hooks_summary(hooks))
    return FileEdit(path, root, before, after, what)


def edits(scope: str, home: Path, top: Path | None, prefix: Sequence[str], server: McpServer,
          hooks: Sequence[Hook], tool_timeout_s: int, install: bool) -> list[FileEdit]:  # fmt: skip
    root, config, notes = paths(scope, home, top)
    return [
        config_edit(config, root, prefix, server, hooks, tool_timeout_s, install),
        instructions.edit(notes, root, CLIENT, install),
    ]
