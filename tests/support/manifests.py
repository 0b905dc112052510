"""A valid transfer manifest to vary in unit tests, one field at a time."""

from __future__ import annotations

from typing import Any

from gatekeeper.gates.transfer.manifest import Manifest

HEX = "ab" * 32


def manifest(**over: Any) -> Manifest:
    fields: dict[str, Any] = {
        "repo_id": "r", "head": "c" * 40, "branch": "main",
        "visibility": {"state": "clean-pushed", "upstream": "origin/main"},
        "destination": {"provider": "anthropic", "model": "claude", "kind": "api"},
        "purpose": "review", "context": "none", "items": [], "excluded": [],
        "findings": [], "redactions": [],
        "totals": {"items": 0, "bytes": 100, "excluded": 0, "findings": 0, "redactions": 0},
        "blocked": False, "block_reasons": [], "payload_blob": None, "autopilot_rule": None,
        "policy_digest": "sha256:" + HEX, "created": "2026-01-01T00:00:00Z",
        "expires": "2026-01-01T01:00:00Z", "nonce": "0" * 32,
    }  # fmt: skip
    fields.update(over)
    return Manifest.model_validate(fields)
