"""`oms toolchain prepare`: build the base's toolchains that are not built yet, record them.

A toolchain is built only from its inputs at the policy commit (the default branch's tip),
outside the sandbox, into `$OMS_TOOLCHAIN_DIR/<hex>` (venvs do not relocate: it is bound
at that same path), frozen read-only, digested, and recorded twice: the record in the
state root that gates compare the tree with, and a `toolchain.prepare` evidence entry. A
second prepare of the same inputs verifies the tree and builds nothing.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from evidence import Draft, EvidenceStore, state_root
from evidence.store import utc_now
from gatekeeper.errors import UsageError
from gatekeeper.gates.mark import base_policy
from gatekeeper.gates.toolchain.build import BuildRequest, build, layout_of
from gatekeeper.gates.toolchain.identity import Spec, spec_of
from gatekeeper.gates.toolchain.payloads import (
    ToolchainBuild,
    ToolchainPrepared,
    ToolchainRecord,
)
from gatekeeper.gates.toolchain.store import (
    build_lock,
    read_record,
    remove_record,
    toolchain_root,
    tree_dir,
    write_record,
)
from gatekeeper.gates.toolchain.tree import freeze, remove_tree, tree_digest
from gatekeeper.repo.git import Repo, open_repo
from policy import LoadedPolicy, Toolchain

Progress = Callable[[str], None]


def _quiet(_line: str) -> None:
    return None


class PreparedToolchain(BaseModel):
    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    name: str
    kind: str
    id: str
    dir: str
    state: str  # built | rebuilt | cached
    tree_digest: str
    files: int
    bytes: int
    allow_build: bool
    duration_ms: int
    evidence_seq: int | None  # None when nothing was built


class Prepared(BaseModel):
    """`oms toolchain prepare`'s answer."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)
    policy_commit: str
    toolchain_dir: str
    toolchains: tuple[PreparedToolchain, ...]

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def selected(loaded: LoadedPolicy, names: Sequence[str]) -> list[Toolchain]:
    """The named toolchains of the policy, in the order given (all when none are named)."""
    known = {t.name: t for t in loaded.policy.toolchains}
    missing = [n for n in names if n not in known]
    if missing:
        have = ", ".join(sorted(known)) or "none"
        raise UsageError(
            f"no toolchain named {missing[0][:64]!r} in the base's policy (defined: {have})"
        )
    return [known[n] for n in dict.fromkeys(names)] if names else list(known.values())


def _subject(repo: Repo, info: ToolchainBuild, commit: str) -> list[dict[str, object]]:
    """The tree built, and the commit its inputs were read from."""
    return [
        {
            "name": f"oms-toolchain:{info.name}",
            "digest": {"sha256": info.tree_digest.removeprefix("sha256:")},
        },
        {"name": f"git+file://{repo.top}", "digest": {"gitCommit": commit}},
    ]


def _cached(spec: Spec, dest: Path, progress: Progress) -> PreparedToolchain | None:
    """The recorded tree when it is intact; None (after saying why) when it must be built."""
    record = read_record(spec.id)
    if record is None:
        return None
    if dest.is_dir() and not dest.is_symlink():
        started = time.monotonic()
        td = tree_digest(dest)
        if td.digest == record.tree_digest:
            return PreparedToolchain(
                name=spec.name,
                kind=record.kind,
                id=spec.id,
                dir=record.dir,
                state="cached",
                tree_digest=td.digest,
                files=td.files,
                bytes=td.bytes,
                allow_build=record.allow_build,
                duration_ms=int((time.monotonic() - started) * 1000),
                evidence_seq=None,
            )
        progress(
            f"toolchain {spec.name}: its tree was modified since it was prepared "
            f"({td.digest[:19]}…, recorded {record.tree_digest[:19]}…); rebuilding"
        )
    else:
        progress(f"toolchain {spec.name}: its tree {dest} is gone; rebuilding")
    return None


def _build_tree(
    spec: Spec, repo: Repo, loaded: LoadedPolicy, dest: Path, progress: Progress
) -> None:
    remove_record(spec.id)  # the old tree is not what any record says any more
    remove_tree(dest)
    dest.mkdir(mode=0o755)
    work = Path(tempfile.mkdtemp(prefix="oms-toolchain-"))
    try:
        build(
            BuildRequest(
                toolchain=spec.toolchain,
                runtime=spec.runtime,
                files=spec.files,
                dest=dest,
                work=work,
                repo=repo,
                loaded=loaded,
                progress=progress,
            )
        )
        freeze(dest)
    except BaseException:
        remove_tree(dest)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def prepare_spec(
    spec: Spec, repo: Repo, store: EvidenceStore, loaded: LoadedPolicy, progress: Progress
) -> PreparedToolchain:
    """Build `spec` unless an intact tree is recorded for it; record what was built."""
    tc = spec.toolchain
    with build_lock(spec.id):
        dest = tree_dir(spec.id)
        cached = _cached(spec, dest, progress)
        if cached is not None:
            return cached
        rebuilt = read_record(spec.id) is not None
        started = time.monotonic()
        progress(
            f"toolchain {tc.name}: building {tc.kind} from {tc.lock} at "
            f"{spec.policy_commit[:12]} into {dest}"
        )
        _build_tree(spec, repo, loaded, dest, progress)
        td = tree_digest(dest)
        duration_ms = int((time.monotonic() - started) * 1000)
        info = ToolchainBuild(
            id=spec.id,
            name=tc.name,
            kind=tc.kind,
            lock=tc.lock,
            inputs=dict(spec.inputs),
            runtime=spec.runtime.path,
            runtime_version=spec.runtime.version,
            allow_build=tc.allow_build,
            dir=str(dest),
            tree_digest=td.digest,
            files=td.files,
            bytes=td.bytes,
        )
        layout = layout_of(tc, dest)
        binds = (spec.runtime.prefix,) if spec.runtime.prefix else ()
        write_record(
            ToolchainRecord(
                **info.model_dump(),
                prepared_at=utc_now(),
                bin_dirs=layout.bin_dirs,
                env=layout.env,
                links=layout.links,
                binds=binds,
            )
        )
        payload = ToolchainPrepared(
            build=info, policy_commit=spec.policy_commit, duration_ms=duration_ms
        )
        subject = _subject(repo, info, spec.policy_commit)
        entry = store.append(Draft.of(payload, subject=subject, policy=loaded.digest))
        progress(
            f"toolchain {tc.name}: {td.files} files, {td.bytes} bytes, "
            f"{td.digest[:19]}… (evidence entry {entry.seq})"
        )
        return PreparedToolchain(
            name=tc.name,
            kind=tc.kind,
            id=spec.id,
            dir=str(dest),
            state="rebuilt" if rebuilt else "built",
            tree_digest=td.digest,
            files=td.files,
            bytes=td.bytes,
            allow_build=tc.allow_build,
            duration_ms=duration_ms,
            evidence_seq=entry.seq,
        )


def prepare(repo_dir: Path, names: Sequence[str] = (), progress: Progress = _quiet) -> Prepared:
    """`oms toolchain prepare [NAME…]`: every named toolchain (all by default) ready."""
    repo = open_repo(repo_dir)
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    store.key  # noqa: B018 -- fail closed before anything is built when the key is unusable
    commit, loaded = base_policy(repo)
    specs = [spec_of(repo, commit, tc) for tc in selected(loaded, names)]
    done = tuple(prepare_spec(s, repo, store, loaded, progress) for s in specs)
    return Prepared(policy_commit=commit, toolchain_dir=str(toolchain_root()), toolchains=done)
