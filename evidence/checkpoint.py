"""Transparency-log checkpoints as Ed25519-signed notes.

Implements the C2SP tlog-checkpoint note text (https://c2sp.org/tlog-checkpoint)
carried in a C2SP signed note (https://c2sp.org/signed-note) with Ed25519
signatures (signature type 0x01).

Checkpoint note text::

    <origin>\\n
    <tree size, ASCII decimal, no leading zeroes>\\n
    <base64 RFC 6962 root hash>\\n
    [<non-empty extension line>\\n ...]

Signed note: the text, one blank line, then one or more signature lines
``U+2014 EM DASH, space, key name, space, base64(key ID || signature), newline``
where, for Ed25519, key ID = SHA-256(name || 0x0A || 0x01 || public key)[:4]
and the signature is over the note text bytes exactly.  Verifiers ignore
signatures from unknown keys (a different name or key ID) and reject the note
if no signature from the expected key verifies, or if one from it fails.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

__all__ = [
    "MAX_SIGNATURES",
    "SIGNATURE_TYPE_ED25519",
    "Checkpoint",
    "CheckpointError",
    "note_key_hash",
    "parse_signed_checkpoint",
    "sign_checkpoint",
    "sign_note",
    "verify_signed_checkpoint",
]

SIGNATURE_TYPE_ED25519 = 0x01
"""C2SP signed-note signature type identifier for Ed25519."""

MAX_SIGNATURES = 100
"""Upper bound on signature lines accepted in one note (the spec requires >= 16)."""

_ROOT_SIZE = 32
_KEY_ID_SIZE = 4
_ED25519_SIG_SIZE = 64
_MAX_TREE_SIZE = 2**64 - 1  # tree sizes are uint64 in every log implementation
_SIG_PREFIX = "\u2014 "  # EM DASH, SPACE
_SIZE_RE = re.compile(r"0|[1-9][0-9]*")  # ASCII only; \d would accept other scripts
_CONTROL_RE = re.compile(r"[\x00-\x09\x0b-\x1f]")  # control characters except \n
_SHOW = 60  # characters of offending input quoted in error messages


class CheckpointError(ValueError):
    """A checkpoint or signed note is malformed, or fails verification."""


def _show(value: str | bytes) -> str:
    """Quote (a prefix of) untrusted input for a one-line error message."""
    shown = repr(value[:_SHOW])
    return shown + "..." if len(value) > _SHOW else shown


def _check_name(name: str) -> None:
    """Key names: non-empty, no Unicode spaces, no '+', no control characters."""
    if not isinstance(name, str) or not name:
        raise CheckpointError(f"expected a non-empty key name, found {name!r}")
    for ch in name:
        if ch.isspace() or ch == "+" or ord(ch) < 0x20:
            raise CheckpointError(
                f"expected a key name without spaces, '+' or control characters, "
                f"found {_show(name)}"
            )


@dataclass(frozen=True)
class Checkpoint:
    """A tlog-checkpoint: the log's origin, tree size and RFC 6962 root hash.

    ``extensions`` holds the optional C2SP extension lines (each non-empty,
    without the newline); they are part of the signed body.
    """

    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.origin, str) or not self.origin:
            raise CheckpointError(f"expected a non-empty origin, found {self.origin!r}")
        if "\n" in self.origin or _CONTROL_RE.search(self.origin):
            raise CheckpointError(
                f"expected an origin without newlines or control characters, "
                f"found {_show(self.origin)}"
            )
        if (
            isinstance(self.size, bool)
            or not isinstance(self.size, int)
            or not 0 <= self.size <= _MAX_TREE_SIZE
        ):
            raise CheckpointError(
                f"expected a tree size in [0, 2**64), found {_show(repr(self.size))}"
            )
        if not isinstance(self.root, bytes) or len(self.root) != _ROOT_SIZE:
            found = f"{len(self.root)} bytes" if isinstance(self.root, bytes) else repr(self.root)
            raise CheckpointError(f"expected a {_ROOT_SIZE}-byte root hash, found {found}")
        if not isinstance(self.extensions, tuple):
            raise CheckpointError(
                f"expected extensions as a tuple of strings, found {type(self.extensions)!r}"
            )
        for line in self.extensions:
            if not isinstance(line, str) or not line:
                raise CheckpointError(f"expected a non-empty extension line, found {line!r}")
            if "\n" in line or _CONTROL_RE.search(line):
                raise CheckpointError(
                    f"expected an extension line without newlines or control characters, "
                    f"found {_show(line)}"
                )

    def body(self) -> bytes:
        """Return the note text: origin, size, base64 root, extensions; each + newline."""
        lines = [self.origin, str(self.size), base64.b64encode(self.root).decode("ascii")]
        lines.extend(self.extensions)
        return "".join(line + "\n" for line in lines).encode("utf-8")


def _raw_public_key(public_key: Ed25519PublicKey) -> bytes:
    return public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def note_key_hash(name: str, public_key: Ed25519PublicKey) -> bytes:
    """Return the 4-byte key ID SHA-256(name || 0x0A || 0x01 || raw public key)[:4]."""
    _check_name(name)
    material = (
        name.encode("utf-8") + b"\n" + bytes([SIGNATURE_TYPE_ED25519]) + _raw_public_key(public_key)
    )
    return hashlib.sha256(material).digest()[:_KEY_ID_SIZE]


def _check_text(text: str) -> None:
    """Note text: ends with a newline, no control characters other than newline."""
    if not text.endswith("\n"):
        raise CheckpointError(
            f"expected note text ending in a newline, found {_show(text[-_SHOW:])}"
        )
    match = _CONTROL_RE.search(text)
    if match:
        raise CheckpointError(
            f"expected no control characters other than newline, "
            f"found {match.group()!r} at offset {match.start()}"
        )


def sign_note(text: bytes, name: str, private_key: Ed25519PrivateKey) -> bytes:
    """Return ``text`` as a signed note with one Ed25519 signature line by ``name``.

    ``text`` must be UTF-8, end in a newline and hold no control characters
    other than newline.  The signature covers ``text`` exactly.
    """
    _check_name(name)
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(
            f"expected UTF-8 note text, found invalid byte at offset {exc.start}"
        ) from None
    _check_text(decoded)
    key_id = note_key_hash(name, private_key.public_key())
    signature = private_key.sign(text)
    blob = base64.b64encode(key_id + signature).decode("ascii")
    return text + b"\n" + f"{_SIG_PREFIX}{name} {blob}\n".encode()


def sign_checkpoint(cp: Checkpoint, name: str, private_key: Ed25519PrivateKey) -> bytes:
    """Return the signed note for ``cp``: body, blank line, ``— name base64(id||sig)``."""
    return sign_note(cp.body(), name, private_key)


def _parse_signature_line(line: str, number: int) -> tuple[str, bytes]:
    if not line.startswith(_SIG_PREFIX):
        raise CheckpointError(
            f"expected signature line {number} to start with '\u2014 ' (U+2014, space), "
            f"found {_show(line)}"
        )
    fields = line[len(_SIG_PREFIX) :].split(" ")
    if len(fields) != 2 or not fields[0] or not fields[1]:
        raise CheckpointError(
            f"expected signature line {number} as '\u2014 <name> <base64>', found {_show(line)}"
        )
    name, blob = fields
    _check_name(name)
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise CheckpointError(
            f"expected base64 on signature line {number}, found {_show(blob)}"
        ) from None
    if len(raw) <= _KEY_ID_SIZE:
        raise CheckpointError(
            f"expected a key ID and signature (> {_KEY_ID_SIZE} bytes) on signature line "
            f"{number}, found {len(raw)} bytes"
        )
    return name, raw


def _parse_body(text: str) -> Checkpoint:
    lines = text[:-1].split("\n")  # text ends with "\n" (checked by the caller)
    if len(lines) < 3:
        raise CheckpointError(
            f"expected at least 3 checkpoint lines (origin, size, root), found {len(lines)}"
        )
    origin, size_text, root_text, *extensions = lines
    if not origin:
        raise CheckpointError("expected a non-empty origin on line 1, found an empty line")
    if not _SIZE_RE.fullmatch(size_text):
        raise CheckpointError(
            f"expected a decimal tree size without leading zeroes on line 2, "
            f"found {_show(size_text)}"
        )
    size = int(size_text)
    if size > _MAX_TREE_SIZE:
        raise CheckpointError(f"expected a tree size below 2**64 on line 2, found {size_text}")
    try:
        root = base64.b64decode(root_text, validate=True)
    except (binascii.Error, ValueError):
        raise CheckpointError(
            f"expected a base64 root hash on line 3, found {_show(root_text)}"
        ) from None
    if len(root) != _ROOT_SIZE:
        raise CheckpointError(
            f"expected a {_ROOT_SIZE}-byte root hash on line 3, found {len(root)} bytes"
        )
    if base64.b64encode(root).decode("ascii") != root_text:
        raise CheckpointError(
            f"expected canonical base64 for the root hash on line 3, found {_show(root_text)}"
        )
    for offset, line in enumerate(extensions, start=4):
        if not line:
            raise CheckpointError(
                f"expected a non-empty extension line on line {offset}, found an empty line"
            )
    return Checkpoint(origin=origin, size=size, root=root, extensions=tuple(extensions))


def _split_note(note: bytes) -> tuple[str, list[tuple[str, bytes]]]:
    """Split a signed note into its text and its (name, key ID || signature) lines."""
    if not isinstance(note, bytes):
        raise CheckpointError(f"expected the signed note as bytes, found {type(note).__name__}")
    try:
        decoded = note.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CheckpointError(
            f"expected a UTF-8 note, found invalid byte at offset {exc.start}"
        ) from None
    _check_text(decoded)
    split = decoded.rfind("\n\n")
    if split < 0:
        raise CheckpointError("expected a blank line between note text and signatures, found none")
    text = decoded[: split + 1]
    sig_lines = decoded[split + 2 : -1].split("\n") if split + 2 < len(decoded) else []
    if not sig_lines:
        raise CheckpointError("expected at least one signature line, found none")
    if len(sig_lines) > MAX_SIGNATURES:
        raise CheckpointError(
            f"expected at most {MAX_SIGNATURES} signature lines, found {len(sig_lines)}"
        )
    signatures = [_parse_signature_line(line, i) for i, line in enumerate(sig_lines, start=1)]
    return text, signatures


def parse_signed_checkpoint(note: bytes) -> tuple[Checkpoint, list[tuple[str, bytes]]]:
    """Parse (without verifying) a signed checkpoint note.

    Returns the checkpoint and every signature line as (key name, key ID ||
    signature bytes), in note order.  Raises CheckpointError if malformed.
    """
    text, signatures = _split_note(note)
    return _parse_body(text), signatures


def verify_signed_checkpoint(
    note: bytes, name: str, public_key: Ed25519PublicKey, *, origin: str | None = None
) -> Checkpoint:
    """Parse ``note`` and verify it carries a valid Ed25519 signature by ``name``.

    Signature lines from other keys (another name or key ID) are ignored.
    Raises CheckpointError if the note is malformed, has no signature line
    for this name and key ID, or if any such line fails to verify.  With
    ``origin``, the checkpoint's origin line must be exactly that log's
    (C2SP tlog-checkpoint: verifiers check the origin): a signature line can
    be renamed without breaking the signature, the signed origin cannot.
    """
    _check_name(name)
    text, signatures = _split_note(note)
    checkpoint = _parse_body(text)
    if origin is not None and checkpoint.origin != origin:
        raise CheckpointError(
            f"expected a checkpoint of the log {_show(origin)}, "
            f"found one of {_show(checkpoint.origin)}"
        )
    key_id = note_key_hash(name, public_key)
    matching = [raw for sig_name, raw in signatures if sig_name == name and raw[:4] == key_id]
    if not matching:
        found = ", ".join(f"{n}+{raw[:4].hex()}" for n, raw in signatures)
        raise CheckpointError(
            f"expected a signature by {name}+{key_id.hex()}, found only {_show(found)}"
        )
    body = text.encode("utf-8")
    for raw in matching:
        signature = raw[_KEY_ID_SIZE:]
        if len(signature) != _ED25519_SIG_SIZE:
            raise CheckpointError(
                f"expected a {_ED25519_SIG_SIZE}-byte Ed25519 signature by "
                f"{name}+{key_id.hex()}, found {len(signature)} bytes"
            )
        try:
            public_key.verify(signature, body)
        except InvalidSignature:
            raise CheckpointError(
                f"expected a valid Ed25519 signature by {name}+{key_id.hex()} over the "
                f"checkpoint for {_show(checkpoint.origin)} at size {checkpoint.size}, "
                f"found an invalid one"
            ) from None
    return checkpoint
