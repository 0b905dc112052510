"""Where a manifest is and what state it is in: located from its digest alone, verified,
and judged from its typed evidence records (previewed, approved, released, expired,
blocked). `show` and `list_transfers` are the read-only views of that state."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from evidence import Entry, EvidenceStore, TamperDetected, state_root
from evidence.dsse import DsseError, verify_envelope
from evidence.state import ensure_private_dir
from gatekeeper.digest import Sha256Digest, resolve_prefix
from gatekeeper.errors import UsageError
from gatekeeper.gates.transfer import clock
from gatekeeper.gates.transfer.manifest import PAYLOAD_TYPE, Manifest
from gatekeeper.gates.transfer.packet import Packet, packet
from gatekeeper.gates.transfer.payloads import ApprovalRecord, PreviewRecord, ReleaseRecord, shown
from gatekeeper.repo.git import Repo, open_repo

Status = Literal["blocked", "released", "approved", "expired", "previewed"]


def transfers_dir(store: EvidenceStore) -> Path:
    d = store.dir.parent / "transfers"
    ensure_private_dir(d)
    return d


def envelope_path(store: EvidenceStore, digest: Sha256Digest) -> Path:
    return transfers_dir(store) / f"{digest.hex}.dsse.json"


def load_manifest(store: EvidenceStore, digest: Sha256Digest) -> Manifest:
    """The stored manifest, verified: signature, payload type, digest and repository."""
    return load_sealed(store, digest)[0]


def load_sealed(store: EvidenceStore, digest: Sha256Digest) -> tuple[Manifest, bytes]:
    """(the stored manifest, verified as `load_manifest` does, its canonical bytes): the
    bytes the digest was checked against, for a caller that sends them (release)."""
    path = envelope_path(store, digest)
    try:
        envelope = json.loads(path.read_bytes())
        payload = verify_envelope(envelope, store.key.public)
    except FileNotFoundError:
        raise UsageError(f"no manifest {digest}") from None
    except (DsseError, ValueError):
        raise TamperDetected(f"manifest {digest} does not verify: the stored copy was altered"
                             ) from None  # fmt: skip
    m = Manifest.model_validate_json(payload)
    canonical = m.canonical()
    if Sha256Digest.of(canonical) != digest or envelope.get("payloadType") != PAYLOAD_TYPE:
        raise TamperDetected(f"manifest {digest} does not match its digest")
    if m.repo_id != store.repo_id:
        raise TamperDetected(f"manifest {digest} is stored under a repository it does not name")
    return m, canonical


# -- finding the manifest and its repository from the digest alone ---------------------


@dataclass(frozen=True)
class Located:
    """A verified manifest, the store that holds it and the repository it names."""

    repo: Repo
    store: EvidenceStore
    manifest: Manifest
    digest: Sha256Digest
    canonical: bytes  # the manifest's canonical bytes, which hash to `digest`


def _store_holding(root: Path, digest: Sha256Digest) -> EvidenceStore:
    """The one repository under the state root whose transfers hold this manifest."""
    found = sorted(root.glob(f"repos/*/transfers/{digest.hex}.dsse.json"))
    if not found:
        raise UsageError(f"no manifest {digest} under {root}")
    if len(found) > 1:
        raise TamperDetected(f"manifest {digest} is stored under {len(found)} repositories; "
                             "pass --repo")  # fmt: skip
    return EvidenceStore.open(root, found[0].parent.parent.name)


def _cwd_repo() -> Repo | None:
    try:
        return open_repo(Path.cwd())
    except (UsageError, OSError):
        return None


def _recorded_repo(store: EvidenceStore, digest: Sha256Digest) -> Repo:
    """The worktree the manifest was previewed in (from its preview record), if it is
    still the repository the manifest names."""
    previews = [r for _, r in store.payloads(PreviewRecord) if r.digest == digest]
    if not previews:
        raise UsageError(f"no worktree recorded for {digest}; pass --repo")
    where = previews[-1].worktree
    try:
        repo = open_repo(Path(where))
    except UsageError:
        raise UsageError(f"the repository of {digest} is no longer at {where}; pass --repo"
                         ) from None  # fmt: skip
    if repo.repo_id != store.repo_id:
        raise UsageError(f"{where} is no longer the repository of {digest}; pass --repo")
    return repo


def locate(repo_dir: Path | None, digest: Sha256Digest) -> Located:
    """The manifest named by a digest. With `repo_dir`, in that repository; without, in
    the one repository of the state root that holds it — the current directory's when it
    is that repository, else the worktree the preview recorded."""
    if repo_dir is not None:
        repo = open_repo(repo_dir)
        store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
        m, canonical = load_sealed(store, digest)
        return Located(repo, store, m, digest, canonical)
    store = _store_holding(state_root(), digest)
    m, canonical = load_sealed(store, digest)
    here = _cwd_repo()
    repo = here if here and here.repo_id == store.repo_id else _recorded_repo(store, digest)
    # Found by the digest alone; now bound to the repository as every other open is.
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    return Located(repo, store, m, digest, canonical)


def manifest_digest(repo_dir: Path | None, text: str) -> Sha256Digest:
    """The manifest digest a user typed, in full or as a unique prefix of at least 12 hex
    digits: among this repository's manifests with `repo_dir`, else the state root's."""
    if repo_dir is not None:
        where = state_root() / "repos" / open_repo(repo_dir).repo_id / "transfers"
        found = where.glob("*.dsse.json")
    else:
        found = state_root().glob("repos/*/transfers/*.dsse.json")
    known = (p.name.removesuffix(".dsse.json") for p in found)
    return resolve_prefix(text, known, "manifest")


# -- state, derived from typed evidence records ----------------------------------------


@dataclass(frozen=True)
class TransferState:
    status: Status
    approvals: tuple[ApprovalRecord, ...]
    releases: tuple[ReleaseRecord, ...]
    live: tuple[ApprovalRecord, ...]  # approvals neither used by a release nor expired


@dataclass(frozen=True)
class Ledger:
    """Every transfer record of one store, each read once through its model."""

    previews: tuple[tuple[Entry, PreviewRecord], ...]
    approvals: tuple[ApprovalRecord, ...]
    releases: tuple[ReleaseRecord, ...]

    @classmethod
    def read(cls, store: EvidenceStore) -> Ledger:
        kinds = (PreviewRecord.KIND, ApprovalRecord.KIND, ReleaseRecord.KIND)
        entries = store.entries(kinds)  # one read of the log for all three kinds
        return cls(
            tuple((e, PreviewRecord.of(e)) for e in entries if e.kind == PreviewRecord.KIND),
            tuple(ApprovalRecord.of(e) for e in entries if e.kind == ApprovalRecord.KIND),
            tuple(ReleaseRecord.of(e) for e in entries if e.kind == ReleaseRecord.KIND),
        )

    def state_of(self, m: Manifest, digest: Sha256Digest) -> TransferState:
        """The manifest's state: only records naming exactly this digest count."""
        approvals = tuple(a for a in self.approvals if a.digest == digest)
        releases = tuple(r for r in self.releases if r.digest == digest)
        used = {r.approval_id for r in releases}
        now = clock.now()
        live = tuple(a for a in approvals if a.approval_id not in used
                     and clock.parse_stamp(a.expires) > now)  # fmt: skip
        status: Status
        if m.blocked:
            status = "blocked"
        elif releases:
            status = "released"
        elif live:
            status = "approved"
        elif clock.parse_stamp(m.expires) <= now or approvals:
            status = "expired"
        else:
            status = "previewed"
        return TransferState(status, approvals, releases, live)


