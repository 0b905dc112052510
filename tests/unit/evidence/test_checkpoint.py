"""Tests for evidence.checkpoint (C2SP tlog-checkpoint in a C2SP signed note).

External vectors:
  * golang.org/x/mod/sumdb/note (github.com/golang/mod, sumdb/note/note_test.go):
    the PeterNeumann / EnochRoot Ed25519 keys and signed note; Ed25519 is
    deterministic (RFC 8032), so signing the same text must reproduce the
    published note byte for byte.
  * C2SP tlog-checkpoint.md: the example checkpoint note (no key is published
    for it, so it is checked for format only).
"""

from __future__ import annotations

import base64
import re

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from evidence.checkpoint import (
    Checkpoint,
    CheckpointError,
    note_key_hash,
    parse_signed_checkpoint,
    sign_checkpoint,
    sign_note,
    verify_signed_checkpoint,
)
from evidence.merkle import EMPTY_ROOT, leaf_hash, root_from_leaf_hashes

EM_DASH = "\u2014"

# --- golang.org/x/mod/sumdb/note vectors -------------------------------------

PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
GO_TEXT = (
    b"If you think cryptography is the answer to your problem,\n"
    b"then you don't know what your problem is.\n"
)
PETER_SIG = (
    "x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM="
)
ENOCH_SIG = (
    "rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ="
)
GO_NOTE = GO_TEXT + f"\n{EM_DASH} PeterNeumann {PETER_SIG}\n".encode()

# --- C2SP tlog-checkpoint.md example ------------------------------------------

C2SP_EXAMPLE = (
    "example.com/behind-the-sofa\n"
    "20852163\n"
    "CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
    "\n"
    f"{EM_DASH} example.com/behind-the-sofa "
    "Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
).encode()


def parse_vkey(vkey: str) -> tuple[str, bytes, Ed25519PublicKey]:
    """Split a Go note verifier key ``name+hexid+base64(0x01 || key)``."""
    name, key_id, material = vkey.split("+", 2)
    raw = base64.b64decode(material)
    assert raw[0] == 0x01
    return name, bytes.fromhex(key_id), Ed25519PublicKey.from_public_bytes(raw[1:])


def parse_skey(skey: str) -> tuple[str, bytes, Ed25519PrivateKey]:
    """Split a Go note signer key ``PRIVATE+KEY+name+hexid+base64(0x01 || seed)``."""
    private, key, name, key_id, material = skey.split("+", 4)
    assert (private, key) == ("PRIVATE", "KEY")
    raw = base64.b64decode(material)
    assert raw[0] == 0x01
    return name, bytes.fromhex(key_id), Ed25519PrivateKey.from_private_bytes(raw[1:])


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


LOG_NAME = "example.com/log"
LOG_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
OTHER_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32, 64)))
ROOT = root_from_leaf_hashes([leaf_hash(b"a"), leaf_hash(b"b"), leaf_hash(b"c")])
CP = Checkpoint(origin=LOG_NAME, size=3, root=ROOT)


def single_line(exc: pytest.ExceptionInfo[CheckpointError]) -> str:
    message = str(exc.value)
    assert "\n" not in message
    assert "expected" in message
    assert "found" in message
    return message


# --- Key IDs and signatures against the Go reference ---------------------------


def test_note_key_hash_reproduces_go_reference_vkeys() -> None:
    for vkey in (PETER_VKEY, ENOCH_VKEY):
        name, key_id, public_key = parse_vkey(vkey)
        assert note_key_hash(name, public_key) == key_id, vkey
    assert note_key_hash("PeterNeumann", parse_vkey(PETER_VKEY)[2]).hex() == "c74f20a3"


def test_go_reference_signer_key_derives_the_published_public_key() -> None:
    name, key_id, private_key = parse_skey(PETER_SKEY)
    vname, vkey_id, public_key = parse_vkey(PETER_VKEY)
    assert (name, key_id) == (vname, vkey_id)
    assert raw_public(private_key.public_key()) == raw_public(public_key)
    assert note_key_hash(name, private_key.public_key()) == key_id


def test_sign_note_reproduces_go_reference_note_byte_for_byte() -> None:
    name, _, private_key = parse_skey(PETER_SKEY)
    assert sign_note(GO_TEXT, name, private_key) == GO_NOTE


