"""`claude-code` roles: `claude -p` for api-key exec roles; interactive ones in panes."""

from __future__ import annotations

from gatekeeper.work.providers.base import (
    Adapter,
    ProviderReceipt,
    ProviderRequest,
    Role,
    RoleUnavailable,
)


def claude_adapter(role: Role) -> Adapter:
    def run(req: ProviderRequest) -> ProviderReceipt:
        raise RoleUnavailable(f"role {req.role.name}: the claude-code adapter is not built yet")

    return run
