"""`oms scan`'s result model: its JSON is the command's `--json` data, key for key."""

from __future__ import annotations

from gatekeeper.errors import EXIT_BLOCKED, EXIT_OK
from gatekeeper.gates.secrets import SecretsScan
from gatekeeper.scan import Finding, ScannerInfo

FP = "ab" * 32
SCANNERS = (
    ScannerInfo("gitleaks", "8.30.1", "cd" * 32),
    ScannerInfo("detect-secrets", "1.5.0", None),
)


def test_to_json_is_the_scan_command_contract() -> None:
    found = (
        Finding("gitleaks", "aws-access-token", "a.py", 2, FP, "AKIA…[redacted, 20 chars]"),
        Finding("detect-secrets", "AWS Access Key", "a.py", 2, FP, "x", allowed=True, end_line=3),
    )
    got = SecretsScan(found, SCANNERS, "sha256:p", 1).to_json()
    assert got == {
        "findings": [
            {"scanner": "gitleaks", "rule": "aws-access-token", "file": "a.py", "line": 2,
             "fingerprint": FP, "preview": "AKIA…[redacted, 20 chars]", "allowed": False,
             "end_line": None},
            {"scanner": "detect-secrets", "rule": "AWS Access Key", "file": "a.py", "line": 2,
             "fingerprint": FP, "preview": "x", "allowed": True, "end_line": 3},
        ],
        "blocking": 1,
        "scanners": [
            {"name": "gitleaks", "version": "8.30.1", "digest": "cd" * 32},
            {"name": "detect-secrets", "version": "1.5.0", "digest": None},
        ],
        "policy_digest": "sha256:p",
        "scanned_items": 1,
        "skipped": [],
    }  # fmt: skip
    assert list(got) == ["findings", "blocking", "scanners", "policy_digest", "scanned_items",
                         "skipped"]  # fmt: skip
    assert list(got["findings"][0]) == [
        "scanner", "rule", "file", "line", "fingerprint", "preview", "allowed", "end_line"
    ]  # fmt: skip


def test_exit_code_is_3_only_for_a_finding_not_allowed() -> None:
    allowed = Finding("gitleaks", "r", "a", 1, FP, "p", allowed=True)
    assert SecretsScan((allowed,), SCANNERS, "d", 1).exit_code == EXIT_OK
    blocking = Finding("gitleaks", "r", "a", 1, FP, "p")
    assert SecretsScan((allowed, blocking), SCANNERS, "d", 1).exit_code == EXIT_BLOCKED
    assert SecretsScan((), SCANNERS, "d", 0).exit_code == EXIT_OK
