"""Verified reads of one entry: inclusion proofs, `show`, and DSSE/in-toto export.

Nothing is printed or signed before it is verified: the chain up to the entry,
that the checkpoint and the witness (both signed for this log) cover it and have
the root of the log they cover, and the entry's RFC 6962 inclusion proof. The
exported predicate carries the checkpoint and the proof, so an outside verifier
checks membership in the log, not just a signature over a line.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import checkpoint as cp
from . import dsse
from .canonical import ZERO_HASH
from .chaincheck import check_chunk
from .entry import Entry
from .errors import EntryNotFound, TamperDetected
from .merkle import inclusion_proof, root_from_leaf_hashes, verify_inclusion
from .store import EvidenceStore

ENTRY_PREDICATE = "https://oms.local/evidence-entry/v1"


@dataclass(frozen=True)
class VerifiedEntry:
    seq: int
    line: bytes
    entry: Entry
    proof: dict[str, Any]  # the inclusion proof and the checkpoint note it is against


def _signed(store: EvidenceStore) -> tuple[cp.Checkpoint, bytes, cp.Checkpoint]:
    checkpoint, note = store.latest_checkpoint()  # TamperDetected if missing or bad
    witness, _ = store.witness()
    return checkpoint, note, witness


def verified_entry(store: EvidenceStore, seq: int) -> VerifiedEntry:
    """Entry `seq`, verified as the module says; TamperDetected (exit 3) otherwise."""
    checkpoint, note, witness = _signed(store)
    lines = store.lines()
    if not 0 <= seq < len(lines):
        raise EntryNotFound(f"no entry {seq}; the log has {len(lines)} entries")
    covered = min(checkpoint.size, witness.size)
    if seq >= covered:
        raise TamperDetected(
            f"entry {seq} is not covered by the signed checkpoint and witness "
            f"(they cover {covered} entries); run `oms evidence audit`",
            seq=seq,
        )
    span = max(checkpoint.size, witness.size)
    if span > len(lines):
        raise TamperDetected("the log is shorter than its checkpoint: run `oms evidence audit`")
    chunk = check_chunk(lines[:span])
    if chunk.bad_index is not None or chunk.first_seq != 0 or chunk.first_prev != ZERO_HASH:
        bad = chunk.bad_index or 0
        raise TamperDetected(f"entry {bad}: {chunk.bad_reason or 'bad chain start'}", seq=bad)
    problem = store.genesis_problem(lines[0])
    if problem is not None:
        raise TamperDetected(f"entry 0: {problem}", seq=0)
    leaves = [chunk.leaves[i : i + 32] for i in range(0, 32 * span, 32)]
    for name, c in (("checkpoint", checkpoint), ("witness checkpoint", witness)):
        if root_from_leaf_hashes(leaves[: c.size]) != c.root:
            raise TamperDetected(f"the {name} root does not match the first {c.size} entries")
    path = inclusion_proof(seq, leaves[: checkpoint.size])
    if not verify_inclusion(seq, checkpoint.size, leaves[seq], path, checkpoint.root):
        raise TamperDetected(f"the inclusion proof of entry {seq} does not verify", seq=seq)
    try:
        entry = Entry.model_validate_json(lines[seq])
    except ValueError:
        raise TamperDetected(f"entry {seq} is not a valid entry", seq=seq) from None
    proof = {
        "seq": seq,
        "leaf_hash": leaves[seq].hex(),
        "tree_size": checkpoint.size,
        "root": base64.b64encode(checkpoint.root).decode(),
        "proof": [p.hex() for p in path],
        "verified": True,
        "checkpoint": note.decode("utf-8"),
    }
    return VerifiedEntry(seq, lines[seq], entry, proof)


def prove(store: EvidenceStore, seq: int) -> dict[str, Any]:
    """RFC 6962 inclusion proof of entry `seq` in the latest signed checkpoint, verified."""
    return verified_entry(store, seq).proof


def show(store: EvidenceStore, seq: int) -> dict[str, Any]:
    """One entry, only once it is verified as part of the signed log."""
    return verified_entry(store, seq).entry.model_dump(mode="json")


def _membership(store: EvidenceStore, v: VerifiedEntry) -> dict[str, Any]:
    """What an outside verifier needs to check the entry is in the log."""
    p = v.proof
    return {
        "log": store.origin,
        "checkpoint": p["checkpoint"],
        "inclusion_proof": {
            "log_index": v.seq,
            "tree_size": p["tree_size"],
            "leaf_hash": p["leaf_hash"],
            "hashes": p["proof"],
            "root": p["root"],
        },
    }


@dataclass(frozen=True)
class Attestation:
    """The entry line as an attestation input: its URI and digest, and its membership."""

    uri: str
    sha256: str
    membership: dict[str, Any]  # `_membership`: the checkpoint and the inclusion proof

    def descriptor(self) -> dict[str, Any]:
        """An in-toto ResourceDescriptor naming the entry line."""
        return {"uri": self.uri, "digest": {"sha256": self.sha256}}


# A gate's own predicate for the entries it writes: (predicate type, predicate), or None
# for an entry it does not claim. Evidence knows no gate's payload; the gate passes this.
PredicateBuilder = Callable[[Entry, Attestation], tuple[str, dict[str, Any]] | None]


def entry_statement(
    store: EvidenceStore,
    seq: int,
    predicate: PredicateBuilder | None = None,
    subjects: Sequence[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """An in-toto Statement v1 for an entry, verified first.

    When `predicate` claims the entry, its subjects are `subjects` (default: the entry's
    own) and the entry line is the predicate's input; otherwise the subjects are the
    entry's own plus the entry line, and the predicate is the entry with its checkpoint
    and inclusion proof.
    """
    v = verified_entry(store, seq)
    entry = v.entry
    own: list[dict[str, Any]] = [s.model_dump() for s in entry.subject]
    att = Attestation(
        uri=f"oms-evidence/{store.repo_id}/{seq}",
        sha256=hashlib.sha256(v.line).hexdigest(),
        membership=_membership(store, v),
    )
    claimed = predicate(entry, att) if predicate is not None else None
    if claimed is not None:
        return dsse.statement(list(subjects) if subjects is not None else own, *claimed)
    own.append({"name": att.uri, "digest": {"sha256": att.sha256}})
    body = {"entry": entry.model_dump(mode="json"), **att.membership}
    return dsse.statement(own, ENTRY_PREDICATE, body)


def export_dsse(
    store: EvidenceStore,
    seq: int,
    predicate: PredicateBuilder | None = None,
    subjects: Sequence[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    key = store.key
    statement = entry_statement(store, seq, predicate, subjects)
    return dsse.export_statement(statement, key.private, key.key_id)