def test_go_reference_signatures_verify_with_published_keys() -> None:
    for vkey, sig in ((PETER_VKEY, PETER_SIG), (ENOCH_VKEY, ENOCH_SIG)):
        name, key_id, public_key = parse_vkey(vkey)
        raw = base64.b64decode(sig)
        assert raw[:4] == key_id == note_key_hash(name, public_key)
        public_key.verify(raw[4:], GO_TEXT)  # raises InvalidSignature on mismatch


def test_go_reference_note_is_not_a_checkpoint() -> None:
    name, _, public_key = parse_vkey(PETER_VKEY)
    with pytest.raises(CheckpointError, match="at least 3 checkpoint lines") as exc:
        verify_signed_checkpoint(GO_NOTE, name, public_key)
    single_line(exc)


# --- Format -------------------------------------------------------------------


def test_checkpoint_body_is_origin_size_and_base64_root_lines() -> None:
    assert CP.body() == (f"{LOG_NAME}\n3\n{base64.b64encode(ROOT).decode()}\n").encode()
    empty = Checkpoint(origin="o", size=0, root=EMPTY_ROOT)
    assert empty.body() == b"o\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n"


def test_signed_note_matches_c2sp_example_format() -> None:
    cp, signatures = parse_signed_checkpoint(C2SP_EXAMPLE)
    assert cp.origin == "example.com/behind-the-sofa"
    assert cp.size == 20852163
    assert cp.root == base64.b64decode("CsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=")
    assert cp.extensions == ()
    assert [name for name, _ in signatures] == ["example.com/behind-the-sofa"]
    assert len(signatures[0][1]) == 4 + 64  # key ID || Ed25519 signature

    # Our own note for the same checkpoint has the identical body and the
    # same shape of signature line (only the key ID and signature differ).
    ours = sign_checkpoint(cp, "example.com/behind-the-sofa", LOG_KEY)
    ours_lines = ours.split(b"\n")
    example_lines = C2SP_EXAMPLE.split(b"\n")
    assert ours_lines[:4] == example_lines[:4]
    assert len(ours_lines) == len(example_lines) == 6
    assert ours_lines[-1] == example_lines[-1] == b""
    prefix = f"{EM_DASH} example.com/behind-the-sofa ".encode()
    assert ours_lines[4].startswith(prefix)
    assert len(ours_lines[4]) == len(example_lines[4])
    assert cp.body() == C2SP_EXAMPLE[: C2SP_EXAMPLE.index(b"\n\n") + 1]


def test_signed_checkpoint_layout_and_signature() -> None:
    note = sign_checkpoint(CP, LOG_NAME, LOG_KEY)
    body, sig_block = note.split(b"\n\n")
    assert body + b"\n" == CP.body()
    line = sig_block.decode()
    assert line.startswith(f"{EM_DASH} {LOG_NAME} ")
    assert line.endswith("\n")
    raw = base64.b64decode(line.rstrip("\n").split(" ")[2], validate=True)
    assert raw[:4] == note_key_hash(LOG_NAME, LOG_KEY.public_key())
    LOG_KEY.public_key().verify(raw[4:], CP.body())


def test_signed_checkpoint_round_trips() -> None:
    note = sign_checkpoint(CP, LOG_NAME, LOG_KEY)
    assert verify_signed_checkpoint(note, LOG_NAME, LOG_KEY.public_key()) == CP
    cp, signatures = parse_signed_checkpoint(note)
    assert cp == CP
    assert len(signatures) == 1
    assert signatures[0][0] == LOG_NAME


def test_empty_tree_checkpoint_round_trips() -> None:
    cp = Checkpoint(origin=LOG_NAME, size=0, root=EMPTY_ROOT)
    note = sign_checkpoint(cp, LOG_NAME, LOG_KEY)
    assert verify_signed_checkpoint(note, LOG_NAME, LOG_KEY.public_key()) == cp


def test_extension_lines_are_signed_and_preserved() -> None:
    cp = Checkpoint(origin=LOG_NAME, size=3, root=ROOT, extensions=("ext one", "ext two"))
    assert cp.body().endswith(b"\next one\next two\n")
    note = sign_checkpoint(cp, LOG_NAME, LOG_KEY)
    assert verify_signed_checkpoint(note, LOG_NAME, LOG_KEY.public_key()) == cp


