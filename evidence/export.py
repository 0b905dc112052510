"""Inclusion proofs against the latest checkpoint, and DSSE/in-toto export of an entry."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from . import dsse
from .errors import EntryNotFound
from .merkle import inclusion_proof, leaf_hash, verify_inclusion
from .store import EvidenceStore

ENTRY_PREDICATE = "https://oms.local/evidence-entry/v1"
SLSA_VSA = "https://slsa.dev/verification_summary/v1"


def prove(store: EvidenceStore, seq: int) -> dict[str, Any]:
    """RFC 6962 inclusion proof of entry `seq` in the latest signed checkpoint, verified."""
    checkpoint, note = store.latest_checkpoint()
    lines = store.lines()
    if not 0 <= seq < len(lines):
        raise EntryNotFound(f"no entry {seq}; the log has {len(lines)} entries")
    if seq >= checkpoint.size:
        raise EntryNotFound(f"entry {seq} is not yet covered by a checkpoint")
    leaves = [leaf_hash(line) for line in lines[: checkpoint.size]]
    proof = inclusion_proof(seq, leaves)
    ok = verify_inclusion(seq, checkpoint.size, leaves[seq], proof, checkpoint.root)
    return {
        "seq": seq,
        "leaf_hash": leaves[seq].hex(),
        "tree_size": checkpoint.size,
        "root": base64.b64encode(checkpoint.root).decode(),
        "proof": [p.hex() for p in proof],
        "verified": ok,
        "checkpoint": note.decode("utf-8"),
    }


def entry_statement(store: EvidenceStore, seq: int) -> dict[str, Any]:
    """An in-toto Statement v1 for an entry.

    Subjects: the entry's own subjects plus the entry line itself. A `result`
    entry carries a SLSA verification-summary predicate; others carry the entry.
    """
    line = store.line(seq)
    entry = store.entry(seq)  # TamperDetected if the line is not a valid entry
    subjects: list[dict[str, Any]] = [s.model_dump() for s in entry.subject]
    this_entry = {
        "uri": f"oms-evidence/{store.repo_id}/{seq}",
        "digest": {"sha256": hashlib.sha256(line).hexdigest()},
    }
    if entry.kind == "result" and "vsa" in entry.data and subjects:
        # The subject is the verified commit alone; the entry is the attestation input.
        d = entry.data
        predicate = {
            **d["vsa"],
            "inputAttestations": [this_entry],
            "oms": {
                "decision": d.get("decision"),
                "reasons": d.get("reasons", []),
                "base": d.get("base"),
                "plan_digest": d.get("plan_digest"),
                "profile_digest": d.get("profile_digest"),
                "scanners": d.get("scanners", []),
                "checks": [
                    {
                        k: c.get(k)
                        for k in (
                            "name",
                            "exit_code",
                            "timed_out",
                            "duration_ms",
                            "stdout_blob",
                            "stderr_blob",
                        )
                    }
                    for c in d.get("checks", [])
                ],
            },
        }
        return dsse.statement(subjects, SLSA_VSA, predicate)
    subjects.append({"name": this_entry["uri"], "digest": this_entry["digest"]})
    predicate = {"entry": entry.model_dump(mode="json"), "log": store.origin}
    return dsse.statement(subjects, ENTRY_PREDICATE, predicate)


def export_dsse(store: EvidenceStore, seq: int) -> dict[str, Any]:
    key = store.key
    return dsse.export_statement(entry_statement(store, seq), key.private, key.key_id)
