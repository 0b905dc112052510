"""What every tool module is handed: the one repository served and its stores."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, TypeVarTuple

import anyio

from evidence import EvidenceStore, state_root
from gatekeeper.mcp.policy_cache import PolicyCache
from gatekeeper.repo.git import Repo
from policy import LoadedPolicy

R = TypeVar("R")
Ts = TypeVarTuple("Ts")


@dataclass(frozen=True)
class ToolContext:
    """The repository the server was started for; tools take no `repo_path`."""

    repo: Repo
    policies: PolicyCache
    # Set when this server was started by `oms agent run`'s broker for a run's `oms mcp`:
    # the entries it writes name the run (an extra subject), so the log says who asked.
    requested_by: tuple[Mapping[str, Any], ...] = ()

    def store(self) -> EvidenceStore:
        return EvidenceStore.open(state_root(), self.repo.repo_id, common_dir=self.repo.common_dir)

    def audit_store(self) -> EvidenceStore:
        """Opened without the binding check: a log of another repository is a report."""
        return EvidenceStore.open(
            state_root(), self.repo.repo_id, common_dir=self.repo.common_dir, check_binding=False
        )

    def policy(self) -> LoadedPolicy:
        """The policy at HEAD (the repo gateway's scanner allowlist), cached per commit and blob."""
        return self.policies.at_head(self.repo)


async def in_thread(fn: Callable[[*Ts], R], *args: *Ts) -> R:
    """`fn(*args)` in a worker thread: gates block (git, bwrap, scanners), the loop must not."""
    return await anyio.to_thread.run_sync(fn, *args)