def test_parse_returns_every_signature_line_in_order() -> None:
    note = sign_checkpoint(CP, LOG_NAME, LOG_KEY)
    extra = sign_checkpoint(CP, "witness.example/w1", OTHER_KEY).split(b"\n\n")[1]
    _, signatures = parse_signed_checkpoint(note + extra)
    assert [name for name, _ in signatures] == [LOG_NAME, "witness.example/w1"]
    assert signatures[1][1][:4] == note_key_hash("witness.example/w1", OTHER_KEY.public_key())


# --- Signature semantics --------------------------------------------------------


def test_checkpoint_signed_by_other_key_is_rejected() -> None:
    note = sign_checkpoint(CP, LOG_NAME, OTHER_KEY)
    with pytest.raises(CheckpointError, match="expected a signature by") as exc:
        verify_signed_checkpoint(note, LOG_NAME, LOG_KEY.public_key())
    message = single_line(exc)
    assert note_key_hash(LOG_NAME, LOG_KEY.public_key()).hex() in message


def test_checkpoint_signed_under_other_name_is_rejected() -> None:
    note = sign_checkpoint(CP, "someone.else/log", LOG_KEY)
    with pytest.raises(CheckpointError, match="expected a signature by") as exc:
        verify_signed_checkpoint(note, LOG_NAME, LOG_KEY.public_key())
    single_line(exc)


@pytest.mark.parametrize("other_name", [LOG_NAME, "witness.example/w1"])
def test_unknown_additional_signature_is_ignored(other_name: str) -> None:
    ours = sign_checkpoint(CP, LOG_NAME, LOG_KEY)
    theirs = sign_checkpoint(CP, other_name, OTHER_KEY)
    ours_body, ours_sig = ours.split(b"\n\n")
    _, their_sig = theirs.split(b"\n\n")
    public_key = LOG_KEY.public_key()
    for note in (ours + their_sig, ours_body + b"\n\n" + their_sig + ours_sig):
        assert verify_signed_checkpoint(note, LOG_NAME, public_key) == CP


def test_tampered_body_is_rejected() -> None:
    note = sign_checkpoint(CP, LOG_NAME, LOG_KEY)
    tampered = note.replace(b"\n3\n", b"\n4\n", 1)
    with pytest.raises(CheckpointError, match="valid Ed25519 signature") as exc:
        verify_signed_checkpoint(tampered, LOG_NAME, LOG_KEY.public_key())
    single_line(exc)


def test_corrupted_signature_bytes_are_rejected() -> None:
    note = sign_checkpoint(CP, LOG_NAME, LOG_KEY)
    body, line = note.split(b"\n\n")
    prefix, blob = line.decode().rstrip("\n").rsplit(" ", 1)
    raw = bytearray(base64.b64decode(blob))
    raw[10] ^= 1
    bad = body + b"\n\n" + f"{prefix} {base64.b64encode(bytes(raw)).decode()}\n".encode()
    with pytest.raises(CheckpointError, match="valid Ed25519 signature"):
        verify_signed_checkpoint(bad, LOG_NAME, LOG_KEY.public_key())


def test_failing_signature_from_the_expected_key_rejects_the_note() -> None:
    # signed-note: a known key's signature that fails to verify SHOULD reject
    # the whole note, even if another line from that key verifies.
    good = sign_checkpoint(CP, LOG_NAME, LOG_KEY)
    other_cp = Checkpoint(origin=LOG_NAME, size=4, root=ROOT)
    wrong_sig_line = sign_checkpoint(other_cp, LOG_NAME, LOG_KEY).split(b"\n\n")[1]
    with pytest.raises(CheckpointError, match="valid Ed25519 signature"):
        verify_signed_checkpoint(good + wrong_sig_line, LOG_NAME, LOG_KEY.public_key())


def test_truncated_signature_from_the_expected_key_is_rejected() -> None:
    key_id = note_key_hash(LOG_NAME, LOG_KEY.public_key())
    blob = base64.b64encode(key_id + b"\x00" * 10).decode()
    note = CP.body() + f"\n{EM_DASH} {LOG_NAME} {blob}\n".encode()
    with pytest.raises(CheckpointError, match="64-byte Ed25519 signature") as exc:
        verify_signed_checkpoint(note, LOG_NAME, LOG_KEY.public_key())
    single_line(exc)


# --- Malformed notes ------------------------------------------------------------


