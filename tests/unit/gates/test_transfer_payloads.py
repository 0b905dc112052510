"""The transfer gate's evidence payloads: today's keys plus the version, and a record of
a transfer kind that does not fit its model is tampering."""

from __future__ import annotations

from typing import Any

import pytest

from evidence import Entry, TamperDetected
from evidence.entry import ZERO_HASH
from gatekeeper.digest import Sha256Digest
from gatekeeper.gates.transfer.payloads import (
    ApprovalRecord,
    HumanApprover,
    PolicyApprover,
    PreviewRecord,
    ReleaseRecord,
    shown,
)

DIGEST = Sha256Digest.of(b"manifest")
STAMP = "2026-01-01T00:00:00Z"


def entry(kind: str, data: dict[str, Any]) -> Entry:
    return Entry(seq=7, prev=ZERO_HASH, time=STAMP, kind=kind, subject=[], data=data,
                 blobs=[], policy=None)  # fmt: skip


def approval(**over: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "v": 1, "digest": str(DIGEST), "approval_id": "1" * 32,
        "approver": {"kind": "human", "name": "ann", "uid": 1000},
        "time": STAMP, "expires": STAMP,
    }  # fmt: skip
    data.update(over)
    return data


def test_records_carry_todays_keys_and_a_version() -> None:
    preview = PreviewRecord(digest=DIGEST, worktree="/w", blocked=False, destination="a:b",
                            bytes=3, items=1, autopilot_rule=None)  # fmt: skip
    assert preview.data() == {"v": 1, "digest": str(DIGEST), "worktree": "/w", "blocked": False,
                              "destination": "a:b", "bytes": 3, "items": 1,
                              "autopilot_rule": None}  # fmt: skip
    release = ReleaseRecord(digest=DIGEST, approval_id="2" * 32, payload_sha256="3" * 64,
                            bytes=9, out="file")  # fmt: skip
    assert shown(release) == {"digest": str(DIGEST), "approval_id": "2" * 32,
                              "payload_sha256": "3" * 64, "bytes": 9, "out": "file"}  # fmt: skip


def test_approvers_dump_as_before_human_with_uid_policy_without() -> None:
    human = ApprovalRecord.of(entry("transfer.approve", approval()))
    assert human.approver == HumanApprover(name="ann", uid=1000)
    assert shown(human) == {k: v for k, v in approval().items() if k != "v"}
    policy = {"kind": "policy", "name": "policy:small"}
    rec = ApprovalRecord.of(entry("transfer.approve", approval(approver=policy)))
    assert rec.approver == PolicyApprover(name="policy:small")
    assert shown(rec)["approver"] == policy


def test_a_record_written_before_versioning_reads_as_version_1() -> None:
    data = {k: v for k, v in approval().items() if k != "v"}
    assert ApprovalRecord.of(entry("transfer.approve", data)).v == 1


@pytest.mark.parametrize(
    "misfit",
    [
        {"note": "sha256:" + "0" * 64},  # an unknown key
        {"approver": {"name": "sha256:" + "0" * 64}},  # no approver kind
        {"digest": str(DIGEST).upper()},  # another spelling of the digest
        {"digest": DIGEST.hex},  # bare hex
        {"digest": 7},
        {"expires": "tomorrow"},
        {"approval_id": "not hex"},
    ],
)
def test_an_approval_that_does_not_fit_its_model_is_tampering(misfit: dict[str, Any]) -> None:
    with pytest.raises(TamperDetected, match="does not fit its model"):
        ApprovalRecord.of(entry("transfer.approve", approval(**misfit)))


def test_a_release_or_preview_missing_a_key_is_tampering() -> None:
    with pytest.raises(TamperDetected, match="does not fit its model"):
        ReleaseRecord.of(entry("transfer.release", {"digest": str(DIGEST)}))
    with pytest.raises(TamperDetected, match="does not fit its model"):
        PreviewRecord.of(entry("transfer.preview", {"digest": str(DIGEST), "worktree": "/w"}))
