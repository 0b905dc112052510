"""The pending checkpoint: an append's signed intent, durable before its lines are written.

`checkpoint.pending` holds, as one JSON object, the byte offset the append starts at,
the signed checkpoint note for the log as it will be after the append, and the
appended bytes themselves. The next writer, holding the lock, compares what it
finds past the witness with it: exactly the payload means an interrupted append of
this key (adopt it), a prefix of it means one killed mid-write (roll it back), and
anything else is not oms' (tamper). Nothing here is trusted before the note's
signature, and the root it signs, have been checked by the store.

Every checkpoint oms signs carries one extension line, `oms-log <bytes> <sha256>`:
the byte length of the log it covers and the SHA-256 of exactly those bytes, so an
append proves the whole signed prefix with one streaming hash.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass

from .checkpoint import Checkpoint

PENDING_FILE = "checkpoint.pending"
_EXTENSION = re.compile(r"oms-log (0|[1-9][0-9]{0,19}) ([0-9a-f]{64})")


@dataclass(frozen=True)
class Pending:
    offset: int
    note: bytes
    payload: bytes

    def encode(self) -> bytes:
        return json.dumps(
            {
                "v": 1,
                "offset": self.offset,
                "note": self.note.decode("utf-8"),
                "payload": base64.b64encode(self.payload).decode("ascii"),
            }
        ).encode()


def decode_pending(raw: bytes) -> Pending | None:
    """The pending record, or None when the file is not one (it is then ignored)."""
    try:
        obj = json.loads(raw)
        if type(obj) is not dict or obj.get("v") != 1 or type(obj.get("offset")) is not int:
            return None
        note, payload = obj["note"], obj["payload"]
        if type(note) is not str or type(payload) is not str or obj["offset"] < 0:
            return None
        raw_payload = base64.b64decode(payload, validate=True)
        return Pending(obj["offset"], note.encode("utf-8"), raw_payload)
    except (ValueError, KeyError, binascii.Error, UnicodeError):
        return None


def log_extension(log_bytes: int, sha256_hex: str) -> str:
    return f"oms-log {log_bytes} {sha256_hex}"


def log_extent(c: Checkpoint) -> tuple[int, str] | None:
    """(bytes, sha256 hex) of the log a checkpoint covers; None if it names none."""
    for line in c.extensions:
        m = _EXTENSION.fullmatch(line)
        if m:
            return int(m.group(1)), m.group(2)
    return None
