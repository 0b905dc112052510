"""DSSE v1 envelopes (Dead Simple Signing Envelope, protocol v1.0.0) over in-toto Statements.

Implements, with Ed25519 signatures:

* the DSSE v1 Pre-Authentication Encoding (``PAE``) from the DSSE protocol spec
  (secure-systems-lab/dsse, ``protocol.md``);
* the recommended JSON envelope ``{"payload", "payloadType", "signatures"}``
  (``envelope.md``), emitted with standard base64 and accepted in either standard
  or URL-safe base64 as the spec requires of verifiers;
* construction of in-toto attestation Statement v1 objects
  (``https://in-toto.io/Statement/v1``) and their export as DSSE envelopes with
  payload type ``application/vnd.in-toto+json``, the payload being the RFC 8785
  (JCS) canonical JSON serialisation of the Statement.

``keyid`` is an unauthenticated hint (DSSE protocol): it is written when signing
but never consulted when verifying.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping, Sequence
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

__all__ = [
    "PAYLOAD_TYPE_INTOTO",
    "STATEMENT_TYPE",
    "DsseError",
    "export_statement",
    "pae",
    "sign_envelope",
    "statement",
    "verify_envelope",
]

PAYLOAD_TYPE_INTOTO = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"

_STD_B64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_URLSAFE_B64 = re.compile(r"[A-Za-z0-9\-_]*={0,2}")


class DsseError(ValueError):
    """A DSSE envelope is malformed or carries no signature valid for the given key."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """Return the DSSE v1 Pre-Authentication Encoding of ``payload_type`` and ``payload``.

    ``"DSSEv1" SP LEN(type) SP type SP LEN(body) SP body``, where ``type`` is the
    UTF-8 encoding of ``payload_type`` and each ``LEN`` is the ASCII decimal byte
    length with no leading zeros.
    """
    if not isinstance(payload_type, str):
        raise TypeError(f"payload_type must be str, got {type(payload_type).__name__}")
    if not isinstance(payload, bytes):
        raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def _b64encode(data: bytes) -> str:
    return base64.standard_b64encode(data).decode("ascii")


def _b64decode(value: object, field: str) -> bytes:
    """Decode standard or URL-safe base64 (padding optional); raise DsseError otherwise."""
    if not isinstance(value, str):
        raise DsseError(f"{field}: expected a base64 string, found {type(value).__name__}")
    if _STD_B64.fullmatch(value):
        altchars = None
    elif _URLSAFE_B64.fullmatch(value):
        altchars = b"-_"
    else:
        raise DsseError(f"{field}: expected standard or URL-safe base64, found invalid characters")
    unpadded = value.rstrip("=")
    if len(unpadded) % 4 == 1 or (value != unpadded and len(value) % 4 != 0):
        raise DsseError(f"{field}: expected base64, found a string of invalid length")
    padded = unpadded + "=" * (-len(unpadded) % 4)
    try:
        return base64.b64decode(padded.encode("ascii"), altchars=altchars, validate=True)
    except binascii.Error as exc:
        raise DsseError(f"{field}: expected base64, found undecodable data ({exc})") from None


def sign_envelope(
    payload_type: str,
    payload: bytes,
    private_key: Ed25519PrivateKey,
    keyid: str,
) -> dict[str, Any]:
    """Sign ``PAE(payload_type, payload)`` with Ed25519 and return a DSSE JSON envelope.

    The envelope is ``{"payload": b64, "payloadType": payload_type,
    "signatures": [{"keyid": keyid, "sig": b64}]}`` using standard base64.
    """
    if not isinstance(keyid, str):
        raise TypeError(f"keyid must be str, got {type(keyid).__name__}")
    signature = private_key.sign(pae(payload_type, payload))
    return {
        "payload": _b64encode(payload),
        "payloadType": payload_type,
        "signatures": [{"keyid": keyid, "sig": _b64encode(signature)}],
    }


def verify_envelope(envelope: Mapping[str, Any], public_key: Ed25519PublicKey) -> bytes:
    """Verify a DSSE JSON envelope against one Ed25519 public key; return the payload bytes.

    Succeeds if at least one entry of ``signatures`` is a valid Ed25519 signature by
    ``public_key`` over ``PAE(payloadType, payload)``. ``keyid`` is ignored (it is
    unauthenticated). The envelope's ``payloadType`` is authenticated by the
    signature; callers must still check it is a type they expect.

    Raises:
        DsseError: the envelope is not a mapping, a field is missing or has the
            wrong type, base64 does not decode, or no signature verifies.
    """
    if not isinstance(envelope, Mapping):
        raise DsseError(f"envelope: expected a JSON object, found {type(envelope).__name__}")
    for field in ("payload", "payloadType", "signatures"):
        if field not in envelope:
            raise DsseError(f"envelope: expected field {field!r}, found it missing")

    payload_type = envelope["payloadType"]
    if not isinstance(payload_type, str):
        raise DsseError(f"payloadType: expected a string, found {type(payload_type).__name__}")
    payload = _b64decode(envelope["payload"], "payload")

    signatures = envelope["signatures"]
    if not isinstance(signatures, list):
        raise DsseError(f"signatures: expected a list, found {type(signatures).__name__}")
    if not signatures:
        raise DsseError("signatures: expected at least one signature, found none")

    decoded: list[bytes] = []
    for index, entry in enumerate(signatures):
        if not isinstance(entry, Mapping):
            raise DsseError(
                f"signatures[{index}]: expected a JSON object, found {type(entry).__name__}"
            )
        if "sig" not in entry:
            raise DsseError(f"signatures[{index}]: expected field 'sig', found it missing")
        decoded.append(_b64decode(entry["sig"], f"signatures[{index}].sig"))

    message = pae(payload_type, payload)
    for sig in decoded:
        try:
            public_key.verify(sig, message)
        except InvalidSignature:
            continue
        return payload
    raise DsseError(
        f"signatures: expected a valid Ed25519 signature by the given key, "
        f"found none among {len(decoded)}"
    )


def _json_copy(value: Any, where: str) -> Any:
    """Copy ``value`` into plain dict/list JSON form (Mapping -> dict, list/tuple -> list)."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where}: expected string object keys, found {key!r}")
            out[key] = _json_copy(item, f"{where}.{key}")
        return out
    if isinstance(value, list | tuple):
        return [_json_copy(item, f"{where}[{i}]") for i, item in enumerate(value)]
    return value


