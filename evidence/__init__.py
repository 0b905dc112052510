"""Evidence: a hash-chained, checkpointed, append-only log with content-addressed blobs.

The names below are imported on first use (PEP 562): importing one submodule (its errors,
say) runs none of the others, so a command pays only for what it uses.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .audit import AuditReport
    from .entry import Entry, Subject
    from .errors import (
        EntryNotFound,
        EvidenceError,
        KeyUnavailable,
        NotInitialised,
        StoreUnavailable,
        TamperDetected,
        TornTail,
    )
    from .export import VerifiedEntry, entry_statement, export_dsse, prove, show, verified_entry
    from .keys import SigningKey, create_key, load_key
    from .payload import Attachment, Note, Payload
    from .state import repo_id_for, state_root
    from .store import Draft, EvidenceStore

_WHERE: dict[str, str] = {
    **dict.fromkeys(("AuditReport",), "audit"),
    **dict.fromkeys(("Entry", "Subject"), "entry"),
    **dict.fromkeys(
        (
            "EntryNotFound",
            "EvidenceError",
            "KeyUnavailable",
            "NotInitialised",
            "StoreUnavailable",
            "TamperDetected",
            "TornTail",
        ),
        "errors",
    ),
    **dict.fromkeys(
        ("VerifiedEntry", "entry_statement", "export_dsse", "prove", "show", "verified_entry"),
        "export",
    ),
    **dict.fromkeys(("SigningKey", "create_key", "load_key"), "keys"),
    **dict.fromkeys(("Attachment", "Note", "Payload"), "payload"),
    **dict.fromkeys(("repo_id_for", "state_root"), "state"),
    **dict.fromkeys(("Draft", "EvidenceStore"), "store"),
}

__all__ = [
    "Attachment",
    "AuditReport",
    "Draft",
    "Entry",
    "EntryNotFound",
    "EvidenceError",
    "EvidenceStore",
    "KeyUnavailable",
    "NotInitialised",
    "Note",
    "Payload",
    "SigningKey",
    "StoreUnavailable",
    "Subject",
    "TamperDetected",
    "TornTail",
    "VerifiedEntry",
    "create_key",
    "entry_statement",
    "export_dsse",
    "load_key",
    "prove",
    "repo_id_for",
    "show",
    "state_root",
    "verified_entry",
]


def __getattr__(name: str) -> object:
    # A name here must not be a submodule's too: once the submodule is imported, the import
    # system binds the module to that name and this function is no longer asked.
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])
