"""The one error family of oms, and the one table mapping every refusal to an exit code.

Exit codes (DESIGN.md, shared by all commands):
  0 done / passed / intact      1 checks ran and failed (retryable)
  2 usage or configuration      3 blocked by policy or tampering
  4 unavailable: nothing was run
  130 interrupted by the user (Ctrl-C) where nothing changed or at a prompt; a gate
      interrupted records UNAVAILABLE and exits 4 (gates/result/pipeline.py)

Every refusal raised in `gatekeeper` is an `OmsError`: it knows its `kind`, its exit code
and, when the refusal was recorded, the `data` shown with it (the evidence seq, the
decision). The foundations (`sandbox`, `evidence`, `policy`) never import gatekeeper, so
their errors are mapped to a kind here too; `refusal()` turns any of them into an OmsError.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from evidence.errors import EntryNotFound, StoreUnavailable, TamperDetected
from policy.errors import PolicyError
from sandbox.errors import ProfileError, SandboxUnavailable

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BLOCKED = 3
EXIT_UNAVAILABLE = 4
EXIT_INTERRUPTED = 130  # as a shell reports a process that SIGINT ended (128 + 2)

# The one table: every kind of refusal and its exit code.
EXIT_CODES: Mapping[str, int] = {
    "usage": EXIT_USAGE,
    "policy": EXIT_USAGE,
    "not_found": EXIT_USAGE,
    "blocked": EXIT_BLOCKED,
    "tampered": EXIT_BLOCKED,
    "unavailable": EXIT_UNAVAILABLE,
    "internal": EXIT_UNAVAILABLE,  # a bug: fail closed, as if nothing could be trusted
    "interrupted": EXIT_INTERRUPTED,
}


class OmsError(Exception):
    """Base of every gatekeeper refusal: a one-line message, a kind and optional data."""

    kind: ClassVar[str] = "internal"

    def __init__(self, message: str, *, data: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.data: dict[str, Any] | None = dict(data) if data is not None else None

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.kind]

    @property
    def message(self) -> str:
        text = str(self)
        return text.splitlines()[0] if text else self.kind


class UsageError(OmsError):
    """Bad input: a path that is not a repository, a ref that does not resolve, a bad option."""

    kind = "usage"


class ConfigError(OmsError):
    """A policy or profile that cannot be used as written."""

    kind = "policy"


class NotFound(OmsError):
    """An evidence entry or record that does not exist."""

    kind = "not_found"


class Blocked(OmsError):
    """Refused by policy."""

    kind = "blocked"


class Tampered(OmsError):
    """Evidence or state that does not verify."""

    kind = "tampered"


class Unavailable(OmsError):
    """A part oms needs cannot be trusted or used; nothing was run."""

    kind = "unavailable"


class Interrupted(OmsError):
    """The user pressed Ctrl-C (SIGINT) at a prompt or in a command that changes nothing."""

    kind = "interrupted"


class InternalError(OmsError):
    """An unexpected exception: reported in one line, exit 4, never a traceback."""

    kind = "internal"


# The foundations' errors, by kind. Order matters: the first matching class wins.
_FOUNDATION: tuple[tuple[type[BaseException], type[OmsError]], ...] = (
    (PolicyError, ConfigError),
    (ProfileError, ConfigError),
    (EntryNotFound, NotFound),
    (TamperDetected, Tampered),
    (StoreUnavailable, Unavailable),
    (SandboxUnavailable, Unavailable),
)


_BY_KIND: Mapping[str, type[OmsError]] = {
    c.kind: c
    for c in (UsageError, ConfigError, NotFound, Blocked, Tampered, Unavailable, Interrupted)
} | {"internal": InternalError}


def known_kind(exc: BaseException) -> type[OmsError] | None:
    """The OmsError class a known refusal belongs to; None for a bug."""
    if isinstance(exc, OmsError):
        return type(exc)
    for cls, family in _FOUNDATION:
        if isinstance(exc, cls):
            return family
    return None


def refusal(exc: BaseException, data: Mapping[str, Any] | None = None) -> OmsError:
    """`exc` as an OmsError of its kind (InternalError for a bug), carrying `data`."""
    if isinstance(exc, OmsError) and data is None:
        return exc
    family = known_kind(exc)
    if family is None:
        return InternalError(f"{type(exc).__name__}: {exc}", data=data)
    merged = {**(exc.data or {}), **(data or {})} if isinstance(exc, OmsError) else data
    out = _BY_KIND[family.kind](str(exc), data=merged)
    out.__cause__ = exc
    return out


def classify(exc: BaseException) -> tuple[int, str] | None:
    """(exit code, kind) for a known refusal; None for a bug."""
    family = known_kind(exc)
    return None if family is None else (EXIT_CODES[family.kind], family.kind)
