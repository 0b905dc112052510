"""`oms scan`'s human output: findings grouped by fingerprint, the allow line, the skips."""

from __future__ import annotations

import tomllib
from typing import Any

from gatekeeper.cli.scan import grouped_lines

FP1, FP2 = "ab" * 32, "cd" * 32


def finding(file: str, line: int, scanner: str, rule: str, fp: str, allowed: bool = False,
            **extra: Any) -> dict[str, Any]:  # fmt: skip
    return {"file": file, "line": line, "scanner": scanner, "rule": rule, "fingerprint": fp,
            "preview": "AKIA…[redacted, 20 chars]", "allowed": allowed, **extra}  # fmt: skip


def test_findings_are_grouped_by_fingerprint_with_remove_and_rotate_before_the_allow_line() -> None:
    data = {"blocking": 3, "skipped": [], "findings": [
        finding("a.py", 2, "gitleaks", "aws-access-token", FP1),
        finding("a.py", 2, "detect-secrets", "AWS Access Key", FP1),
        finding("b.py", 9, "gitleaks", "aws-access-token", FP1),
        finding("c.py", 1, "gitleaks", "generic-api-key", FP2, allowed=True),
    ]}  # fmt: skip
    assert grouped_lines(data) == [
        "aws-access-token (gitleaks), AWS Access Key (detect-secrets): AKIA…[redacted, 20 chars]",
        f"  fingerprint {FP1}",
        "  a.py:2",
        "  b.py:9",
        "generic-api-key (gitleaks) [allowed]: AKIA…[redacted, 20 chars]",
        f"  fingerprint {FP2}",
        "  c.py:1",
        "Remove each secret from the files and rotate it (a secret that was committed or sent "
        "is known); read it at run time from the environment or a secret store.",
        "Only if a finding is a false positive, allow it: add this line under [scanners] in "
        "oms.toml and commit it (merge it with a list already there; a new oms.toml starts "
        "with `version = 1`):",
        f'allow_fingerprints = ["{FP1}"]',
        "3 finding(s) not allowed by policy",
    ]


def test_history_locations_name_the_commit_and_skips_are_counted_by_reason() -> None:
    data = {"blocking": 1, "findings": [
        finding("cfg.py", 3, "gitleaks", "aws-access-token", FP1, commit="1234567890abcdef" * 2),
    ], "skipped": [{"path": "x.bin", "reason": "binary", "bytes": 9},
                   {"path": "y.bin", "reason": "binary", "bytes": 9},
                   {"path": "big\x1b.txt", "reason": "too_large", "bytes": 1 << 30}]}  # fmt: skip
    lines = grouped_lines(data)
    assert "  cfg.py:3 (commit 1234567890ab)" in lines
    assert lines[-5:] == [
        "skipped 3 file(s), not scanned: 2 binary, 1 too_large",
        "  x.bin: binary",
        "  y.bin: binary",
        "  big\\u001b.txt: too_large",
        "1 finding(s) not allowed by policy",
    ]


def test_hostile_names_and_rules_are_shown_escaped() -> None:
    data = {"blocking": 1, "skipped": [], "findings": [
        finding("a\nb\u202e.py", 1, "gitleaks", "r\x1b[2J", FP1)]}  # fmt: skip
    lines = grouped_lines(data)
    assert "  a\\u000ab\\u202e.py:1" in lines and lines[0].startswith("r\\u001b[2J (gitleaks)")
    assert not any(c in "".join(lines) for c in "\n\x1b\u202e")


def test_clean_scan_prints_the_count_only() -> None:
    assert grouped_lines({"blocking": 0, "findings": [], "skipped": []}) == [
        "0 finding(s) not allowed by policy"
    ]


def test_a_long_allow_list_is_one_entry_a_line_so_nothing_is_cut() -> None:
    fps = [f"{i:02x}" * 32 for i in range(40)]
    data = {
        "blocking": 40,
        "skipped": [],
        "findings": [finding("a.py", i + 1, "gitleaks", "r", fp) for i, fp in enumerate(fps)],
    }
    lines = grouped_lines(data)
    start = lines.index("allow_fingerprints = [")
    assert lines[start + 1 : start + 42] == [*(f'    "{fp}",' for fp in fps), "]"]
    pasted = "version = 1\n[scanners]\n" + "\n".join(lines[start : start + 42])
    assert tomllib.loads(pasted)["scanners"]["allow_fingerprints"] == fps
