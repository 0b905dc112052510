"""Offline verification of an exported envelope (`oms evidence verify FILE`).

What `export_dsse` writes, checked with nothing but the public key: the DSSE v1
signature over PAE(payloadType, payload), the payload type (in-toto JSON), and that the
payload is an in-toto Statement v1 (its `_type`, a non-empty subject list with digests, a
predicate type and a predicate object). The verdict lists every reason it is not valid.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from .dsse import PAYLOAD_TYPE_INTOTO, STATEMENT_TYPE, DsseError, statement, verify_envelope
from .errors import KeyUnavailable

MAX_ENVELOPE_BYTES = 64 << 20


@dataclass(frozen=True)
class EnvelopeVerdict:
    valid: bool
    signature: bool
    payload_type: str | None
    predicate_type: str | None
    subjects: tuple[dict[str, Any], ...]
    reasons: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"valid": self.valid, "signature": self.signature,
                "payload_type": self.payload_type, "predicate_type": self.predicate_type,
                "subjects": list(self.subjects), "reasons": list(self.reasons)}  # fmt: skip


def public_key_from_pem(data: bytes, where: str) -> Ed25519PublicKey:
    """An Ed25519 public key in PEM (as `oms evidence key` prints it)."""
    try:
        key = serialization.load_pem_public_key(data[:MAX_ENVELOPE_BYTES])
    except (ValueError, TypeError):
        raise KeyUnavailable(f"{where} is not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyUnavailable(f"{where} is not an Ed25519 public key")
    return key


def statement_problems(payload: bytes) -> tuple[dict[str, Any] | None, list[str]]:
    """The payload as a Statement v1, and every reason it is not one ([] when it is)."""
    try:
        stmt = json.loads(payload)
    except ValueError:
        return None, ["the payload is not JSON"]
    if not isinstance(stmt, dict):
        return None, ["the payload is not a JSON object"]
    if stmt.get("_type") != STATEMENT_TYPE:
        return stmt, [f"the payload's _type is not {STATEMENT_TYPE}"]
    try:
        statement(stmt["subject"], stmt["predicateType"], stmt["predicate"])
    except KeyError as exc:
        return stmt, [f"not an in-toto Statement v1: no {exc.args[0]}"]
    except ValueError as exc:
        return stmt, [f"not an in-toto Statement v1: {exc}"]
    return stmt, []


def verify_exported(envelope_bytes: bytes, key: Ed25519PublicKey) -> EnvelopeVerdict:
    """Signature, payload type and statement of one DSSE envelope, each reason listed."""
    try:
        envelope = json.loads(envelope_bytes)
    except ValueError:
        return EnvelopeVerdict(False, False, None, None, (), ("the file is not JSON",))
    ptype = envelope.get("payloadType") if isinstance(envelope, dict) else None
    ptype = ptype if isinstance(ptype, str) else None
    try:
        payload = verify_envelope(envelope, key)
    except DsseError as exc:
        return EnvelopeVerdict(False, False, ptype, None, (), (f"signature: {exc}",))
    reasons = [] if ptype == PAYLOAD_TYPE_INTOTO else [
        f"payloadType is {ptype!r}, not {PAYLOAD_TYPE_INTOTO!r}"
    ]  # fmt: skip
    stmt, problems = statement_problems(payload)
    reasons += problems
    subjects = stmt.get("subject") if stmt is not None else None
    listed = [s for s in subjects if isinstance(s, dict)] if isinstance(subjects, list) else []
    pred = stmt.get("predicateType") if stmt is not None else None
    pred_type = pred if isinstance(pred, str) else None
    return EnvelopeVerdict(not reasons, True, ptype, pred_type, tuple(listed), tuple(reasons))
