"""The doctor's `hooks` section: oms' Stop hooks installed for Claude Code (settings.json)
and Codex (config.toml), user and project scope, and whether each time-out covers the
result gate's budget under the base's policy. A shorter one is a warning: the client
kills the gate mid-way and the agent sees no verdict."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from gatekeeper.errors import OmsError
from gatekeeper.gates.doctor import Extra
from gatekeeper.gates.mark import base_policy
from gatekeeper.integrations.install import claude, codex
from gatekeeper.integrations.install.entries import gate_budget_s, is_oms_hook
from gatekeeper.repo.git import Repo
from policy import Policy, PolicyError, default_policy

NAME = "hooks"
STOP_EVENTS = ("Stop", "SubagentStop")
MAX_CONFIG_BYTES = 4 << 20


def _load(path: Path) -> Any:
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_CONFIG_BYTES:
            return None
        data = path.read_bytes()
        return tomllib.loads(data.decode()) if path.suffix == ".toml" else json.loads(data)
    except (OSError, ValueError):
        return None  # unreadable or not parseable: `oms install` says so when it edits it


def stop_timeouts(doc: Any, client: str, key: str) -> list[tuple[str, int]]:
    """(event, time-out) of every oms Stop hook in a client config's `hooks` table."""
    hooks = doc.get("hooks") if isinstance(doc, dict) else None
    found: list[tuple[str, int]] = []
    for event in STOP_EVENTS:
        groups = hooks.get(event) if isinstance(hooks, dict) else None
        for group in groups if isinstance(groups, list) else []:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            for h in handlers if isinstance(handlers, list) else []:
                ok = isinstance(h, dict) and is_oms_hook(h.get("command"), client)
                if ok and isinstance(h.get(key), int):
                    found.append((event, h[key]))
    return found


def _configs(top: Path) -> list[tuple[str, str, Path, str]]:
    home = Path.home()
    out = []
    for scope in ("user", "project"):
        out.append((claude.CLIENT, scope, claude.paths(scope, home, top)[2], "timeout"))
        out.append((codex.CLIENT, scope, codex.paths(scope, home, top)[1], "timeout_sec"))
    return out


def _policy(repo: Repo) -> Policy:
    try:
        return base_policy(repo)[1].policy
    except (OmsError, PolicyError):  # no default branch or an invalid policy: said elsewhere
        return default_policy().policy


def doctor_check(repo: Repo) -> Extra | None:
    budget = gate_budget_s(_policy(repo))
    seen, warnings = [], []
    for client, scope, path, key in _configs(repo.top):
        for event, timeout in stop_timeouts(_load(path), client, key):
            seen.append({"client": client, "scope": scope, "event": event, "timeout_s": timeout})
            if timeout < budget:
                warnings.append(
                    f"{client} {scope} {event} hook time-out {timeout} s is shorter than the "
                    f"gate's budget {budget} s ({path}): run `oms install {client}` again"
                )
    if not seen:
        return None
    return Extra(name=NAME, section={"gate_budget_s": budget, "stop": seen},
                 warnings=tuple(warnings))  # fmt: skip
