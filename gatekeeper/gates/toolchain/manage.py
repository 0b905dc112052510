"""`oms toolchain list|verify|gc`: what is prepared, whether it is intact, and removing
what no gate uses any more."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from gatekeeper.errors import OmsError, UsageError
from gatekeeper.gates.mark import base_policy
from gatekeeper.gates.toolchain.identity import Spec, spec_of
from gatekeeper.gates.toolchain.prepare import selected
from gatekeeper.gates.toolchain.store import (
    HEX_LEN,
    all_records,
    held,
    last_used,
    read_record,
    remove_record,
    toolchain_root,
    tree_dir,
)
from gatekeeper.gates.toolchain.tree import ToolchainUnavailable, remove_tree, tree_digest
from gatekeeper.repo.git import Repo, open_repo

DAY_S = 86_400


class _Out(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class ToolchainState(_Out):
    """One toolchain of the base's policy: prepared and intact, or what is wrong."""

    name: str
    kind: str
    id: str
    dir: str
    state: str  # ok | missing | stale | modified (verify) ; prepared | missing | stale (list)
    tree_digest: str | None  # recorded
    actual_digest: str | None = None  # verify only


class PreparedEntry(_Out):
    name: str
    kind: str
    id: str
    dir: str
    prepared_at: str
    last_used: str | None
    tree_digest: str
    bytes: int
    allow_build: bool


class ToolchainList(_Out):
    toolchain_dir: str
    policy_commit: str | None  # None outside a repository
    policy: tuple[ToolchainState, ...]
    prepared: tuple[PreparedEntry, ...]


class Verified(_Out):
    policy_commit: str
    intact: bool
    toolchains: tuple[ToolchainState, ...]


class Collected(_Out):
    toolchain_dir: str
    dry_run: bool
    removed: tuple[str, ...]  # directories (and records) removed, or that would be
    kept: int


def _state(spec: Spec, check: bool) -> ToolchainState:
    tc, dest = spec.toolchain, tree_dir(spec.id)
    record = read_record(spec.id)
    base = {"name": tc.name, "kind": tc.kind, "id": spec.id, "dir": str(dest)}
    if record is None:
        stale = any(r.name == tc.name and r.kind == tc.kind for r in all_records())
        return ToolchainState(**base, state="stale" if stale else "missing", tree_digest=None)
    if not check:
        return ToolchainState(**base, state="prepared", tree_digest=record.tree_digest)
    actual = tree_digest(dest).digest if dest.is_dir() and not dest.is_symlink() else None
    state = "ok" if actual == record.tree_digest else "modified"
    return ToolchainState(**base, state=state, tree_digest=record.tree_digest, actual_digest=actual)


def check_states(repo: Repo, names: Sequence[str] = ()) -> tuple[str, tuple[ToolchainState, ...]]:
    """(policy commit, the state of each named toolchain of the base's policy, all by
    default), every tree recomputed against its record."""
    commit, loaded = base_policy(repo)
    return commit, tuple(_state(spec_of(repo, commit, t), True) for t in selected(loaded, names))


def verify(repo_dir: Path, names: Sequence[str] = ()) -> Verified:
    """Every named toolchain of the base's policy (all by default) recomputed against its
    record; ToolchainUnavailable (exit 4, with the states) unless all are intact."""
    commit, states = check_states(open_repo(repo_dir), names)
    out = Verified(
        policy_commit=commit, intact=all(s.state == "ok" for s in states), toolchains=states
    )
    if not out.intact:
        bad = next(s for s in states if s.state != "ok")
        raise ToolchainUnavailable(
            f"toolchain {bad.name} is {bad.state}; run: oms toolchain prepare {bad.name}",
            data=out.to_json(),
        )
    return out


def _iso(ts: float | None) -> str | None:
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _repo_or_none(repo_dir: Path | None) -> Repo | None:
    if repo_dir is None:
        return None
    try:
        return open_repo(repo_dir)
    except OmsError:
        return None


def toolchain_list(repo_dir: Path | None) -> ToolchainList:
    """The toolchains prepared on this machine, and those of the repository's base policy."""
    repo = _repo_or_none(repo_dir)
    states: tuple[ToolchainState, ...] = ()
    commit = None
    if repo is not None:
        commit, loaded = base_policy(repo)
        states = tuple(_state(spec_of(repo, commit, t), False) for t in loaded.policy.toolchains)
    prepared = tuple(
        PreparedEntry(
            name=r.name,
            kind=r.kind,
            id=r.id,
            dir=r.dir,
            prepared_at=r.prepared_at,
            last_used=_iso(last_used(r.id)),
            tree_digest=r.tree_digest,
            bytes=r.bytes,
            allow_build=r.allow_build,
        )
        for r in all_records()
    )
    return ToolchainList(
        toolchain_dir=str(toolchain_root()), policy_commit=commit, policy=states, prepared=prepared
    )


def _keep_ids(repo: Repo | None) -> set[str]:
    if repo is None:
        return set()
    commit, loaded = base_policy(repo)
    return {spec_of(repo, commit, t).id for t in loaded.policy.toolchains}


def gc(repo_dir: Path | None, keep_days: int, dry_run: bool) -> Collected:
    """Remove trees without a record (unfinished builds), records without a tree, and
    toolchains no gate used for `keep_days` (never one the repository's base policy names)."""
    if keep_days < 0:
        raise UsageError("--keep-days must be 0 or more")
    root = toolchain_root()
    keep = _keep_ids(_repo_or_none(repo_dir))
    now = time.time()
    doomed: list[tuple[str, Path | None]] = []  # (id, tree) to remove
    recorded = set()
    for r in all_records():
        recorded.add(r.id)
        path = tree_dir(r.id)
        if not path.is_dir():
            doomed.append((r.id, None))
            continue
        used = last_used(r.id) or path.stat().st_mtime
        if r.id not in keep and now - used > keep_days * DAY_S:
            doomed.append((r.id, path))
    names = sorted(os.listdir(root)) if root.is_dir() else []
    for name in names:
        tid = f"sha256:{name}"
        if len(name) == HEX_LEN and tid not in recorded and (root / name).is_dir():
            doomed.append((tid, root / name))
    if not dry_run:
        for tid, tree in doomed:
            with held(tid) as free:
                if not free:
                    continue  # being built right now: not ours to remove
                if tree is not None:
                    remove_tree(tree)
                remove_record(tid)
    removed = tuple(str(tree) if tree else f"record {tid}" for tid, tree in doomed)
    return Collected(
        toolchain_dir=str(root),
        dry_run=dry_run,
        removed=removed,
        kept=len(recorded) - sum(1 for t, _ in doomed if t in recorded),
    )
