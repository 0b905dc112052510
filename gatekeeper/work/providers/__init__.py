"""Provider adapters (one module per engine) behind `base.py`'s interface; `adapter(role)`
is the one entry point."""

from __future__ import annotations

from gatekeeper.work.providers.base import Adapter, Role, RoleUnavailable


def adapter(role: Role) -> Adapter:
    """The run function of `role`'s engine. Eligibility (`roles.require`) is the caller's
    to check first; an engine with no adapter raises RoleUnavailable (exit 4)."""
    # The adapters (`oms agent run`, aiohttp behind it) are imported when one is picked:
    # importing `providers.base` for `Role` must not load them (`oms run list`).
    from gatekeeper.work.providers.claude_code import claude_adapter
    from gatekeeper.work.providers.codex_cli import run_codex
    from gatekeeper.work.providers.command import run_command

    if role.engine.startswith("command:"):
        return run_command
    if role.engine == "codex-cli":
        return run_codex
    if role.engine == "claude-code":
        return claude_adapter(role)
    raise RoleUnavailable(f"role {role.name}: no adapter for provider {role.provider!r}")
