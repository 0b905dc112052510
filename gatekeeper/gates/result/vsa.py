"""The result gate's attestation: a SLSA verification summary (VSA v1) for a verdict.

The predicate is built once, when the `result` entry is written (`vsa_for`), and read
back from that entry when it is exported (`result_predicate`, which `oms evidence export
--dsse` hands to evidence's exporter): evidence itself knows no gate's payload.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from evidence import Entry, TamperDetected
from evidence.export import Attestation
from gatekeeper.gates.result.payloads import ResultRecord, Vsa, VsaPolicy, VsaVerifier
from gatekeeper.gates.result.verdict import Decision
from gatekeeper.repo.git import Repo
from policy import LoadedPolicy

SLSA_VSA = "https://slsa.dev/verification_summary/v1"
VERIFIER_ID = "https://oms.local/process-result"
# Per check, what the exported predicate shows (the tails stay in the entry).
EXPORTED = {"name", "exit_code", "timed_out", "duration_ms", "stdout_blob", "stderr_blob"}


def vsa_for(repo: Repo, sha: str, decision: Decision, loaded: LoadedPolicy, policy_at: str) -> Vsa:
    """The predicate for `decision` on `sha`, judged by the policy at `policy_at`."""
    return Vsa(
        verifier=VsaVerifier(id=VERIFIER_ID),
        timeVerified=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        resourceUri=f"git+file://{repo.top}@{sha}",
        policy=VsaPolicy(
            uri=f"git+file://{repo.top}@{policy_at}#oms.toml",
            digest={"sha256": loaded.digest.removeprefix("sha256:")},
        ),
        verificationResult="PASSED" if decision == Decision.READY else "FAILED",
        verifiedLevels=[],
    )


def result_predicate(entry: Entry, att: Attestation) -> tuple[str, dict[str, Any]] | None:
    """For a `result` entry: the VSA predicate whose input attestation is the entry line
    (the statement's subject is then the verified commit alone). None for any other
    entry, which is exported as itself."""
    if entry.kind != ResultRecord.KIND or "vsa" not in entry.data or not entry.subject:
        return None
    try:
        record = ResultRecord.of(entry)
    except TamperDetected:
        # Entries written before the payload model existed: exported as themselves.
        return None
    predicate = {
        **record.vsa.model_dump(mode="json"),
        "inputAttestations": [att.descriptor()],
        "oms": {
            "decision": record.decision.value,
            "reasons": list(record.reasons),
            "base": record.base,
            "plan_digest": record.plan_digest,
            "profile_digest": record.profile_digest,
            "scanners": [s.model_dump(mode="json") for s in record.scanners or ()],
            "checks": [c.model_dump(mode="json", include=EXPORTED) for c in record.checks],
            **att.membership,
        },
    }
    return SLSA_VSA, predicate
