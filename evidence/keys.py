"""The Ed25519 signing key under `$OMS_HOME/keys/` (private key mode 0600)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .errors import KeyUnavailable
from .state import atomic_write, ensure_private_dir

PRIVATE_KEY_FILE = "ed25519.pem"


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


def load_key(root: Path) -> SigningKey:
    path = _key_path(root)
    try:
        st = path.lstat()
        if not path.is_file() or path.is_symlink():
            raise KeyUnavailable(f"signing key {path} is not a regular file")
        if st.st_mode & 0o077:
            raise KeyUnavailable(f"signing key {path} is readable by others (mode must be 0600)")
        data = path.read_bytes()
    except FileNotFoundError:
        raise KeyUnavailable(f"no signing key at {path}; run `oms init`") from None
    except OSError as exc:
        raise KeyUnavailable(f"cannot read signing key {path}: {exc.strerror}") from None
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
    if os.path.lexists(path):
        return load_key(root), False
    ensure_private_dir(path.parent)
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    atomic_write(path, pem, mode=0o600)
    return SigningKey(private=private, public=private.public_key()), True
