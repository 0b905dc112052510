"""A prepared toolchain as a check uses it: verified, then bound read-only at its own path.

Before every gate each toolchain the plan names must have a record for exactly the base's
inputs (else it is missing or stale: UNAVAILABLE, `oms toolchain prepare` the remedy, or
prepared first when the policy says `auto_prepare`), and its tree must still have the
recorded digest (else it was modified: UNAVAILABLE). Then every path it needs is bound:
the tree, the runtime's prefix, and the real target of every symlink that leads out of
the tree; one that resolves into a path no sandbox may see is refused with that path
named, never left to fail inside as a missing file.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from evidence import EvidenceStore
from gatekeeper.gates.toolchain.identity import Spec, spec_of
from gatekeeper.gates.toolchain.payloads import ToolchainRecord
from gatekeeper.gates.toolchain.prepare import Progress, prepare_spec
from gatekeeper.gates.toolchain.store import all_records, mark_used, read_record, tree_dir
from gatekeeper.gates.toolchain.tree import ToolchainUnavailable, tree_digest
from gatekeeper.repo.git import Repo
from policy import LoadedPolicy
from sandbox import Profile, ProfileError
from sandbox.profile import SYSTEM_DIRS, resolve_ro_paths


class ToolchainUsed(BaseModel):
    """A toolchain in the verdict: which tree the checks ran with, and whether the
    candidate changed its lockfile (its checks still ran with the base's)."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    name: str
    kind: str
    id: str
    tree_digest: str
    lock: str
    lock_changed: bool = False


@dataclass(frozen=True)
class BoundToolchain:
    used: ToolchainUsed
    inputs: tuple[str, ...]  # repo-relative input files (the lock and its companions)
    ro_paths: tuple[tuple[str, str], ...]  # (host real path, inside): all at their own path
    bin_dirs: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    links: tuple[tuple[str, str], ...]


def _within(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _remedy(repo: Repo, name: str) -> str:
    return f"run: oms toolchain prepare --repo {shlex.quote(str(repo.top))} {name}"


def _missing(spec: Spec, repo: Repo) -> ToolchainUnavailable:
    tc = spec.toolchain
    others = [r for r in all_records() if r.name == tc.name and r.kind == tc.kind]
    if others:
        return ToolchainUnavailable(
            f"toolchain {tc.name} is stale: it was prepared for another {tc.lock} or runtime "
            f"than the base's ({spec.policy_commit[:12]}); {_remedy(repo, tc.name)}"
        )
    return ToolchainUnavailable(
        f"toolchain {tc.name} is not prepared for the base "
        f"({spec.policy_commit[:12]}); {_remedy(repo, tc.name)}"
    )


def _binds(record: ToolchainRecord, links: Sequence[tuple[str, str]]) -> list[str]:
    """The tree, the runtime prefix, and what the tree's symlinks lead to outside them."""
    wanted = [record.dir, *record.binds]
    for link, _text in links:
        target = os.path.realpath(link)
        if _within(target, [*wanted, *SYSTEM_DIRS]):
            continue
        if not os.path.exists(target):
            raise ToolchainUnavailable(
                f"toolchain {record.name}: {link} leads to {target}, which does not exist"
            )
        wanted.append(target)
    return wanted


def bind(spec: Spec, record: ToolchainRecord, never: Sequence[Path]) -> BoundToolchain:
    """Verify the tree against its record, then resolve what must be bound."""
    td = tree_digest(Path(record.dir))
    if td.digest != record.tree_digest:
        raise ToolchainUnavailable(
            f"toolchain {record.name} was modified since it was prepared (its tree is "
            f"{td.digest[:19]}…, recorded {record.tree_digest[:19]}…); nothing was run with it; "
            f"rebuild it: oms toolchain prepare {record.name}"
        )
    wanted = _binds(record, td.links)
    try:
        ro = resolve_ro_paths(wanted, os.environ, never)
    except ProfileError as exc:
        raise ToolchainUnavailable(
            f"toolchain {record.name} cannot be bound into the sandbox: "
            f"{str(exc).removeprefix('sandbox ')}"
        ) from None
    used = ToolchainUsed(
        name=spec.name,
        kind=record.kind,
        id=record.id,
        tree_digest=record.tree_digest,
        lock=record.lock,
    )
    return BoundToolchain(used, tuple(spec.inputs), ro, record.bin_dirs, record.env, record.links)


def ready_toolchains(
    repo: Repo,
    store: EvidenceStore,
    loaded: LoadedPolicy,
    policy_commit: str,
    names: Sequence[str],
    never: Sequence[Path],
    progress: Progress,
) -> dict[str, BoundToolchain]:
    """Each named toolchain verified and resolved for binding (auto-prepared when its
    policy says so); ToolchainUnavailable for the first that cannot be used."""
    out: dict[str, BoundToolchain] = {}
    for name in dict.fromkeys(names):
        spec = spec_of(repo, policy_commit, loaded.policy.toolchain(name))
        record = read_record(spec.id)
        if record is None or not tree_dir(spec.id).is_dir():
            if not spec.toolchain.auto_prepare:
                raise _missing(spec, repo)
            progress(f"toolchain {name}: not prepared; preparing it (auto_prepare)")
            prepare_spec(spec, repo, store, loaded, progress)
            record = read_record(spec.id)
            assert record is not None  # written by prepare_spec
        out[name] = bind(spec, record, never)
        mark_used(spec.id)
    return out


def with_toolchain(profile: Profile, tool: BoundToolchain) -> Profile:
    """`profile` with the toolchain bound read-only and its bin/ first on PATH."""
    have = {inside for _, inside in profile.ro_paths}
    ro = profile.ro_paths + tuple(p for p in tool.ro_paths if p[1] not in have)
    env = dict(profile.env)
    env["PATH"] = ":".join([*tool.bin_dirs, env.get("PATH", "")]).rstrip(":")
    env.update(dict(tool.env))
    return replace(profile, ro_paths=ro, env=tuple(sorted(env.items())))
