"""The transfer a role runs under: the one check dispatch and the grade share.

A role that sends repository context to an external model (claude-code, codex-cli, or a
command provider that says so) needs a transfer manifest of this repository that is not
blocked, has not expired, and is approved or released by a human, or covered by an
autopilot rule of the trusted policy, whose destination is the role's own
(`<provider>:<model>`, e.g. `claude-code:claude-sonnet-4-5`, `command:ext:scripted`): what a human
approved for one model never carries context to another. The transfer gate's own state
decides; this only asks it. A role that is not external may name one too: it is checked
the same way and recorded.
"""

from __future__ import annotations

from gatekeeper.digest import Sha256Digest
from gatekeeper.errors import Blocked, UsageError
from gatekeeper.gates.transfer import clock
from gatekeeper.gates.transfer.autopilot import approving_rule
from gatekeeper.gates.transfer.state import locate, state_at
from gatekeeper.work.fence import Work
from gatekeeper.work.providers.base import Role


class TransferRefused(Blocked):
    """An external role's run without an approved, unexpired transfer manifest."""


def destination_of(role: Role) -> str:
    """`PROVIDER:MODEL`, as `oms transfer preview --to` and a run's own manifests name the
    model a role reaches (`command:ext:scripted` for a command provider)."""
    return f"{role.provider}:{role.model}"


def approved_transfer(work: Work, role: Role, digest: Sha256Digest | None,
                      flag: str = "--transfer") -> str | None:  # fmt: skip
    """The digest (`sha256:<hex>`) of the transfer `role` runs under, or None when it needs
    none and names none; TransferRefused otherwise."""
    if digest is None:
        if role.external:
            raise TransferRefused(
                f"role {role.name} sends repo context to an external model ({role.provider}); "
                f"pass {flag} sha256:<digest> of an approved transfer manifest"
            )
        return None
    try:
        at = locate(work.repo.top, digest)
    except UsageError:
        raise TransferRefused(f"no transfer manifest {digest} in this repository") from None
    m = at.manifest
    if m.blocked:
        raise TransferRefused(f"transfer manifest {digest} is blocked")
    if clock.parse_stamp(m.expires) <= clock.now():
        raise TransferRefused(f"transfer manifest {digest} expired at {m.expires}; preview again")
    status = state_at(at).status
    if status not in ("approved", "released") and (
        approving_rule(work.loaded.policy.transfer, m) is None
    ):
        raise TransferRefused(f"transfer manifest {digest} is {status}, not approved, and no "
                              "autopilot rule covers it")  # fmt: skip
    own, dest = destination_of(role), f"{m.destination.provider}:{m.destination.model}"
    if role.external and dest != own:
        raise TransferRefused(f"transfer manifest {digest} is for {dest}, not {own}: role "
                              f"{role.name} sends its context to {own}"[:300])  # fmt: skip
    return str(digest)
