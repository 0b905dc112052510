"""The result gate's models: exit codes, today's JSON exactly, the evidence payloads."""

from __future__ import annotations

from typing import Any

import pytest

from evidence import Entry, Note, TamperDetected
from evidence.export import Attestation
from gatekeeper.gates.result.payloads import ResultRecord, ResultStart, Vsa
from gatekeeper.gates.result.verdict import (
    BranchDelivery,
    CheckResult,
    Decision,
    Delivery,
    ProtectedChange,
    PushDelivery,
    SecretFinding,
    Verdict,
)
from gatekeeper.gates.result.vsa import SLSA_VSA, result_predicate
from gatekeeper.gates.sandboxed import SandboxRun

SHA, BASE, BLOB = "c" * 40, "b" * 40, "d" * 64

CHECK = CheckResult(name="unit", exit_code=0, timed_out=False, signal=None, duration_ms=12,
                    stdout_bytes=3, stderr_bytes=0, stdout_blob=BLOB, stderr_blob=BLOB,
                    stdout_tail="ok\n", stderr_tail="")  # fmt: skip
FINDING = SecretFinding(scanner="gitleaks", rule="aws-access-token", file="a.py", line=3,
                        fingerprint="f" * 64, preview="AKIA…[redacted, 20 chars]",
                        allowed=False, end_line=None)  # fmt: skip
PROTECTED = ProtectedChange(path="oms.toml", status="M", pattern="oms.toml")


@pytest.mark.parametrize(
    ("decision", "code"),
    [(Decision.READY, 0), (Decision.FAILED, 1), (Decision.BLOCKED, 3), (Decision.UNAVAILABLE, 4)],
)
def test_each_decision_exits_with_the_shared_code_unavailable_is_4(
    decision: Decision, code: int
) -> None:
    v = Verdict(decision=decision, reasons=(), commit=SHA, base=BASE, evidence_seq=1)
    assert v.exit_code == code == decision.exit_code


def test_verdict_json_is_todays_json_exactly() -> None:
    delivered = Delivery(
        branch=BranchDelivery(branch="v", action="fast-forwarded", commit=SHA, previous=BASE),
        push=PushDelivery(remote="origin", branch="v"),
    )
    v = Verdict(decision=Decision.BLOCKED, reasons=("r1",), commit=SHA, base=BASE,
                evidence_seq=7, checks=(CHECK,), findings=(FINDING,),
                protected_changes=(PROTECTED,), delivered=delivered,
                timings_ms={"resolve": 3})  # fmt: skip
    assert v.to_json() == {
        "decision": "BLOCKED",
        "reasons": ["r1"],
        "commit": SHA,
        "base": BASE,
        "evidence_seq": 7,
        "checks": [
            {
                "name": "unit",
                "exit_code": 0,
                "timed_out": False,
                "signal": None,
                "duration_ms": 12,
                "stdout_bytes": 3,
                "stderr_bytes": 0,
                "stdout_blob": BLOB,
                "stderr_blob": BLOB,
                "stdout_tail": "ok\n",
                "stderr_tail": "",
            }
        ],
        "findings": [
            {
                "scanner": "gitleaks",
                "rule": "aws-access-token",
                "file": "a.py",
                "line": 3,
                "fingerprint": "f" * 64,
                "preview": "AKIA…[redacted, 20 chars]",
                "allowed": False,
                "end_line": None,
            }
        ],
        "protected_changes": [{"path": "oms.toml", "status": "M", "pattern": "oms.toml"}],
        "delivered": {
            "branch": {"branch": "v", "action": "fast-forwarded", "from": BASE, "commit": SHA},
            "push": {"remote": "origin", "branch": "v"},
        },
        "timings_ms": {"resolve": 3},
    }


def test_a_created_branch_has_no_from_and_a_plain_delivery_no_push() -> None:
    d = Delivery(branch=BranchDelivery(branch="v", action="created", commit=SHA))
    assert d.to_json() == {"branch": {"branch": "v", "action": "created", "commit": SHA}}


