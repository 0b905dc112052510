"""Cosignatures of this log's checkpoints by parties that are not this machine.

Protocol pieces only (the HTTP call is the gatekeeper's): C2SP signed-note verifier keys
(https://c2sp.org/signed-note: ``<name>+<hex key ID>+<base64(type || public key)>``),
C2SP tlog-cosignature v1 (https://c2sp.org/tlog-cosignature: signature type 0x04, the
signed message ``cosignature/v1\\ntime <unix seconds>\\n`` followed by the checkpoint
text, the signature line's bytes key ID(4) || timestamp(8, big-endian) || Ed25519(64)),
and the C2SP tlog-witness ``add-checkpoint`` request body (https://c2sp.org/tlog-witness).

What each cosigner last cosigned, and what any of them refused, is kept in one
owner-only file beside the checkpoint (``cosign.json``, written atomically). A stored
cosignature is re-verified on every read against the key the caller trusts.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from . import checkpoint as cp
from .errors import StoreUnavailable
from .state import atomic_write

SIGNATURE_TYPE_COSIGNATURE = 0x04
"""C2SP signed-note signature type for a tlog-cosignature/v1 (timestamped Ed25519)."""

COSIGN_FILE = "cosign.json"
MAX_PROOF_LINES = 63  # tlog-witness: a client never sends more
_SIG_PREFIX = "\u2014 "
_STATE_VERSION = 1
_MAX_STATE_BYTES = 1 << 20


class CosignError(ValueError):
    """A verifier key, a cosignature or a witness answer is malformed or does not verify."""


@dataclass(frozen=True)
class CosignerKey:
    """A witness's verifier key: its name, 4-byte key ID and raw Ed25519 public key."""

    name: str
    key_id: bytes
    public_raw: bytes

    @classmethod
    def parse(cls, vkey: str) -> CosignerKey:
        """Parse ``name+hexkeyid+base64(0x04 || key)``; the key ID must be the one derived
        from the name and key (SHA-256(name || 0x0A || 0x04 || key)[:4])."""
        parts = vkey.split("+", 2)  # the base64 key may hold "+" itself
        if len(parts) != 3:
            raise CosignError("a cosigner key is <name>+<hex key id>+<base64 key>")
        name, hex_id, blob = parts
        try:
            cp._check_name(name)
            raw = base64.b64decode(blob, validate=True)
            key_id = bytes.fromhex(hex_id)
        except (cp.CheckpointError, binascii.Error, ValueError) as exc:
            raise CosignError(
                f"a cosigner key is <name>+<hex key id>+<base64 key>: {exc}"
            ) from None
        if len(raw) != 33 or raw[0] != SIGNATURE_TYPE_COSIGNATURE:
            raise CosignError("a cosigner key is type 0x04 (cosignature/v1) and 32 key bytes")
        key = cls(name, _key_id(name, raw[1:]), raw[1:])
        if key.key_id != key_id or len(hex_id) != 8:
            raise CosignError(f"the key id {hex_id[:16]!r} is not the one this name and key give")
        return key

    @classmethod
    def of(cls, name: str, public_raw: bytes) -> CosignerKey:
        return cls(name, _key_id(name, public_raw), public_raw)

    def text(self) -> str:
        blob = base64.b64encode(bytes([SIGNATURE_TYPE_COSIGNATURE]) + self.public_raw).decode()
        return f"{self.name}+{self.key_id.hex()}+{blob}"


def _key_id(name: str, public_raw: bytes) -> bytes:
    material = name.encode() + b"\n" + bytes([SIGNATURE_TYPE_COSIGNATURE]) + public_raw
    return hashlib.sha256(material).digest()[:4]


def signed_message(checkpoint_text: bytes, timestamp: int) -> bytes:
    """What a cosignature/v1 signs: the header lines, then the checkpoint text exactly."""
    return b"cosignature/v1\ntime %d\n" % timestamp + checkpoint_text


@dataclass(frozen=True)
class Cosignature:
    """One verified cosignature: by whom, when (unix seconds) and the note line itself."""

    name: str
    timestamp: int
    line: str


