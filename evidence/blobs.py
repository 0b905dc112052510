"""Content-addressed blobs: SHA-256 names, atomic durable writes, read-only files."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from .errors import EntryNotFound, StoreUnavailable, TamperDetected
from .state import atomic_write, ensure_private_dir

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def is_digest(name: object) -> bool:
    return isinstance(name, str) and bool(_HEX64.match(name))


def _check_digest(digest: str) -> str:
    if not _HEX64.match(digest):
        raise EntryNotFound(f"not a SHA-256 hex digest: {digest[:80]!r}")
    return digest


class BlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, digest: str) -> Path:
        _check_digest(digest)
        return self.root / digest[:2] / digest[2:]

    def put(self, data: bytes) -> str:
        """Store `data`; return its hex SHA-256. Durable before it returns."""
        digest = hashlib.sha256(data).hexdigest()
        final = self.path(digest)
        if final.is_file() and final.stat().st_size == len(data):
            return digest
        ensure_private_dir(final.parent)
        atomic_write(final, data, mode=0o400)
        return digest

    def get(self, digest: str) -> bytes:
        """Return the blob's bytes, verified against its name."""
        try:
            data = self.path(digest).read_bytes()
        except FileNotFoundError:
            raise EntryNotFound(f"no blob {digest}") from None
        except OSError as exc:
            raise StoreUnavailable(f"cannot read blob {digest}: {exc.strerror}") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise TamperDetected(f"blob {digest} does not match its digest")
        return data

    def check(self, digest: str) -> str | None:
        """None when the blob is present and intact, else the reason."""
        path = self.path(digest)
        h = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
        except FileNotFoundError:
            return f"blob {digest} is missing"
        except OSError as exc:
            return f"blob {digest} is unreadable: {exc.strerror}"
        if h.hexdigest() != digest:
            return f"blob {digest} does not match its digest"
        return None
