"""Where the broker sends a provider's requests, and the real keys it injects.

Both come from oms' own environment or `$OMS_HOME`, never from the agent's (DESIGN.md,
"Egress"). A key never appears in a repr, a message or a log line.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from gatekeeper.errors import ConfigError

Provider = Literal["anthropic", "openai"]
PROVIDERS: tuple[Provider, ...] = ("anthropic", "openai")
DEFAULT_UPSTREAMS: Mapping[Provider, str] = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com",
}
UPSTREAM_ENV: Mapping[Provider, str] = {
    "anthropic": "OMS_EGRESS_UPSTREAM_ANTHROPIC",
    "openai": "OMS_EGRESS_UPSTREAM_OPENAI",
}
KEY_ENV: Mapping[Provider, str] = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY"}
MAX_KEY_BYTES = 4096


@dataclass(frozen=True)
class Upstreams:
    """Base URLs (scheme, host, optional path prefix; no trailing slash) per provider."""

    anthropic: str
    openai: str

    def of(self, provider: Provider) -> str:
        return self.anthropic if provider == "anthropic" else self.openai


def upstreams_from_env(environ: Mapping[str, str]) -> Upstreams:
    """OMS_EGRESS_UPSTREAM_ANTHROPIC / _OPENAI from oms' own environment, else the
    providers' public endpoints; ConfigError for anything but a plain http(s) URL."""
    found = {p: _upstream(UPSTREAM_ENV[p], environ.get(UPSTREAM_ENV[p])) for p in PROVIDERS}
    return Upstreams(anthropic=found["anthropic"] or DEFAULT_UPSTREAMS["anthropic"],
                     openai=found["openai"] or DEFAULT_UPSTREAMS["openai"])  # fmt: skip


def _upstream(name: str, value: str | None) -> str | None:
    if not value:
        return None
    try:
        parts = urlsplit(value)
        port = parts.port  # ValueError for a port that is not a number
    except ValueError:
        raise ConfigError(f"{name} is not a URL: give http(s)://host[:port][/prefix]") from None
    del port
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{name} must be an http:// or https:// URL with a host")
    if parts.username is not None or parts.password is not None:
        raise ConfigError(f"{name} must not carry credentials: oms injects the key itself")
    if parts.query or parts.fragment or any(c.isspace() for c in value):
        raise ConfigError(f"{name} must be a base URL without query, fragment or spaces")
    return value.rstrip("/")


@dataclass(frozen=True)
class ProviderKeys:
    """The real API keys; `repr` says only which are set."""

    anthropic: str | None = field(repr=False)
    openai: str | None = field(repr=False)

    def of(self, provider: Provider) -> str | None:
        return self.anthropic if provider == "anthropic" else self.openai

    def held(self) -> tuple[Provider, ...]:
        """The providers a key is set for."""
        return tuple(p for p in PROVIDERS if self.of(p))

    def __repr__(self) -> str:
        shown = ", ".join(f"{p}={'set' if self.of(p) else 'unset'}" for p in PROVIDERS)
        return f"ProviderKeys({shown})"


def provider_keys(environ: Mapping[str, str], state: Path) -> ProviderKeys:
    """ANTHROPIC_API_KEY / OPENAI_API_KEY in oms' environment, else the one-line files
    `state/providers/anthropic` and `state/providers/openai` (each a regular file, not a
    symlink, readable by its owner only); a missing file is no key."""
    keys: dict[Provider, str | None] = {}
    for p in PROVIDERS:
        from_env = environ.get(KEY_ENV[p])
        keys[p] = _checked(from_env, KEY_ENV[p]) if from_env else key_file(state / "providers" / p)
    return ProviderKeys(anthropic=keys["anthropic"], openai=keys["openai"])


def key_file(path: Path) -> str | None:
    """The one-line secret in `path`: a regular file, no symlink, readable by its owner
    only (ConfigError, naming the fix, otherwise); None when absent."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if path.is_symlink():
            raise ConfigError(f"{path} is a symlink: write the key into the file itself") from None
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path} is not a regular file")
        if st.st_mode & 0o077:
            raise ConfigError(f"{path} is readable by group or others: chmod 600 {path}")
        data = os.read(fd, MAX_KEY_BYTES + 1)
    finally:
        os.close(fd)
    lines = [x.strip() for x in data.decode("utf-8", "replace").splitlines() if x.strip()]
    if len(data) > MAX_KEY_BYTES or len(lines) != 1:
        raise ConfigError(f"{path} must hold the key on one line")
    return _checked(lines[0], str(path))


def _checked(key: str, where: str) -> str:
    """The key, if it can go into an HTTP header as it is (never shown in the message)."""
    if not key.isascii() or not key.isprintable() or any(c.isspace() for c in key):
        raise ConfigError(f"the key in {where} has spaces or characters a header cannot carry")
    return key
