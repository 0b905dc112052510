"""Loading `oms.toml` from bytes or a file, with one-line errors, and its digest.

The policy digest is SHA-256 over the RFC 8785 canonical JSON of the validated
policy (defaults filled in), so two files that mean the same thing share it.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rfc8785
from pydantic import ValidationError

from .model import DEFAULT_POLICY, Check, Policy

POLICY_FILE = "oms.toml"
MAX_POLICY_BYTES = 1 << 20


class PolicyError(Exception):
    """The policy cannot be read or is invalid; nothing governed by it may run."""


@dataclass(frozen=True)
class LoadedPolicy:
    policy: Policy
    origin: str  # where it came from, e.g. "oms.toml" or "<sha>:oms.toml" or "built-in defaults"
    digest: str  # "sha256:<hex>"

    @property
    def plan_digest(self) -> str:
        return plan_digest(self.policy.checks)


def _digest(obj: Any) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(obj)).hexdigest()


def policy_digest(policy: Policy) -> str:
    return _digest(policy.model_dump(mode="json"))


def plan_digest(checks: list[Check]) -> str:
    return _digest([c.model_dump(mode="json") for c in checks])


_TOML_POS = re.compile(r"^(?P<msg>.*?)\s*\(at line (?P<line>\d+), column (?P<col>\d+)\)$")


def _clean(text: str) -> str:
    # Error text may quote the file; keep it to one printable line.
    text = "".join(ch if ch.isprintable() else "?" for ch in text.replace("\n", " "))
    return text[:300]


def _format_validation(origin: str, err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
    kind = first["type"]
    if kind == "extra_forbidden":
        msg = "unknown key"
    elif kind == "missing":
        msg = "required key is missing"
    else:
        msg = first["msg"]
    more = len(err.errors()) - 1
    tail = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    return _clean(f"{origin}: {loc}: {msg}{tail}")


def parse_policy(data: bytes, origin: str) -> LoadedPolicy:
    """Parse and validate policy bytes; raise PolicyError with one line on any fault."""
    if len(data) > MAX_POLICY_BYTES:
        raise PolicyError(f"{origin}: policy larger than {MAX_POLICY_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError(f"{origin}: not UTF-8 (byte {exc.start})") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _TOML_POS.match(str(exc))
        if m is None and str(exc).endswith("(at end of document)"):
            lines = text.split("\n")
            where = f"{origin}:{len(lines)}:{len(lines[-1]) + 1}"
            msg = str(exc).removesuffix("(at end of document)").strip()
            raise PolicyError(_clean(f"{where}: TOML syntax error: {msg}")) from None
        if m:
            where = f"{origin}:{m['line']}:{m['col']}"
            raise PolicyError(_clean(f"{where}: TOML syntax error: {m['msg']}")) from None
        raise PolicyError(_clean(f"{origin}: TOML syntax error: {exc}")) from None
    try:
        policy = Policy.model_validate(raw)
    except ValidationError as exc:
        raise PolicyError(_format_validation(origin, exc)) from None
    return LoadedPolicy(policy=policy, origin=origin, digest=policy_digest(policy))


def default_policy() -> LoadedPolicy:
    return LoadedPolicy(
        policy=DEFAULT_POLICY, origin="built-in defaults", digest=policy_digest(DEFAULT_POLICY)
    )


def load_policy_file(path: Path) -> LoadedPolicy:
    """Load a policy file; an absent file means the built-in strict defaults."""
    try:
        if path.is_symlink():
            raise PolicyError(f"{path}: policy file must not be a symlink")
        data = path.read_bytes()
    except FileNotFoundError:
        return default_policy()
    except OSError as exc:
        raise PolicyError(f"{path}: cannot read policy: {exc.strerror}") from None
    return parse_policy(data, str(path))
