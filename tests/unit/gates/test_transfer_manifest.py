"""The manifest's canonical bytes (RFC 8785 over its JSON dump) are pinned to a golden file:
what a manifest digest names, and what approvals and releases bind to, cannot drift with a
change to how the manifest is built or dumped."""

from __future__ import annotations

from pathlib import Path

from support.manifests import HEX, manifest

from gatekeeper.digest import Sha256Digest
from gatekeeper.gates.transfer.manifest import Manifest

GOLDEN = Path(__file__).parents[2] / "data" / "transfer-manifest.canonical.json"


def every_kind_of_field() -> Manifest:
    """One of each list entry, names with escapes, bidi and non-ASCII text, a null or two."""
    return manifest(
        purpose='review \u202e the parser \U0001f600 "quoted" \\ tab\t nl\n ctl\x01',
        context="repo", paths=[], head="c" * 40, branch=None,
        items=[{"path": "src/\u00e9t\u00e9.py", "bytes": 12, "sha256": HEX, "mode": "full",
                "source_sha256": "cd" * 32},
               {"path": "a\nb", "bytes": 0, "sha256": "ef" * 32, "mode": "redacted",
                "source_sha256": HEX}],
        excluded=[{"path": ".git", "reason": ".git"},
                  {"path": "\u00e9/.env", "reason": "secret-looking name"}],
        findings=[{"scanner": "gitleaks", "rule": "generic-api-key", "file": "a\nb", "line": 3,
                   "fingerprint": "12" * 32}],
        redactions=[{"rule": "generic-api-key", "path": "a\nb", "line": 3}],
        totals={"items": 2, "bytes": 12, "excluded": 2, "findings": 1, "redactions": 1},
        payload_blob="34" * 32, autopilot_rule="small", blocked=False,
    )  # fmt: skip


def test_canonical_bytes_are_the_golden_file() -> None:
    assert every_kind_of_field().canonical() == GOLDEN.read_bytes()


def test_the_digest_is_sha256_of_the_golden_bytes() -> None:
    assert every_kind_of_field().digest() == Sha256Digest.of(GOLDEN.read_bytes())
    assert str(every_kind_of_field().digest()) == (
        "sha256:6fa34153137ba2cdb27b242d691b010427322a52c0df6fa6d4ab6f036e60c18c"
    )


def test_a_manifest_read_back_from_its_canonical_bytes_gives_them_again() -> None:
    again = Manifest.model_validate_json(GOLDEN.read_bytes())
    assert again == every_kind_of_field() and again.canonical() == GOLDEN.read_bytes()
