"""Refusals raised by the gates, and the one table mapping every refusal to an exit code.

Exit codes (DESIGN.md, shared by all commands):
  0 done / passed / intact      1 checks ran and failed (retryable)
  2 usage or configuration      3 blocked by policy or tampering
  4 unavailable: nothing was run
"""

from __future__ import annotations

from evidence import EntryNotFound, StoreUnavailable, TamperDetected
from policy import PolicyError
from sandbox import ProfileError, SandboxUnavailable

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BLOCKED = 3
EXIT_UNAVAILABLE = 4


class OmsError(Exception):
    """Base of gatekeeper refusals."""


class UsageError(OmsError):
    """Bad input: a path that is not a repository, a ref that does not resolve, a bad option."""


class Blocked(OmsError):
    """Refused by policy."""


class Unavailable(OmsError):
    """A part oms needs cannot be trusted or used; nothing was run."""


# Order matters: the first matching class wins, so subclasses come first.
_EXIT_TABLE: tuple[tuple[type[BaseException], int, str], ...] = (
    (UsageError, EXIT_USAGE, "usage"),
    (PolicyError, EXIT_USAGE, "policy"),
    (ProfileError, EXIT_USAGE, "policy"),
    (EntryNotFound, EXIT_USAGE, "not_found"),
    (Blocked, EXIT_BLOCKED, "blocked"),
    (TamperDetected, EXIT_BLOCKED, "tampered"),
    (Unavailable, EXIT_UNAVAILABLE, "unavailable"),
    (StoreUnavailable, EXIT_UNAVAILABLE, "unavailable"),
    (SandboxUnavailable, EXIT_UNAVAILABLE, "unavailable"),
)


def classify(exc: BaseException) -> tuple[int, str] | None:
    """(exit code, kind) for a known refusal; None for a bug."""
    for cls, code, kind in _EXIT_TABLE:
        if isinstance(exc, cls):
            return code, kind
    return None
