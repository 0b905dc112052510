"""`oms transfer approve sha256:<digest> --code <code>`: one approval of one manifest.

The yes comes from a bounded autopilot rule of the default branch's policy, or from a
human at the controlling terminal (never stdin); it is recorded as `transfer.approve`,
single use, expiring. The command works as copied, from any directory (`state.locate`).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from evidence import Draft
from evidence.log import locked
from gatekeeper.digest import Sha256Digest
from gatekeeper.errors import Blocked
from gatekeeper.gates.transfer import clock
from gatekeeper.gates.transfer.autopilot import approving_rule, trusted_policy
from gatekeeper.gates.transfer.manifest import Manifest
from gatekeeper.gates.transfer.packet import prompt_lines
from gatekeeper.gates.transfer.payloads import (
    ApprovalRecord,
    HumanApprover,
    PolicyApprover,
    subject_of,
)
from gatekeeper.gates.transfer.state import Located, locate, state_at, transfers_dir
from gatekeeper.gates.transfer.tty import confirm_at_terminal
from gatekeeper.gates.transfer.unchanged import check_unchanged
from policy import TransferPolicy


@dataclass(frozen=True)
class Approved:
    """`oms transfer approve`: the recorded approval and its evidence seq."""

    record: ApprovalRecord
    evidence_seq: int

    def to_json(self) -> dict[str, Any]:
        r = self.record
        return {"digest": str(r.digest), "approval_id": r.approval_id,
                "approver": r.approver.model_dump(mode="json"), "time": r.time,
                "expires": r.expires, "evidence_seq": self.evidence_seq,
                "status": "approved"}  # fmt: skip


def _check_unapproved(at: Located) -> None:
    st = state_at(at)
    if st.releases:
        raise Blocked("this manifest was already released; preview again")
    if st.live:
        raise Blocked("this manifest already has an unused approval")


def _check_approvable(at: Located, code: str) -> None:
    m = at.manifest
    if not secrets.compare_digest(code.encode(), m.nonce[:8].encode()):
        raise Blocked("the code does not match this manifest; copy the command from its packet")
    if m.blocked:
        raise Blocked("a blocked manifest cannot be approved: " + "; ".join(m.block_reasons))
    if clock.parse_stamp(m.expires) <= clock.now():
        raise Blocked("the manifest has expired; preview again")
    _check_unapproved(at)


def _approver(m: Manifest, tp: TransferPolicy) -> HumanApprover | PolicyApprover:
    rule = approving_rule(tp, m)
    if rule is not None:
        return PolicyApprover(name=f"policy:{rule}")
    return confirm_at_terminal(prompt_lines(m))  # Blocked without a terminal or a yes


def approve(repo_dir: Path | None, digest: str | Sha256Digest, code: str) -> Approved:
    """Record one approval of one manifest: at most one live approval per manifest, even
    when two approvals race (checked again under the transfers lock after the prompt)."""
    at = locate(repo_dir, Sha256Digest.parse(digest))
    _check_approvable(at, code)
    tp = trusted_policy(at.repo).policy.transfer
    check_unchanged(at.repo, at.manifest, tp)
    approver = _approver(at.manifest, tp)
    with locked(transfers_dir(at.store), "lock"):
        _check_unapproved(at)
        now = clock.now()
        record = ApprovalRecord(
            digest=at.digest, approval_id=secrets.token_hex(16), approver=approver,
            time=clock.stamp(now), expires=clock.stamp(now + timedelta(seconds=tp.approval_ttl_s)),
        )  # fmt: skip
        entry = at.store.append(Draft.of(record, subject=subject_of(at.digest)))
    return Approved(record, entry.seq)