def statement(
    subjects: Sequence[Mapping[str, Any]],
    predicate_type: str,
    predicate: Mapping[str, Any],
) -> dict[str, Any]:
    """Build an in-toto Statement v1 as a plain dict.

    Every subject (a ResourceDescriptor) must carry a non-empty ``digest`` mapping
    of algorithm name to digest value, both strings.

    Raises:
        ValueError: ``subjects`` is empty, a subject is not a mapping or lacks a
            valid ``digest``, ``predicate_type`` is not a non-empty string, or
            ``predicate`` is not a mapping.
    """
    if isinstance(subjects, str | bytes) or not isinstance(subjects, Sequence):
        raise ValueError(f"subject: expected a list, found {type(subjects).__name__}")
    if len(subjects) == 0:
        raise ValueError("subject: expected at least one subject, found none")
    for index, subject in enumerate(subjects):
        if not isinstance(subject, Mapping):
            raise ValueError(
                f"subject[{index}]: expected an object, found {type(subject).__name__}"
            )
        digest = subject.get("digest")
        if not isinstance(digest, Mapping) or len(digest) == 0:
            raise ValueError(
                f"subject[{index}].digest: expected a non-empty mapping, found {digest!r}"
            )
        for alg, value in digest.items():
            if not isinstance(alg, str) or not alg or not isinstance(value, str) or not value:
                raise ValueError(
                    f"subject[{index}].digest: expected non-empty str -> str entries, "
                    f"found {alg!r}: {value!r}"
                )
    if not isinstance(predicate_type, str) or not predicate_type:
        raise ValueError(
            f"predicateType: expected a non-empty URI string, found {predicate_type!r}"
        )
    if not isinstance(predicate, Mapping):
        raise ValueError(f"predicate: expected an object, found {type(predicate).__name__}")
    return {
        "_type": STATEMENT_TYPE,
        "subject": _json_copy(list(subjects), "subject"),
        "predicateType": predicate_type,
        "predicate": _json_copy(predicate, "predicate"),
    }


def export_statement(
    stmt: Mapping[str, Any],
    private_key: Ed25519PrivateKey,
    keyid: str,
) -> dict[str, Any]:
    """Sign a Statement v1 as a DSSE envelope of type ``application/vnd.in-toto+json``.

    The payload is the RFC 8785 canonical JSON of ``stmt``.

    Raises:
        ValueError: ``stmt`` is not a Statement v1 (wrong ``_type``) or cannot be
            canonicalised (e.g. non-finite float, integer beyond 2**53 - 1).
    """
    if not isinstance(stmt, Mapping) or stmt.get("_type") != STATEMENT_TYPE:
        found = stmt.get("_type") if isinstance(stmt, Mapping) else type(stmt).__name__
        raise ValueError(f"_type: expected {STATEMENT_TYPE!r}, found {found!r}")
    payload = rfc8785.dumps(_json_copy(stmt, "statement"))
    return sign_envelope(PAYLOAD_TYPE_INTOTO, payload, private_key, keyid)
