"""`[evidence]` in oms.toml: cosigners, `required` and `grace`; optional, so a policy
without it keeps its digest."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from support.witness_server import vkey_of

from policy import DEFAULT_COSIGN_GRACE, PolicyError, parse_policy

KEY = vkey_of("witness.test/w1", Ed25519PrivateKey.generate())
BASE = b'version = 1\n\n[[checks]]\nname = "unit"\ncmd = ["true"]\n'


def _with(table: str) -> bytes:
    return BASE + b"\n" + table.encode()


def _cosigner(url: str = "https://witness.example/w1", key: str = KEY, name: str = "w1") -> str:
    return f'[[evidence.cosigners]]\nname = "{name}"\nurl = "{url}"\nkey = "{key}"\n'


def test_a_policy_without_evidence_keeps_its_digest_and_defaults() -> None:
    plain = parse_policy(BASE, "p")
    explicit = parse_policy(
        _with(f"[evidence]\nrequired = 0\ngrace = {DEFAULT_COSIGN_GRACE}\n"), "p"
    )
    assert plain.digest == explicit.digest
    assert plain.policy.evidence.cosigners == [] and plain.policy.evidence.required == 0


def test_cosigners_are_read_and_change_the_digest() -> None:
    loaded = parse_policy(_with("[evidence]\nrequired = 1\n\n" + _cosigner()), "p")
    assert loaded.policy.evidence.cosigners[0].key == KEY
    assert loaded.digest != parse_policy(BASE, "p").digest


@pytest.mark.parametrize("table", [
    "[evidence]\nrequired = 1\n",  # more required than listed
    _cosigner(url="http://witness.example/w1"),  # http off loopback
    _cosigner(url="https://user@witness.example/w1"),
    _cosigner(key="w1+00000000+AAAA"),
    _cosigner() + _cosigner(key=vkey_of("w2", Ed25519PrivateKey.generate())),  # name twice
    "[evidence]\nwitnesses = []\n",  # unknown key
])  # fmt: skip
def test_bad_evidence_tables_are_refused(table: str) -> None:
    with pytest.raises(PolicyError):
        parse_policy(_with(table), "p")


def test_http_is_accepted_on_loopback_only() -> None:
    loaded = parse_policy(_with(_cosigner(url="http://127.0.0.1:8080")), "p")
    assert loaded.policy.evidence.cosigners[0].url == "http://127.0.0.1:8080"
