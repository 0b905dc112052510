"""`oms evidence verify`: an exported envelope checked offline with the public key only."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from evidence import KeyUnavailable
from evidence.dsse import export_statement, sign_envelope, statement
from evidence.verify import public_key_from_pem, verify_exported

KEY = Ed25519PrivateKey.generate()
SUBJECT = [{"name": "repo", "digest": {"gitCommit": "a" * 40}}]


def exported(key: Ed25519PrivateKey = KEY) -> bytes:
    stmt = statement(SUBJECT, "https://example.invalid/p/v1", {"x": 1})
    return json.dumps(export_statement(stmt, key, "k")).encode()


def test_a_valid_envelope_verifies_and_names_its_statement() -> None:
    v = verify_exported(exported(), KEY.public_key())
    assert v.valid and v.signature and v.reasons == ()
    assert v.payload_type == "application/vnd.in-toto+json"
    assert v.predicate_type == "https://example.invalid/p/v1"
    assert v.subjects == tuple(SUBJECT)


def test_another_key_is_invalid() -> None:
    v = verify_exported(exported(Ed25519PrivateKey.generate()), KEY.public_key())
    assert not v.valid and not v.signature and v.reasons[0].startswith("signature:")


def test_a_changed_payload_is_invalid() -> None:
    env = json.loads(exported())
    env["payload"] = env["payload"][:-4] + "AAAA"
    assert not verify_exported(json.dumps(env).encode(), KEY.public_key()).valid


def test_a_signed_envelope_of_another_type_is_invalid() -> None:
    payload = json.dumps({"_type": "https://in-toto.io/Statement/v1"}).encode()
    env = sign_envelope("application/json", payload, KEY, "k")
    v = verify_exported(json.dumps(env).encode(), KEY.public_key())
    assert v.signature and not v.valid
    assert any("payloadType" in r for r in v.reasons), v.reasons
    assert any("Statement v1" in r for r in v.reasons), v.reasons


@pytest.mark.parametrize("payload", [b"not json", b"[1]", b'{"_type": "other"}'])
def test_a_signed_payload_that_is_no_statement_is_invalid(payload: bytes) -> None:
    env = sign_envelope("application/vnd.in-toto+json", payload, KEY, "k")
    v = verify_exported(json.dumps(env).encode(), KEY.public_key())
    assert v.signature and not v.valid and v.reasons


def test_a_file_that_is_not_json_is_invalid() -> None:
    v = verify_exported(b"\x00garbage", KEY.public_key())
    assert not v.valid and v.reasons == ("the file is not JSON",)


def test_the_public_key_is_read_from_pem() -> None:
    pem = KEY.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert verify_exported(exported(), public_key_from_pem(pem, "k.pem")).valid
    with pytest.raises(KeyUnavailable):
        public_key_from_pem(b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "k")
