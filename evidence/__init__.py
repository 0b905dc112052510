"""Evidence: a hash-chained, checkpointed, append-only log with content-addressed blobs."""

from .audit import AuditReport, audit
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
    "audit",
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