def verify_cosignature(key: CosignerKey, checkpoint_text: bytes, lines: str) -> Cosignature:
    """The cosignature by ``key`` over ``checkpoint_text`` among the note signature lines
    a witness answered; lines by other keys are ignored (tlog-witness). CosignError when
    none by this key is there or one does not verify."""
    found: Cosignature | None = None
    for line in lines.splitlines():
        if not line.startswith(_SIG_PREFIX):
            raise CosignError(
                f"a witness answered a line that is not a note signature: {line[:60]!r}"
            )
        name, _, blob = line[len(_SIG_PREFIX) :].partition(" ")
        try:
            raw = base64.b64decode(blob, validate=True)
        except (binascii.Error, ValueError):
            raise CosignError(f"a signature line of {name[:60]!r} is not base64") from None
        if name != key.name or raw[:4] != key.key_id:
            continue
        if len(raw) != 4 + 8 + 64:
            raise CosignError(f"a cosignature by {key.name} is {len(raw)} bytes, not 76")
        timestamp = int.from_bytes(raw[4:12], "big")
        try:
            Ed25519PublicKey.from_public_bytes(key.public_raw).verify(
                raw[12:], signed_message(checkpoint_text, timestamp)
            )
        except InvalidSignature:
            raise CosignError(f"the cosignature by {key.name} does not verify") from None
        found = Cosignature(key.name, timestamp, line)
    if found is None:
        raise CosignError(f"no cosignature by {key.name}+{key.key_id.hex()} in the answer")
    return found


def request_body(old_size: int, proof: Sequence[bytes], note: bytes) -> bytes:
    """An ``add-checkpoint`` body: ``old N``, one base64 hash a line, a blank line, the note."""
    if len(proof) > MAX_PROOF_LINES:
        raise CosignError(f"a consistency proof of {len(proof)} hashes is longer than 63")
    lines = [f"old {old_size}", *(base64.b64encode(h).decode() for h in proof)]
    return ("\n".join(lines) + "\n\n").encode() + note


@dataclass(frozen=True)
class Cosigned:
    """The latest cosignature a cosigner gave: the checkpoint note and its line."""

    key: str
    size: int
    timestamp: int
    note: str
    line: str


@dataclass(frozen=True)
class Refusal:
    """A cosigner refused this log: what it holds (`witness_size`), what we had, and why."""

    cosigner: str
    status: int
    witness_size: int | None
    log_size: int
    reason: str
    time: str


@dataclass(frozen=True)
class CosignState:
    cosigned: dict[str, Cosigned] = field(default_factory=dict)
    refusals: tuple[Refusal, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"version": _STATE_VERSION,
                "cosigned": {k: asdict(v) for k, v in sorted(self.cosigned.items())},
                "refusals": [asdict(r) for r in self.refusals]}  # fmt: skip


def read_state(evidence_dir: Path) -> CosignState:
    """The stored state; empty when absent. A file that does not parse is unavailable."""
    path = evidence_dir / COSIGN_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return CosignState()
    except OSError as exc:
        raise StoreUnavailable(f"cannot read {COSIGN_FILE}: {exc.strerror}") from None
    try:
        if len(data) > _MAX_STATE_BYTES:
            raise ValueError("too large")
        raw = json.loads(data)
        if raw.get("version") != _STATE_VERSION:
            raise ValueError("unknown version")
        cosigned = {k: Cosigned(**v) for k, v in raw["cosigned"].items()}
        refusals = tuple(Refusal(**r) for r in raw["refusals"])
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise StoreUnavailable(f"{COSIGN_FILE} is not oms' cosign state: {exc}") from None
    return CosignState(cosigned, refusals)


def write_state(evidence_dir: Path, state: CosignState) -> None:
    body = json.dumps(state.to_json(), sort_keys=True, indent=1) + "\n"
    atomic_write(evidence_dir / COSIGN_FILE, body.encode(), mode=0o600)


def checkpoint_text(note: str) -> bytes:
    """The checkpoint text of a signed note (what cosignatures sign)."""
    split = note.rfind("\n\n")
    if split < 0:
        raise CosignError("a stored checkpoint note has no signature block")
    return note[: split + 1].encode()
