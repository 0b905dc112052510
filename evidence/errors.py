"""Every way the evidence store refuses, one type each (the CLI maps them to exit codes)."""

from __future__ import annotations


class EvidenceError(Exception):
    """Base class for evidence store refusals."""


class StoreUnavailable(EvidenceError):
    """The store cannot be used (missing, unreadable, read-only, full); nothing was written."""


class NotInitialised(StoreUnavailable):
    """No evidence log for this repository yet: `oms init` creates it."""


class KeyUnavailable(StoreUnavailable):
    """The signing key is missing, unreadable or too widely readable."""


class TornTail(StoreUnavailable):
    """The log ends in a partial line (a crash mid-append); `oms evidence repair` first."""


class TamperDetected(EvidenceError):
    """The log, a blob or a checkpoint does not verify."""

    def __init__(self, message: str, seq: int | None = None) -> None:
        super().__init__(message)
        self.seq = seq


class EntryNotFound(EvidenceError):
    """No entry or blob by that number or digest."""