def _note_with_body(body: bytes) -> bytes:
    """A note whose signature is valid over ``body`` (so only parsing can fail)."""
    key_id = note_key_hash(LOG_NAME, LOG_KEY.public_key())
    blob = base64.b64encode(key_id + LOG_KEY.sign(body)).decode()
    return body + f"\n{EM_DASH} {LOG_NAME} {blob}\n".encode()


GOOD = sign_checkpoint(CP, LOG_NAME, LOG_KEY)
ROOT_B64 = base64.b64encode(ROOT).decode()


@pytest.mark.parametrize(
    ("note", "needle"),
    [
        pytest.param(CP.body(), "blank line", id="no-blank-line"),
        pytest.param(GOOD[:-1], "ending in a newline", id="missing-trailing-newline"),
        pytest.param(b"\xff" + GOOD, "UTF-8", id="bad-utf8"),
        pytest.param(GOOD.replace(b"\n3\n", b"\n3\r\n"), "control characters", id="cr"),
        pytest.param(b"\x01" + GOOD, "control characters", id="control-char"),
        pytest.param(CP.body() + b"\n", "signature line", id="no-signature-lines"),
        pytest.param(GOOD + b"Unexpected line.\n", "signature line 2", id="trailing-junk"),
        pytest.param(
            _note_with_body(f"{LOG_NAME}\n3\n".encode()), "at least 3", id="two-body-lines"
        ),
        pytest.param(
            _note_with_body(f"\n3\n{ROOT_B64}\n".encode()), "non-empty origin", id="empty-origin"
        ),
        pytest.param(
            _note_with_body(f"{LOG_NAME}\n03\n{ROOT_B64}\n".encode()),
            "leading zeroes",
            id="leading-zero-size",
        ),
        pytest.param(
            _note_with_body(f"{LOG_NAME}\n00\n{ROOT_B64}\n".encode()),
            "leading zeroes",
            id="double-zero-size",
        ),
        pytest.param(
            _note_with_body(f"{LOG_NAME}\n+3\n{ROOT_B64}\n".encode()),
            "decimal tree size",
            id="signed-size",
        ),
        pytest.param(
            _note_with_body(f"{LOG_NAME}\n0x3\n{ROOT_B64}\n".encode()),
            "decimal tree size",
            id="hex-size",
        ),
        pytest.param(
            _note_with_body(f"{LOG_NAME}\n\u0663\n{ROOT_B64}\n".encode()),
            "decimal tree size",
            id="non-ascii-digit-size",
        ),
        pytest.param(
            _note_with_body(f"{LOG_NAME}\n\n{ROOT_B64}\n".encode()),
            "decimal tree size",
            id="empty-size",
        ),
        pytest.param(
            _note_with_body(f"{LOG_NAME}\n{2**64}\n{ROOT_B64}\n".encode()),
            "below 2**64",
            id="size-overflow",
        ),
        pytest.param(
            _note_with_body(f"{LOG_NAME}\n3\n{base64.b64encode(ROOT[:31]).decode()}\n".encode()),
            "32-byte root hash",
            id="short-root",
        ),
        pytest.param(
            _note_with_body(f"{LOG_NAME}\n3\n{base64.b64encode(ROOT + b'x').decode()}\n".encode()),
            "32-byte root hash",
            id="long-root",
        ),
        pytest.param(
            _note_with_body(f"{LOG_NAME}\n3\n{ROOT.hex()}\n".encode()),
            "root hash",
            id="hex-root",
        ),
        pytest.param(
            _note_with_body(f"{LOG_NAME}\n3\n{ROOT_B64.rstrip('=')}\n".encode()),
            "base64 root hash",
            id="unpadded-root",
        ),
        pytest.param(
            _note_with_body(f"{LOG_NAME}\n3\n{ROOT_B64}\n\next\n".encode()),
            "non-empty extension line",
            id="empty-extension-line",
        ),
        pytest.param(
            GOOD.replace(EM_DASH.encode(), b"-"), "start with", id="hyphen-instead-of-em-dash"
        ),
        pytest.param(
            GOOD.replace(LOG_NAME.encode() + b" ", b"bad+name ", 1).replace(
                f"{EM_DASH} {LOG_NAME}".encode(), f"{EM_DASH} bad+name".encode()
            ),
            "key name",
            id="plus-in-signature-name",
        ),
        pytest.param(
            GOOD.replace(f"{EM_DASH} {LOG_NAME} ".encode(), f"{EM_DASH} Bad Name ".encode()),
            "signature line 1",
            id="space-in-signature-name",
        ),
        pytest.param(GOOD[:-3] + b"!!\n", "base64 on signature line", id="signature-not-base64"),
    ],
)
def test_malformed_note_is_rejected(note: bytes, needle: str) -> None:
    with pytest.raises(CheckpointError, match=re.escape(needle)) as exc:
        verify_signed_checkpoint(note, LOG_NAME, LOG_KEY.public_key())
    single_line(exc)
    with pytest.raises(CheckpointError):
        parse_signed_checkpoint(note)


