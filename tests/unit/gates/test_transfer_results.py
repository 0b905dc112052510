"""Typed transfer results render exactly the JSON the commands printed before."""

from __future__ import annotations

import json

from support.manifests import manifest

from gatekeeper.digest import Sha256Digest
from gatekeeper.gates.transfer.approve import Approved
from gatekeeper.gates.transfer.packet import Packet, packet
from gatekeeper.gates.transfer.payloads import ApprovalRecord, PolicyApprover, ReleaseRecord
from gatekeeper.gates.transfer.release import Released
from gatekeeper.gates.transfer.state import TransferList, TransferRow

DIGEST = Sha256Digest.of(b"manifest")
STAMP = "2026-01-01T00:00:00Z"


def test_approved_json_keys_and_order() -> None:
    record = ApprovalRecord(digest=DIGEST, approval_id="1" * 32, time=STAMP, expires=STAMP,
                            approver=PolicyApprover(name="policy:small"))  # fmt: skip
    assert json.dumps(Approved(record, 5).to_json()) == json.dumps({
        "digest": str(DIGEST), "approval_id": "1" * 32,
        "approver": {"kind": "policy", "name": "policy:small"},
        "time": STAMP, "expires": STAMP, "evidence_seq": 5, "status": "approved",
    })  # fmt: skip


def test_released_json_keys_and_order() -> None:
    record = ReleaseRecord(digest=DIGEST, approval_id="1" * 32, payload_sha256="2" * 64,
                           bytes=40, out="stdout")  # fmt: skip
    assert json.dumps(Released(record, 6).to_json()) == json.dumps({
        "digest": str(DIGEST), "status": "released", "evidence_seq": 6,
        "approval_id": "1" * 32, "payload_bytes": 40, "payload_sha256": "2" * 64,
    })  # fmt: skip


def test_list_json() -> None:
    row = TransferRow(DIGEST, "previewed", STAMP, "anthropic:claude", 12)
    assert TransferList((row,)).to_json() == {"transfers": [{
        "digest": str(DIGEST), "status": "previewed", "time": STAMP,
        "destination": "anthropic:claude", "bytes": 12,
    }]}  # fmt: skip


def test_packet_names_the_digest_and_code_and_hides_the_command_when_blocked() -> None:
    m = manifest()
    assert packet(m, DIGEST).to_json() == {
        "summary": [
            "destination: anthropic:claude (api)",
            "purpose: review",
            "context: none; 0 item(s), 100 bytes; 0 path(s) excluded",
            "repository: main at cccccccccccc, clean-pushed (upstream origin/main)",
            "expires: 2026-01-01T01:00:00Z",
        ],
        "copyable_text_block": f"oms transfer approve sha256:{DIGEST.hex} --code 00000000",
    }
    blocked = packet(manifest(blocked=True, block_reasons=["too big"]), DIGEST)
    assert blocked == Packet(blocked.summary, "")
    assert blocked.summary[-1] == "BLOCKED: too big"


def test_a_blocked_packet_names_each_file_holding_a_secret_neutralised() -> None:
    found = [{"scanner": "gitleaks", "rule": "aws-access-token", "file": "app/\x1b[2Jcfg.py",
              "line": 3, "fingerprint": "ab" * 32}]  # fmt: skip
    blocked = packet(manifest(blocked=True, block_reasons=["1 secret finding(s)"],
                              findings=found), DIGEST)  # fmt: skip
    assert blocked.summary[-2:] == (
        "BLOCKED: 1 secret finding(s)",
        "  secret in app/\\u001b[2Jcfg.py line 3: aws-access-token (gitleaks), fingerprint "
        + "ab" * 8,
    )
