"""`[trust]`: the signers a verifier accepts and `require_contained`; strict, one-line
errors naming the key, and policies without the section keep their digests."""

from __future__ import annotations

import base64

import pytest

from policy import PolicyError, parse_policy, signer_key_bytes, signer_key_text

BASE = b'version = 1\n[[checks]]\nname = "t"\ncmd = ["x"]\n'
# Pinned before `[trust]` existed (as in test_policy.py).
BASE_DIGEST = "sha256:e2481e41ae0a8429e82205d01a0314866872930df87d6d9df26fa5e2bcfbb917"
A = signer_key_text(bytes(range(32)))
B = signer_key_text(bytes(range(1, 33)))


def _trust(body: str) -> bytes:
    return BASE + f"[trust]\n{body}\n".encode()


def test_the_key_form_is_ed25519_and_padded_base64_of_the_raw_key() -> None:
    raw = bytes(range(32))
    assert A == "ed25519:" + base64.b64encode(raw).decode()
    assert len(A) == len("ed25519:") + 44
    assert signer_key_bytes(A) == raw


@pytest.mark.parametrize("text", [
    "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",  # no prefix
    "ed25519:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",  # unpadded
    "ed25519:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n",
    "ed25519:" + "00" * 32,  # hex is not the form
    "ed25519:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHg==",  # 31 bytes
    "ed25519:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh-=",  # urlsafe alphabet
    "ssh-ed25519:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
])  # fmt: skip
def test_any_other_spelling_of_a_key_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="standard base64 of a 32-byte"):
        signer_key_bytes(text)


def test_policies_without_trust_keep_their_digests() -> None:
    assert parse_policy(BASE, "x").digest == BASE_DIGEST
    assert parse_policy(_trust(""), "x").digest == BASE_DIGEST
    assert parse_policy(_trust("signers = []\nrequire_contained = false"), "x").digest == (
        BASE_DIGEST)  # fmt: skip
    assert parse_policy(_trust("require_contained = true"), "x").digest != BASE_DIGEST


def test_signers_are_read_with_windows_from_toml_dates_or_strings() -> None:
    text = _trust(f'signers = [\n  {{name = "old", key = "{A}", not_after = "2026-06-30"}},\n'
                  f'  {{name = "new", key = "{B}", not_before = 2026-07-01}},\n]')  # fmt: skip
    loaded = parse_policy(text, "x")
    old, new = loaded.policy.trust.signers
    assert (old.name, old.public_raw, str(old.not_after), old.not_before) == (
        "old", bytes(range(32)), "2026-06-30", None)  # fmt: skip
    assert (new.name, str(new.not_before), new.not_after) == ("new", "2026-07-01", None)
    assert loaded.digest != BASE_DIGEST
    # The string and the TOML date mean the same policy.
    same = text.replace(b'"2026-06-30"', b"2026-06-30")
    assert parse_policy(same, "x").digest == loaded.digest


def test_an_array_of_tables_is_the_same_policy() -> None:
    inline = _trust(f'signers = [{{name = "a", key = "{A}"}}]')
    tables = BASE + f'[[trust.signers]]\nname = "a"\nkey = "{A}"\n'.encode()
    assert parse_policy(inline, "x").digest == parse_policy(tables, "x").digest


@pytest.mark.parametrize(("body", "message"), [
    (f'signers = [{{name = "a", key = "{A}"}}, {{name = "a", key = "{B}"}}]',
     "trust.signers: Value error, signer name a is listed twice"),
    (f'signers = [{{name = "a", key = "{A}"}}, {{name = "b", key = "{A}"}}]',
     "trust.signers: Value error, signers a and b name the same key"),
    ('signers = [{name = "a", key = "ed25519:AAAA"}]', "trust.signers.0.key: Value error, key "
     'must be "ed25519:"'),
    (f'signers = [{{name = "a", key = "{A}", not_after = "30/06/2026"}}]',
     "trust.signers.0.not_after: Value error, must be a date, YYYY-MM-DD"),
    (f'signers = [{{name = "a", key = "{A}", not_after = 2026-06-30T00:00:00}}]',
     "trust.signers.0.not_after: Value error, must be a date"),
    (f'signers = [{{name = "a", key = "{A}", not_after = "2026-02-30"}}]',
     "trust.signers.0.not_after: Value error, must be a date"),
    (f'signers = [{{name = "a", key = "{A}", not_before = "2026-07-01", '
     'not_after = "2026-06-30"}]', "signer a: not_after 2026-06-30 is before not_before"),
    (f'signers = [{{name = "a", key = "{A}", expires = "2026-06-30"}}]',
     "trust.signers.0.expires: unknown key"),
    (f'signers = [{{name = "-a", key = "{A}"}}]', "trust.signers.0.name"),
    ('signers = [{name = "a"}]', "trust.signers.0.key: required key is missing"),
    ("require_contained = 1", "trust.require_contained"),
    ("signer = []", "trust.signer: unknown key"),
])  # fmt: skip
def test_a_bad_trust_section_is_one_line_naming_the_key(body: str, message: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(_trust(body), "oms.toml")
    assert str(err.value).startswith("oms.toml: ")
    assert message in str(err.value)
    assert "\n" not in str(err.value)
