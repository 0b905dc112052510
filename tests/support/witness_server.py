"""A C2SP tlog-witness on loopback, built from the spec, for tests.

The witnesses that exist are Go programs (litewitness, omniwitness) and none installs from
PyPI, npm or Debian, which is all this machine reaches; so this one stands in for them,
written from https://c2sp.org/tlog-witness, https://c2sp.org/tlog-cosignature and
https://c2sp.org/signed-note (no code copied). A real HTTP server on 127.0.0.1 that keeps,
per log origin, the size and root it last cosigned, and answers `POST /add-checkpoint`:

    404  the origin is not a log it knows        403  no signature by the log's key verifies
    400  old size above the checkpoint's size    409  old size is not what it cosigned last
         (body: its size + "\\n", Content-Type text/x.tlog.size), or equal sizes, other roots
    422  the consistency proof does not verify   200  one cosignature/v1 line

    w = WitnessServer("witness.test/w1", logs={origin: (log_key_name, log_public_key)})
    w.url, w.vkey          # the submission prefix and the verifier key for oms.toml
    w.sign_with = other    # answer with a cosignature by another key (a wrong cosigner)
    w.close()
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from evidence import checkpoint as cp
from evidence.merkle import verify_consistency


def raw_public(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def vkey_of(name: str, key: Ed25519PrivateKey) -> str:
    """The signed-note verifier key of a cosignature/v1 key: name+hex(key ID)+base64(0x04||key)."""
    typed = b"\x04" + raw_public(key.public_key())
    key_id = hashlib.sha256(name.encode() + b"\n" + typed).digest()[:4]
    return f"{name}+{key_id.hex()}+{base64.b64encode(typed).decode()}"


def cosign_line(name: str, key: Ed25519PrivateKey, text: bytes, when: int) -> str:
    """A tlog-cosignature/v1 note signature line over checkpoint `text` at time `when`."""
    key_id = bytes.fromhex(vkey_of(name, key).split("+")[1])
    message = b"cosignature/v1\ntime %d\n" % when + text
    blob = key_id + when.to_bytes(8, "big") + key.sign(message)
    return f"\u2014 {name} {base64.b64encode(blob).decode()}\n"


class WitnessServer:
    def __init__(self, name: str, logs: dict[str, tuple[str, Ed25519PublicKey]]) -> None:
        self.name = name
        self.key = Ed25519PrivateKey.generate()
        self.sign_with: Ed25519PrivateKey | None = None
        self.logs = logs
        self.state: dict[str, tuple[int, bytes]] = {}  # origin -> (size, root) cosigned
        self.requests: list[tuple[int, int]] = []  # (old size, status) of each request
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    @property
    def vkey(self) -> str:
        return vkey_of(self.name, self.key)

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    def add_checkpoint(self, body: bytes) -> tuple[int, str, bytes]:
        """(status, content type, body) for one add-checkpoint request body."""
        head, sep, note = body.partition(b"\n\n")
        if not sep:
            return 400, "text/plain", b"no blank line\n"
        lines = head.decode("utf-8", "replace").split("\n")
        if not lines[0].startswith("old ") or not lines[0][4:].isdigit():
            return 400, "text/plain", b"no old size line\n"
        old = int(lines[0][4:])
        try:
            proof = [base64.b64decode(x, validate=True) for x in lines[1:]]
            checkpoint, _ = cp.parse_signed_checkpoint(note)
        except (binascii.Error, ValueError):
            return 400, "text/plain", b"malformed\n"
        if checkpoint.origin not in self.logs:
            return 404, "text/plain", b"unknown log\n"
        key_name, log_key = self.logs[checkpoint.origin]
        try:
            cp.verify_signed_checkpoint(note, key_name, log_key, origin=checkpoint.origin)
        except cp.CheckpointError:
            return 403, "text/plain", b"no signature by a known key\n"
        if old > checkpoint.size:
            return 400, "text/plain", b"old size above the checkpoint size\n"
        with self._lock:  # check and record atomically (the spec's race)
            size, root = self.state.get(checkpoint.origin, (0, b""))
            if old != size or (old == checkpoint.size and root != checkpoint.root):
                return 409, "text/x.tlog.size", f"{size}\n".encode()
            if old and not verify_consistency(old, checkpoint.size, root, checkpoint.root, proof):
                return 422, "text/plain", b"consistency proof does not verify\n"
            if not old and proof:
                return 422, "text/plain", b"a proof from size 0 must be empty\n"
            self.state[checkpoint.origin] = (checkpoint.size, checkpoint.root)
        text = note[: note.rfind(b"\n\n") + 1]
        line = cosign_line(self.name, self.sign_with or self.key, text, int(time.time()))
        return 200, "text/plain; charset=utf-8", line.encode()

    def _handler(self) -> Any:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if self.path != "/add-checkpoint":
                    status, kind, out = 404, "text/plain", b"not found\n"
                else:
                    status, kind, out = server.add_checkpoint(body)
                old = body.split(b"\n", 1)[0][4:]
                server.requests.append((int(old) if old.isdigit() else -1, status))
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler
