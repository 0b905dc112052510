"""`oms transfer release`: write the approved payload, once, if nothing changed.

Only against a live approval (matching, unused, unexpired), after re-reading every
byte and finding it as previewed; recorded as `transfer.release`.
"""

from __future__ import annotations

import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidence import Draft, EvidenceStore, TamperDetected
from evidence.log import locked
from gatekeeper.digest import Sha256Digest
from gatekeeper.errors import Blocked
from gatekeeper.gates.transfer.autopilot import trusted_policy
from gatekeeper.gates.transfer.manifest import Manifest
from gatekeeper.gates.transfer.payloads import ApprovalRecord, ReleaseRecord, subject_of
from gatekeeper.gates.transfer.state import Located, locate, state_at, transfers_dir
from gatekeeper.gates.transfer.unchanged import check_unchanged


@dataclass(frozen=True)
class Released:
    """`oms transfer release`: the recorded release (the payload itself is returned apart)."""

    record: ReleaseRecord
    evidence_seq: int

    def to_json(self) -> dict[str, Any]:
        r = self.record
        return {"digest": str(r.digest), "status": "released", "evidence_seq": self.evidence_seq,
                "approval_id": r.approval_id, "payload_bytes": r.bytes,
                "payload_sha256": r.payload_sha256}  # fmt: skip


def stored_pack(m: Manifest, store: EvidenceStore) -> bytes:
    """All item bytes as previewed, from the payload blob (verified against its name)."""
    return store.blobs.get(m.payload_blob) if m.payload_blob else b""


def payload_of(m: Manifest, pack: bytes, canonical: bytes) -> bytes:
    """The release format: the manifest's canonical JSON on one line, then for each item a
    JSON header line {"path","bytes","sha256","mode"} followed by exactly that many bytes
    and a newline. `canonical`: `m.canonical()`, as the manifest's digest was checked."""
    view = memoryview(pack)  # items are hashed and joined from the pack without copies
    heads = m.model_dump(include={"items"}, exclude={"items": {"__all__": {"source_sha256"}}})
    parts: list[bytes | memoryview] = [canonical, b"\n"]
    at = 0
    for item, head in zip(m.items, heads["items"], strict=True):
        data = view[at : at + item.bytes]
        at += item.bytes
        if hashlib.sha256(data).hexdigest() != item.sha256:
            raise TamperDetected(f"stored payload of {m.digest()} does not match its manifest")
        parts += [json.dumps(head, sort_keys=True).encode(), b"\n", data, b"\n"]
    return b"".join(parts)


def _live_approval(at: Located) -> ApprovalRecord:
    st = state_at(at)
    if at.manifest.blocked:
        raise Blocked("a blocked manifest is never released")
    if st.releases:
        raise Blocked(f"{at.digest} was already released; one manifest, one release")
    if not st.live:
        raise Blocked(f"no unused, unexpired approval for {at.digest} (none, or it expired)")
    return st.live[0]


def release(
    repo_dir: Path | None, digest: str | Sha256Digest, out: str | None
) -> tuple[Released, bytes]:
    """(the recorded release, the payload to write to `out`: stdout for None or "-")."""
    at = locate(repo_dir, Sha256Digest.parse(digest))
    with locked(transfers_dir(at.store), "lock"):
        approval = _live_approval(at)
        # The stored pack is read and verified on a second thread (one large read and one
        # hash, both without the GIL) while every worktree byte is re-read here; it is
        # used only once that check has passed.
        with ThreadPoolExecutor(1, thread_name_prefix="oms-transfer-release") as pool:
            pack = pool.submit(stored_pack, at.manifest, at.store)
            check_unchanged(at.repo, at.manifest, trusted_policy(at.repo).policy.transfer)
            payload = payload_of(at.manifest, pack.result(), at.canonical)
        record = ReleaseRecord(
            digest=at.digest, approval_id=approval.approval_id,
            payload_sha256=hashlib.sha256(payload).hexdigest(), bytes=len(payload),
            out="stdout" if out in (None, "-") else "file",
        )  # fmt: skip
        entry = at.store.append(Draft.of(record, subject=subject_of(at.digest)))
    return Released(record, entry.seq), payload
