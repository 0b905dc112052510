"""`codex-cli` roles: `codex exec --json` under `oms agent run` (advisors and graders)."""

from __future__ import annotations

from gatekeeper.work.providers.base import ProviderReceipt, ProviderRequest, RoleUnavailable


def run_codex(req: ProviderRequest) -> ProviderReceipt:
    raise RoleUnavailable(f"role {req.role.name}: the codex-cli adapter is not built yet")