def state_at(at: Located) -> TransferState:
    return Ledger.read(at.store).state_of(at.manifest, at.digest)


# -- show, list ------------------------------------------------------------------------


@dataclass(frozen=True)
class Shown:
    """`oms transfer show`: a manifest, its packet and its state."""

    digest: Sha256Digest
    manifest: Manifest
    state: TransferState
    approval_packet: Packet

    def to_json(self) -> dict[str, Any]:
        return {"digest": str(self.digest), "status": self.state.status,
                "manifest": self.manifest.model_dump(mode="json"),
                "approval_packet": self.approval_packet.to_json(),
                "approvals": [shown(a) for a in self.state.approvals],
                "releases": [shown(r) for r in self.state.releases]}  # fmt: skip


def show(repo_dir: Path | None, digest: str | Sha256Digest) -> Shown:
    at = locate(repo_dir, Sha256Digest.parse(digest))
    return Shown(at.digest, at.manifest, state_at(at), packet(at.manifest, at.digest))


@dataclass(frozen=True)
class TransferRow:
    digest: Sha256Digest
    status: str  # a Status, or "unverifiable: <why>" for a manifest that does not verify
    time: str
    destination: str
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {"digest": str(self.digest), "status": self.status, "time": self.time,
                "destination": self.destination, "bytes": self.bytes}  # fmt: skip


@dataclass(frozen=True)
class TransferList:
    transfers: tuple[TransferRow, ...]

    def to_json(self) -> dict[str, Any]:
        return {"transfers": [r.to_json() for r in self.transfers]}


def _row(store: EvidenceStore, ledger: Ledger, entry: Entry, rec: PreviewRecord) -> TransferRow:
    status: str
    try:
        status = ledger.state_of(load_manifest(store, rec.digest), rec.digest).status
    except (TamperDetected, UsageError) as exc:
        status = f"unverifiable: {exc}"
    return TransferRow(rec.digest, status, entry.time, rec.destination, rec.bytes)


def list_transfers(repo_dir: Path) -> TransferList:
    repo = open_repo(repo_dir)
    store = EvidenceStore.open(state_root(), repo.repo_id, common_dir=repo.common_dir)
    ledger = Ledger.read(store)  # read once, not once per manifest
    return TransferList(tuple(_row(store, ledger, e, r) for e, r in ledger.previews))
