"""The Ed25519 signing key under `$OMS_HOME/keys/`: a regular file we own, mode 0600."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .errors import KeyUnavailable
from .state import atomic_write, check_state_dirs

PRIVATE_KEY_FILE = "ed25519.pem"
MAX_KEY_BYTES = 64 << 10  # a PEM Ed25519 key is about 120 bytes


@dataclass(frozen=True)
class SigningKey:
    private: Ed25519PrivateKey
    public: Ed25519PublicKey

    @property
    def public_raw(self) -> bytes:
        return self.public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @property
    def key_id(self) -> str:
        """SHA-256 of the raw public key, hex: derived from the key, never chosen."""
        return hashlib.sha256(self.public_raw).hexdigest()

    @property
    def public_pem(self) -> str:
        return self.public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ).decode("ascii")


def _key_path(root: Path) -> Path:
    return root / "keys" / PRIVATE_KEY_FILE


def _read_key_file(path: Path) -> bytes:
    """The key's bytes, if it is a regular file that we own and no one else can read.

    Checked on the open descriptor (no symlink followed, a FIFO does not block), so
    what is checked is what is read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise KeyUnavailable(f"no signing key at {path}; run `oms init`") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise KeyUnavailable(f"signing key {path} is not a regular file") from None
        raise KeyUnavailable(f"cannot read signing key {path}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise KeyUnavailable(f"signing key {path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise KeyUnavailable(
                f"signing key {path} is owned by uid {st.st_uid}, not by uid {os.geteuid()} "
                "that runs oms"
            )
        if st.st_mode & 0o077:
            raise KeyUnavailable(f"signing key {path} is readable by others (mode must be 0600)")
        try:
            return f.read(MAX_KEY_BYTES + 1)
        except OSError as exc:
            raise KeyUnavailable(f"cannot read signing key {path}: {exc.strerror}") from None


def load_key(root: Path) -> SigningKey:
    """The signing key, after vetting the state root and `keys/` on this use."""
    path = _key_path(root)
    check_state_dirs(root, "keys")
    data = _read_key_file(path)
    if len(data) > MAX_KEY_BYTES:
        raise KeyUnavailable(f"signing key {path} is too large to be a PEM key")
    try:
        private = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise KeyUnavailable(f"signing key {path} is not a valid PEM private key") from None
    if not isinstance(private, Ed25519PrivateKey):
        raise KeyUnavailable(f"signing key {path} is not an Ed25519 key")
    return SigningKey(private=private, public=private.public_key())


def create_key(root: Path) -> tuple[SigningKey, bool]:
    """Load the key, or create it if there is none; returns (key, created)."""
    path = _key_path(root)
    check_state_dirs(root, "keys", create=True)
    if os.path.lexists(path):
        return load_key(root), False
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    atomic_write(path, pem, mode=0o600)
    return SigningKey(private=private, public=private.public_key()), True