def test_checkpoint_error_is_a_value_error() -> None:
    assert issubclass(CheckpointError, ValueError)


# --- Construction-time validation ------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"origin": "", "size": 1, "root": ROOT}, "non-empty origin"),
        ({"origin": "a\nb", "size": 1, "root": ROOT}, "without newlines"),
        ({"origin": "a\tb", "size": 1, "root": ROOT}, "control characters"),
        ({"origin": "o", "size": -1, "root": ROOT}, "tree size"),
        ({"origin": "o", "size": 2**64, "root": ROOT}, "tree size"),
        ({"origin": "o", "size": True, "root": ROOT}, "tree size"),
        ({"origin": "o", "size": 1, "root": ROOT[:31]}, "32-byte root"),
        ({"origin": "o", "size": 1, "root": ROOT, "extensions": ("",)}, "extension"),
        ({"origin": "o", "size": 1, "root": ROOT, "extensions": ("a\nb",)}, "extension"),
    ],
)
def test_checkpoint_rejects_invalid_fields(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(CheckpointError, match=re.escape(needle)) as exc:
        Checkpoint(**kwargs)  # type: ignore[arg-type]
    single_line(exc)


@pytest.mark.parametrize("name", ["", "has space", "has+plus", "tab\there", "nbsp\u00a0here"])
def test_invalid_key_names_are_rejected(name: str) -> None:
    with pytest.raises(CheckpointError, match="key name"):
        sign_checkpoint(CP, name, LOG_KEY)
    with pytest.raises(CheckpointError, match="key name"):
        note_key_hash(name, LOG_KEY.public_key())
    with pytest.raises(CheckpointError, match="key name"):
        verify_signed_checkpoint(GOOD, name, LOG_KEY.public_key())


def test_origin_need_not_match_key_name() -> None:
    # tlog-checkpoint only RECOMMENDS that the key name match the origin.
    cp = Checkpoint(origin="origin with spaces+plus", size=3, root=ROOT)
    note = sign_checkpoint(cp, LOG_NAME, LOG_KEY)
    assert verify_signed_checkpoint(note, LOG_NAME, LOG_KEY.public_key()) == cp


def test_sign_note_rejects_text_without_trailing_newline() -> None:
    with pytest.raises(CheckpointError, match="ending in a newline"):
        sign_note(b"abc", LOG_NAME, LOG_KEY)


def test_a_checkpoint_of_another_log_is_rejected_when_the_origin_is_checked() -> None:
    # A signature line can be renamed (its key id recomputed from the public key)
    # without breaking the signature over the text; the origin line cannot change.
    key = Ed25519PrivateKey.generate()
    note = sign_checkpoint(
        Checkpoint("example.com/log-a", 3, b"\x01" * 32), "example.com/log-a", key
    )
    text, _, sig = note.decode().rpartition("\n\n")
    raw = base64.b64decode(sig.split(" ")[2])
    renamed = base64.b64encode(note_key_hash("example.com/log-b", key.public_key()) + raw[4:])
    relabelled = f"{text}\n\n\u2014 example.com/log-b {renamed.decode()}\n".encode()
    assert verify_signed_checkpoint(relabelled, "example.com/log-b", key.public_key()).size == 3
    with pytest.raises(CheckpointError, match="expected a checkpoint of the log"):
        verify_signed_checkpoint(
            relabelled, "example.com/log-b", key.public_key(), origin="example.com/log-b"
        )
    assert verify_signed_checkpoint(note, "example.com/log-a", key.public_key(),
                                    origin="example.com/log-a").size == 3  # fmt: skip