def test_verdict_is_frozen() -> None:
    v = Verdict(decision=Decision.READY, reasons=(), commit=SHA, base=BASE, evidence_seq=1)
    with pytest.raises(ValueError, match="frozen"):
        v.decision = Decision.FAILED  # type: ignore[misc]


START: dict[str, Any] = {
    "repo_id": "r", "base": BASE, "policy_commit": BASE, "candidate": SHA, "tree": "e" * 40,
    "policy_digest": "sha256:" + "1" * 64, "plan_digest": "sha256:" + "2" * 64,
    "ticket": None, "attempt": None,
}  # fmt: skip
VSA = Vsa.model_validate({
    "verifier": {"id": "https://oms.local/process-result"}, "timeVerified": "2026-01-01T00:00:00Z",
    "resourceUri": f"git+file:///r@{SHA}",
    "policy": {"uri": f"git+file:///r@{BASE}#oms.toml", "digest": {"sha256": "1" * 64}},
    "verificationResult": "FAILED", "verifiedLevels": [],
})  # fmt: skip


def _record(**stage: Any) -> ResultRecord:
    return ResultRecord(**START, start_seq=4, decision=Decision.BLOCKED, reasons=("r",),
                        checks=(), findings=(), vsa=VSA, **stage)  # fmt: skip


def test_result_record_leaves_out_the_keys_of_stages_never_reached() -> None:
    data = _record().data()
    assert set(data) == {*START, "v", "start_seq", "decision", "reasons", "checks", "findings",
                         "vsa"}  # fmt: skip
    reached = _record(protected=(PROTECTED,), changed_files=1, commits=1, scanners=(),
                      profile_digest="sha256:" + "3" * 64).data()  # fmt: skip
    assert reached["protected"] == [PROTECTED.model_dump()] and "profile_digest" in reached


def _entry(kind: str, data: dict[str, Any], seq: int = 5) -> Entry:
    subject = [{"name": "git+file:///r", "digest": {"gitCommit": SHA}}]
    return Entry.model_validate({"seq": seq, "prev": "0" * 64, "time": "t", "kind": kind,
                                 "subject": subject, "data": data, "blobs": [],
                                 "policy": None})  # fmt: skip


def test_payloads_read_back_from_their_entries_and_reject_unknown_keys() -> None:
    record = _record(profile_digest="sha256:" + "3" * 64)
    assert ResultRecord.of(_entry("result", record.data())) == record
    assert ResultStart.of(_entry("result.start", START)) == ResultStart(**START)
    with pytest.raises(TamperDetected, match="does not fit"):
        ResultRecord.of(_entry("result", {**record.data(), "extra": 1}))


def test_the_vsa_predicate_is_the_result_gates_and_only_for_result_entries() -> None:
    att = Attestation(uri="oms-evidence/r/5", sha256="9" * 64, membership={"log": "L"})
    record = _record(profile_digest="sha256:" + "3" * 64)
    kind, predicate = result_predicate(_entry("result", record.data()), att) or ("", {})
    assert kind == SLSA_VSA and predicate["verificationResult"] == "FAILED"
    assert predicate["inputAttestations"] == [{"uri": att.uri, "digest": {"sha256": "9" * 64}}]
    assert predicate["oms"]["decision"] == "BLOCKED" and predicate["oms"]["log"] == "L"
    note = Note(message="hi")
    assert result_predicate(_entry("note", note.data()), att) is None


def test_sandbox_run_json_keeps_its_keys() -> None:
    run = SandboxRun(commit=SHA, policy_digest="p", exit_code=0, timed_out=False, signal=None,
                     duration_s=0.5, stdout="x\n", stderr="", stdout_bytes=2, stderr_bytes=0,
                     profile_digest="q")  # fmt: skip
    assert list(run.to_json()) == ["commit", "policy_digest", "exit_code", "timed_out", "signal",
                                   "duration_s", "stdout", "stderr", "stdout_bytes",
                                   "stderr_bytes", "profile_digest"]  # fmt: skip
    assert run.passed
