"""The human-text renderers: the command's JSON data in, the lines it prints out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gatekeeper.cli import render

DIGEST = "sha256:" + "ab" * 32
COMMIT = "0123456789abcdef" * 2 + "01234567"
BASE = "fedcba9876543210" * 2 + "76543210"

DOCTOR: dict[str, Any] = {
    "bwrap": {"path": "/usr/bin/bwrap", "version": "0.8.0"},
    "probe": {"ok": True, "failures": []},
    "apparmor": {"restrict_unprivileged_userns": False},
    "gitleaks": {"ok": True, "version": "8.18.4"},
    "key": {"key_id": "k" * 64},
    "problems": [],
    "remedies": [],
}
DOCTOR_BAD: dict[str, Any] = {
    "bwrap": {"error": "no bubblewrap\x1b[2J"},
    "probe": {"ok": False, "failures": ["no bwrap", "no userns"]},
    "apparmor": "unknown",
    "gitleaks": {"ok": False, "error": "digest mismatch"},
    "key": {"error": "no key"},
    "evidence": "intact",
    "warnings": ["no provider key"],
    "problems": ["bwrap missing"],
    "remedies": ["apt install bubblewrap"],
}
PACKET = {"summary": ["to: anthropic:claude", "bytes: 12"], "copyable_text_block": "oms ..."}

CASES: list[tuple[str, Callable[[], list[str]], list[str]]] = [
    ("init created", lambda: render.init_lines(
        {"created": True, "repo_id": "r1", "key_id": "0123456789abcdef0123"}),
     ["initialised: r1 (key 0123456789abcdef)"]),
    ("init again", lambda: render.init_lines(
        {"created": False, "repo_id": "r1", "key_id": "0123456789abcdef"}),
     ["already initialised: r1 (key 0123456789abcdef)"]),
    ("audit intact", lambda: render.audit_lines(
        {"intact": True, "entries": 5, "checkpoint_size": 5}),
     ["intact: 5 entries, checkpoint at 5"]),
    ("audit tampered, reason sanitised", lambda: render.audit_lines(
        {"intact": False, "first_bad_seq": 3, "reason": "bad\u202ehash"}),
     ["TAMPERED at seq 3: bad\\u202ehash"]),
    ("audit tampered without reason", lambda: render.audit_lines(
        {"intact": False, "first_bad_seq": None, "reason": None}),
     ["TAMPERED at seq None: "]),
    ("audit cosigned, with a warning", lambda: render.audit_lines(
        {"intact": True, "entries": 9, "checkpoint_size": 9,
         "cosign": {"cosigners": [{"name": "w1", "size": 9, "time": 1700000000},
                                  {"name": "w2", "size": None, "time": None}]},
         "warnings": ["not yet cosigned: 1 of 2 required cosigner(s) cover the log's 9 entries"]}),
     ["intact: 9 entries, checkpoint at 9", "cosigned by w1 at 9 entries (time 1700000000)",
      "warning: not yet cosigned: 1 of 2 required cosigner(s) cover the log's 9 entries"]),
    ("audit refused by a cosigner", lambda: render.audit_lines(
        {"intact": False, "first_bad_seq": None, "reason": "cosigner w1 refused this log",
         "cosign": {"cosigners": [{"name": "w1", "size": None, "time": None}]}}),
     ["TAMPERED at seq None: cosigner w1 refused this log"]),
    ("export", lambda: render.export_lines({"payloadType": "x"}),
     ['{\n  "payloadType": "x"\n}']),
    ("note", lambda: render.note_lines({"seq": 7}), ["appended note as seq 7"]),
    ("key", lambda: render.key_lines({"key_id": "kid", "public_key_pem": "PEM\n",
                                      "signer_key": "ed25519:K"}),
     ["key_id kid", "PEM", "signer_key ed25519:K"]),
    ("repair adopted", lambda: render.repair_lines({"adopted_entries": 2, "repaired": False}),
     ["adopted 2 entries of an interrupted append"]),
    ("repair quarantined", lambda: render.repair_lines(
        {"repaired": True, "quarantined_bytes": 9, "seq": 4}),
     ["quarantined 9 bytes; recorded as seq 4"]),
    ("repair nothing", lambda: render.repair_lines({"repaired": False}), ["nothing to repair"]),
    ("doctor ready, plain lines, never a dict", lambda: render.doctor_lines(DOCTOR, True), [
        "bwrap: ok — /usr/bin/bwrap 0.8.0",
        "probe: ok —  s",
        "apparmor: info — restrict_unprivileged_userns=False",
        "gitleaks: ok — 8.18.4",
        "key: ok — " + "k" * 64,
        "ready",
    ]),
    ("doctor not ready, controls neutralised", lambda: render.doctor_lines(DOCTOR_BAD, False), [
        "bwrap: problem — no bubblewrap\\u001b[2J",
        "probe: problem — no bwrap; no userns",
        "apparmor: info — unknown",
        "gitleaks: problem — digest mismatch",
        "key: problem — no key",
        "evidence: info — intact",
        "warning:  no provider key",
        "problem:  bwrap missing",
        "remedy:   apt install bubblewrap",
        "NOT READY",
    ]),
    ("sandbox exit", lambda: render.sandbox_lines(
        {"stdout": "hi\n", "stderr": "", "timed_out": False, "exit_code": 0, "duration_s": 0.5}),
     ["hi", "[oms sandbox: exit 0 in 0.5 s]"]),
    ("sandbox timed out", lambda: render.sandbox_lines(
        {"stdout": "", "stderr": "e\n\n", "timed_out": True, "exit_code": -9, "duration_s": 2}),
     ["e", "[oms sandbox: timed out in 2 s]"]),
    ("scan", lambda: render.scan_lines({"blocking": 1, "findings": [
        {"file": "a\x1b.py", "line": 3, "rule": "aws", "scanner": "gitleaks",
         "preview": "AKIA…", "allowed": False},
        {"file": "b.py", "line": 1, "rule": "kw", "scanner": "detect-secrets",
         "preview": "pw=…", "allowed": True},
    ]}), [
        "a\\u001b.py:3: aws (gitleaks) AKIA…",
        "b.py:1: kw (detect-secrets) pw=… [allowed]",
        "1 finding(s) not allowed by policy",
    ]),
    ("scan clean", lambda: render.scan_lines({"blocking": 0, "findings": []}),
     ["0 finding(s) not allowed by policy"]),
    ("process-result", lambda: render.result_lines({
        "decision": "BLOCKED", "commit": COMMIT, "base": BASE, "evidence_seq": 12,
        "reasons": ["protected path changed: oms.toml", "secret\u202e"]}), [
        "BLOCKED: 0123456789ab (base fedcba987654), evidence seq 12",
        "  - protected path changed: oms.toml",
        "  - secret\\u202e",
    ]),
    ("process-result READY", lambda: render.gate_lines({
        "decision": "READY_FOR_HUMAN", "commit": COMMIT, "base": BASE, "evidence_seq": 13,
        "reasons": []}), [
        "READY_FOR_HUMAN: 0123456789ab (base fedcba987654), evidence seq 13",
        "next: review 0123456789ab and merge it yourself (oms never merges); the record: "
        "oms evidence show 13",
    ]),
    ("transfer preview", lambda: render.preview_lines({"approval_packet": PACKET}),
     ["to: anthropic:claude", "bytes: 12", "", "oms ..."]),
    ("transfer approve", lambda: render.approve_lines(
        {"approver": {"name": "ann\x07"}, "expires": "2026-12-01T13:00:00Z"}),
     ["approved by ann\\u0007 until 2026-12-01T13:00:00Z"]),
    ("transfer release", lambda: render.release_lines({"payload_bytes": 12}, "out.bin"),
     ["released 12 bytes to out.bin"]),
    ("transfer show", lambda: render.show_lines(
        {"status": "approved", "digest": DIGEST, "approval_packet": PACKET}),
     [f"approved: {DIGEST}", "to: anthropic:claude", "bytes: 12"]),
    ("transfer list", lambda: render.list_lines({"transfers": [
        {"status": "released", "digest": DIGEST, "destination": "x:\u200by", "bytes": 3}]}),
     [f"released   {DIGEST} x:\\u200by 3 bytes"]),
    ("transfer list empty", lambda: render.list_lines({"transfers": []}), ["no transfers"]),
    ("mcp snippets", lambda: render.snippet_lines(
        {"codex": {"installed": "[a]\nb = 1\n", "args": {"k": ["v"]}}}), [
        "# codex", "## installed", "[a]\nb = 1", "## args", '{\n  "k": [\n    "v"\n  ]\n}',
    ]),
    ("error line: first line only, sanitised", lambda: [
        render.error_line("blocked", "secret in a\u202eb.py\nsecond line")],
     ["oms: blocked: secret in a\\u202eb.py"]),
    ("error line: empty message names the kind", lambda: [render.error_line("usage", "")],
     ["oms: usage: usage"]),
]  # fmt: skip


@pytest.mark.parametrize(("case", "lines", "expected"), CASES, ids=[c[0] for c in CASES])
def test_renderer_prints_expected_lines(
    case: str, lines: Callable[[], list[str]], expected: list[str]
) -> None:
    assert lines() == expected


def test_ascii_json_escapes_non_ascii_and_del() -> None:
    assert render.ascii_json({"a": "\u202e\x7f\x1b"}) == '{"a": "\\u202e\\u007f\\u001b"}'


def test_cosign_lines_name_each_cosigner_and_the_count() -> None:
    from gatekeeper.cli.evidence import cosign_lines

    data = {"log_size": 7, "required": 1, "cosigned": 1, "cosigners": [
        {"cosigner": "w1", "status": "cosigned", "detail": "cosigned 7 entries"},
        {"cosigner": "w2", "status": "refused", "detail": "rolled\u202eback"}]}  # fmt: skip
    assert cosign_lines(data) == [
        "w1: cosigned: cosigned 7 entries",
        "w2: refused: rolled\\u202eback",
        "1 of 2 cosigner(s) cosigned 7 entries (1 required)",
    ]
