"""The exact shapes of values that are not secrets: hash fields and placeholder credentials."""

from __future__ import annotations

import base64
import hashlib

import pytest
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString
from detect_secrets.plugins.keyword import KeywordDetector

from gatekeeper.scan.benign import (
    is_encoded_prose,
    is_hash_field,
    is_hash_value,
    is_placeholder_credential,
)

SHA512 = "sha512-" + base64.b64encode(hashlib.sha512(b"a").digest()).decode()
SHA256_HEX = hashlib.sha256(b"a").hexdigest()
SHA1_HEX = hashlib.sha1(b"a", usedforsecurity=False).hexdigest()
H1 = "h1:" + base64.b64encode(hashlib.sha256(b"g").digest()).decode()


@pytest.mark.parametrize(
    "value",
    [SHA512, "sha256:" + SHA256_HEX, H1, "10c0/" + hashlib.sha512(b"a").hexdigest()],
)
def test_a_hash_that_names_its_format_is_a_hash_value(value: str) -> None:
    assert is_hash_value(value)


@pytest.mark.parametrize(
    "value",
    [
        SHA512[:-3] + "==",  # one character short of a SHA-512
        SHA512 + "A",
        "sha256:" + SHA256_HEX.upper(),  # digests in these formats are lowercase hex
        "sha256:" + SHA256_HEX[:-1],
        SHA256_HEX,  # a bare hex string says nothing of itself
    ],
)
def test_near_misses_of_hash_formats_are_not_hash_values(value: str) -> None:
    assert not is_hash_value(value)


@pytest.mark.parametrize(
    ("secret", "line"),
    [
        (SHA512, f'      "integrity": "{SHA512}",'),
        (SHA256_HEX, f'checksum = "{SHA256_HEX}"'),
        (SHA256_HEX, f"    --hash=sha256:{SHA256_HEX} \\"),
        (SHA1_HEX, f'  "sha": "{SHA1_HEX}",'),
        (SHA256_HEX, f'  "digest": "{SHA256_HEX}",'),
        (SHA256_HEX, f"expected_sha256: '{SHA256_HEX}'"),
        (SHA256_HEX, f'{{"image": "x@sha256:{SHA256_HEX}"}}'),
    ],
)
def test_hash_fields_are_dropped(secret: str, line: str) -> None:
    assert is_hash_field(secret, line)


@pytest.mark.parametrize(
    ("secret", "line"),
    [
        (SHA256_HEX, f'SIGNING_KEY = "{SHA256_HEX}"'),  # a hex key under a key's name
        (SHA256_HEX, f'"token": "{SHA256_HEX}"'),
        (SHA256_HEX[:60], f'"sha": "{SHA256_HEX[:60]}"'),  # not a digest's length
        (SHA256_HEX.upper(), f'"sha": "{SHA256_HEX.upper()}"'),
        (SHA256_HEX + "ab", f'"digest": "{SHA256_HEX}ab"'),
        (SHA256_HEX, f'"hash_key": "{SHA256_HEX}"'),  # the key is a key, not a hash
    ],
)
def test_values_that_are_not_hash_fields_are_kept(secret: str, line: str) -> None:
    assert not is_hash_field(secret, line)


@pytest.mark.parametrize(
    "value",
    ["pass", "password", "secret", "a%20secret", "xxx", "XXXXXX", "****", "<password>",
     "${DB_PASSWORD}", "{{ password }}", "$PASSWORD", "changeme", "foo", "'bar'",
     "my-client-secret", "your_api_key", "example-password"],
)  # fmt: skip
def test_placeholder_passwords_are_dropped_for_basic_auth_and_keyword(value: str) -> None:
    assert is_placeholder_credential(value, BasicAuthDetector())
    assert is_placeholder_credential(value, KeywordDetector())


@pytest.mark.parametrize(
    "value",
    [
        "hunter2",
        "pass1",
        "s3cret",
        "Zx9kQ2mP7vLr4tY8",
        "xx",
        "secrets",
        "my-secret-2024",
        "client-secret-Zx9kQ2",
    ],
)
def test_other_passwords_are_kept(value: str) -> None:
    assert not is_placeholder_credential(value, BasicAuthDetector())


def test_placeholders_are_judged_only_for_password_rules() -> None:
    assert not is_placeholder_credential("password", Base64HighEntropyString())


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def test_base64_of_a_sentence_is_dropped_and_of_keys_or_credentials_kept() -> None:
    plugin = Base64HighEntropyString()
    assert is_encoded_prose(b64("These aren't the droids you're looking for"), plugin)
    assert not is_encoded_prose(b64("deploy:Zx9kQ2mP7vLr4tY8"), plugin)  # a Basic credential
    assert not is_encoded_prose(b64("correct horse battery staple"), plugin)  # four words
    assert not is_encoded_prose(b64("the key is 7f3a9 for prod today"), plugin)  # a digit
    assert not is_encoded_prose(b64(hashlib.sha256(b"k").digest()), plugin)
    assert not is_encoded_prose(
        b64("These aren't the droids you're looking for"), KeywordDetector()
    )
