"""Tests for evidence.dsse: DSSE v1 envelopes over in-toto Statement v1."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey

from evidence.dsse import (
    PAYLOAD_TYPE_INTOTO,
    STATEMENT_TYPE,
    DsseError,
    export_statement,
    pae,
    sign_envelope,
    statement,
    verify_envelope,
)

KEYID = "test-key-1"
VSA_TYPE = "https://slsa.dev/verification_summary/v1"
SUBJECT = {"name": "artifact.tar.gz", "digest": {"sha256": "ab" * 32}}
VSA_PREDICATE = {
    "verifier": {"id": "https://example.com/oms-gatekeeper"},
    "timeVerified": "2024-01-01T00:00:00Z",
    "resourceUri": "git+https://example.com/repo@abc",
    "policy": {"uri": "https://example.com/policy/v1"},
    "verificationResult": "PASSED",
    "verifiedLevels": ["SLSA_BUILD_LEVEL_1"],
}


def _sslib_key(private_key: Ed25519PrivateKey, keyid: str = KEYID) -> SSlibKey:
    raw = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return SSlibKey(keyid, "ed25519", "ed25519", {"public": raw.hex()})


def _sslib_verify(env: dict[str, Any], key: SSlibKey) -> None:
    # Envelope.from_dict rewrites signature entries in place, so give it a copy.
    Envelope.from_dict(copy.deepcopy(env)).verify([key], 1)


def _exported() -> tuple[Ed25519PrivateKey, dict[str, Any], dict[str, Any]]:
    key = Ed25519PrivateKey.generate()
    stmt = statement([SUBJECT], VSA_TYPE, VSA_PREDICATE)
    return key, stmt, export_statement(stmt, key, KEYID)


def test_pae_matches_spec_example() -> None:
    # Test vector from secure-systems-lab/dsse protocol.md.
    assert (
        pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_pae_counts_utf8_bytes_not_characters() -> None:
    assert pae("t\u00e9", b"") == b"DSSEv1 3 t\xc3\xa9 0 "


def test_envelope_verifies_with_securesystemslib() -> None:
    key, stmt, env = _exported()
    assert env["payloadType"] == PAYLOAD_TYPE_INTOTO
    assert env["signatures"][0]["keyid"] == KEYID

    accepted = Envelope.from_dict(copy.deepcopy(env)).verify([_sslib_key(key)], 1)
    assert list(accepted) == [KEYID]
    assert verify_envelope(env, key.public_key()) == rfc8785.dumps(stmt)


def test_exported_payload_is_canonical_statement_v1() -> None:
    key, stmt, env = _exported()
    payload = verify_envelope(env, key.public_key())
    assert payload == rfc8785.dumps(stmt)
    decoded = json.loads(payload)
    assert decoded["_type"] == STATEMENT_TYPE
    assert decoded["predicateType"] == VSA_TYPE
    assert decoded["subject"] == [SUBJECT]
    assert decoded["predicate"] == VSA_PREDICATE


def test_tampered_payload_fails_verification() -> None:
    key, _, env = _exported()
    tampered = dict(env)
    original = base64.b64decode(env["payload"])
    tampered["payload"] = base64.b64encode(original.replace(b"PASSED", b"FAILED")).decode()
    assert tampered["payload"] != env["payload"]

    with pytest.raises(DsseError, match="valid Ed25519 signature"):
        verify_envelope(tampered, key.public_key())
    with pytest.raises(VerificationError):
        _sslib_verify(tampered, _sslib_key(key))


def test_tampered_payload_type_fails_verification() -> None:
    key, _, env = _exported()
    tampered = {**env, "payloadType": "application/json"}
    with pytest.raises(DsseError):
        verify_envelope(tampered, key.public_key())
    with pytest.raises(VerificationError):
        _sslib_verify(tampered, _sslib_key(key))


def test_signature_from_other_key_fails() -> None:
    signer = Ed25519PrivateKey.generate()
    other = Ed25519PrivateKey.generate()
    env = sign_envelope(PAYLOAD_TYPE_INTOTO, b"{}", signer, KEYID)

    with pytest.raises(DsseError, match="found none among 1"):
        verify_envelope(env, other.public_key())
    with pytest.raises(VerificationError):
        _sslib_verify(env, _sslib_key(other))


def test_keyid_is_not_used_to_select_or_reject() -> None:
    key = Ed25519PrivateKey.generate()
    env = sign_envelope("text/plain", b"hi", key, "misleading-keyid")
    assert verify_envelope(env, key.public_key()) == b"hi"


def test_urlsafe_and_unpadded_base64_are_accepted() -> None:
    key = Ed25519PrivateKey.generate()
    payload = b"\xfb\xff\xfe?>"  # encodes with '+' and '/' in standard base64
    env = sign_envelope("application/octet-stream", payload, key, KEYID)
    assert "+" in env["payload"] or "/" in env["payload"]

    sig = base64.b64decode(env["signatures"][0]["sig"])
    urlsafe = {
        "payload": base64.urlsafe_b64encode(payload).decode().rstrip("="),
        "payloadType": env["payloadType"],
        "signatures": [{"sig": base64.urlsafe_b64encode(sig).decode().rstrip("=")}],
    }
    assert verify_envelope(urlsafe, key.public_key()) == payload


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda env: ["not", "a", "dict"], "expected a JSON object, found list"),
        (lambda env: {k: v for k, v in env.items() if k != "payload"}, "'payload'"),
        (lambda env: {k: v for k, v in env.items() if k != "signatures"}, "'signatures'"),
        (lambda env: {**env, "payloadType": 7}, "payloadType: expected a string"),
        (lambda env: {**env, "payload": "not base64!"}, "payload: expected"),
        (lambda env: {**env, "payload": "QUJD="}, "invalid length"),
        (lambda env: {**env, "signatures": []}, "found none"),
        (lambda env: {**env, "signatures": {"sig": "x"}}, "expected a list, found dict"),
        (lambda env: {**env, "signatures": [{"keyid": KEYID}]}, "'sig'"),
        (lambda env: {**env, "signatures": [{"sig": "@@@@"}]}, r"signatures\[0\]\.sig"),
    ],
)
def test_malformed_envelope_raises_dsse_error(mutate: Any, message: str) -> None:
    key = Ed25519PrivateKey.generate()
    env = sign_envelope("text/plain", b"hello", key, KEYID)
    with pytest.raises(DsseError, match=message) as excinfo:
        verify_envelope(mutate(env), key.public_key())
    assert "\n" not in str(excinfo.value)


@pytest.mark.parametrize(
    "subjects",
    [
        [],
        [{"name": "no-digest"}],
        [{"name": "empty", "digest": {}}],
        [{"name": "not-a-mapping", "digest": "sha256:abcd"}],
        [{"name": "non-str-value", "digest": {"sha256": 1234}}],
        [{"name": "empty-value", "digest": {"sha256": ""}}],
        [SUBJECT, {"name": "second-lacks-digest"}],
    ],
)
def test_statement_requires_subject_digest(subjects: list[dict[str, Any]]) -> None:
    with pytest.raises(ValueError, match="subject"):
        statement(subjects, VSA_TYPE, VSA_PREDICATE)


def test_statement_shape() -> None:
    stmt = statement([SUBJECT], VSA_TYPE, VSA_PREDICATE)
    assert stmt == {
        "_type": STATEMENT_TYPE,
        "subject": [SUBJECT],
        "predicateType": VSA_TYPE,
        "predicate": VSA_PREDICATE,
    }
    assert stmt["subject"][0] is not SUBJECT


def test_export_rejects_non_statement() -> None:
    with pytest.raises(ValueError, match="_type"):
        export_statement(
            {"_type": "https://in-toto.io/Statement/v0.1"}, Ed25519PrivateKey.generate(), KEYID
        )
