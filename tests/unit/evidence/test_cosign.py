"""Cosignature pieces (evidence/cosign.py) and the loopback witness they are tested with
(tests/support/witness_server.py), against the C2SP specs: signed-note verifier keys,
tlog-cosignature/v1 lines, tlog-witness add-checkpoint bodies and answers."""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from support.witness_server import WitnessServer, cosign_line, raw_public, vkey_of

from evidence import checkpoint as cp
from evidence.cosign import (
    CosignerKey,
    CosignError,
    request_body,
    verify_cosignature,
)
from evidence.merkle import consistency_proof, leaf_hash, root_from_leaf_hashes

ORIGIN = "oms.local/rtest"
LOG_KEY = Ed25519PrivateKey.generate()
LEAVES = [leaf_hash(b"entry %d" % i) for i in range(12)]

# tlog-witness's example request body (c2sp.org/tlog-witness), as the spec prints it.
SPEC_BODY = b"""old 20852014
PlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=
jrJZDmY8Y7SyJE0MWLpLozkIVMSMZcD5kvuKxPC3swk=
5+pKlUdi2LeF/BcMHBn+Ku6yhPGNCswZZD1X/6QgPd8=
/6WVhPs2CwSsb5rYBH5cjHV/wSmA79abXAwhXw3Kj/0=

example.com/behind-the-sofa
20852163
CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=

""" + (
    "\u2014 example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5"
    "/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
).encode()


def _note(size: int, leaves: list[bytes] = LEAVES) -> bytes:
    c = cp.Checkpoint(ORIGIN, size, root_from_leaf_hashes(leaves[:size]))
    return cp.sign_checkpoint(c, ORIGIN, LOG_KEY)


def _witness() -> WitnessServer:
    return WitnessServer("witness.test/w1", {ORIGIN: (ORIGIN, LOG_KEY.public_key())})


def test_a_verifier_key_round_trips_and_its_key_id_is_derived() -> None:
    key = Ed25519PrivateKey.generate()
    text = vkey_of("witness.test/w1", key)
    parsed = CosignerKey.parse(text)
    assert parsed.text() == text and parsed.public_raw == raw_public(key.public_key())
    material = b"witness.test/w1\n\x04" + raw_public(key.public_key())
    assert parsed.key_id == hashlib.sha256(material).digest()[:4]


@pytest.mark.parametrize("bad", [
    "no-plus-signs",
    "name+00000000+" + base64.b64encode(b"\x04" + bytes(32)).decode(),  # another key id
    "name+zz+AAAA",
    "bad name+00000000+AAAA",
])  # fmt: skip
def test_malformed_verifier_keys_are_refused(bad: str) -> None:
    with pytest.raises(CosignError):
        CosignerKey.parse(bad)


def test_an_ed25519_note_key_is_not_a_cosigner_key() -> None:
    typed = b"\x01" + raw_public(Ed25519PrivateKey.generate().public_key())
    key_id = hashlib.sha256(b"w\n" + typed).digest()[:4].hex()
    with pytest.raises(CosignError, match="type 0x04"):
        CosignerKey.parse(f"w+{key_id}+{base64.b64encode(typed).decode()}")


def test_a_cosignature_verifies_only_under_its_key_and_over_its_checkpoint() -> None:
    key = Ed25519PrivateKey.generate()
    ck = CosignerKey.parse(vkey_of("w", key))
    text = _note(5).split(b"\n\n")[0] + b"\n"
    line = cosign_line("w", key, text, 1_700_000_000)
    other = cosign_line("x", Ed25519PrivateKey.generate(), text, 1)  # ignored: another key
    got = verify_cosignature(ck, text, other + line)
    assert got.timestamp == 1_700_000_000 and got.line == line.rstrip("\n")
    with pytest.raises(CosignError, match="does not verify"):
        verify_cosignature(ck, text.replace(b"\n5\n", b"\n6\n"), line)
    with pytest.raises(CosignError, match="no cosignature by w"):
        verify_cosignature(ck, text, other)


def test_the_request_body_is_the_specs_shape() -> None:
    proof = consistency_proof(3, LEAVES[:7])
    body = request_body(3, proof, _note(7))
    head, _, note = body.partition(b"\n\n")
    lines = head.decode().split("\n")
    assert lines[0] == "old 3" and [base64.b64decode(x) for x in lines[1:]] == proof
    assert note == _note(7)[: len(note)] and cp.parse_signed_checkpoint(note)[0].size == 7


def test_the_witness_reads_the_specs_example_body_and_does_not_know_that_log() -> None:
    w = _witness()
    try:
        assert w.add_checkpoint(SPEC_BODY)[0] == 404  # parsed; example.com is not its log
    finally:
        w.close()


def test_the_witness_cosigns_forward_and_refuses_rollback_fork_and_bad_keys() -> None:
    w = _witness()
    try:
        status, _, line = w.add_checkpoint(request_body(0, [], _note(5)))
        assert status == 200
        ck = CosignerKey.parse(w.vkey)
        verify_cosignature(ck, _note(5).split(b"\n\n")[0] + b"\n", line.decode())
        good = consistency_proof(5, LEAVES[:9])
        assert w.add_checkpoint(request_body(5, good, _note(9)))[0] == 200
        # A rolled-back log (size 6 < 9), even signed by the log's own key: 409 with 9.
        status, kind, body = w.add_checkpoint(request_body(0, [], _note(6)))
        assert (status, kind, body) == (409, "text/x.tlog.size", b"9\n")
        # A fork: other entries after the 9 it holds; the proof does not verify.
        forked = [*LEAVES[:4], leaf_hash(b"other"), *LEAVES[5:]]
        bad = consistency_proof(9, forked[:11])
        assert w.add_checkpoint(request_body(9, bad, _note(11, forked)))[0] == 422
        other = cp.sign_checkpoint(cp.Checkpoint(ORIGIN, 10, bytes(32)), ORIGIN,
                                   Ed25519PrivateKey.generate())  # fmt: skip
        assert w.add_checkpoint(request_body(9, [], other))[0] == 403
        assert w.add_checkpoint(request_body(12, [], _note(11)))[0] == 400
        assert w.state[ORIGIN][0] == 9
    finally:
        w.close()
