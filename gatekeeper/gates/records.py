"""Evidence operations behind `oms init` and `oms evidence …`: one function per command.

init, note, key and repair return frozen models whose `to_json()` is the command's
`--json` output; show, prove and export hand on what `evidence` answers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter

from evidence import (
    Attachment,
    AuditReport,
    Draft,
    Entry,
    EvidenceStore,
    Note,
    export_dsse,
    prove,
    state_root,
)
from evidence import show as show_entry
from evidence.audit import audit
from evidence.export import verified_entry
from evidence.keys import load_key
from evidence.state import ensure_private_dir
from evidence.verify import EnvelopeVerdict, public_key_from_pem, verify_exported
from gatekeeper.digest import resolve_prefix
from gatekeeper.errors import Blocked, NotFound, UsageError
from gatekeeper.gates.mark import find_mark, record_trust
from gatekeeper.gates.result.payloads import ResultRecord
from gatekeeper.gates.result.vsa import result_predicate
from gatekeeper.repo.git import Repo, open_repo
from gatekeeper.repo.refs import default_branch_ref, record_default_branch
from policy import signer_key_text

MAX_NOTE_CHARS = 4096
MAX_ATTACHMENT_BYTES = 64 << 20


class _Result(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


class Initialised(_Result):
    """`oms init`: created is False when the store was there already."""

    created: bool
    state_root: str
    repo_id: str
    key_id: str
    entries: int
    default_branch: str | None
    trusted_mark: str | None = None  # the commit the policy is read at; None: no default branch yet


class NoteRecorded(_Result):
    seq: int
    kind: str
    time: str
    blobs: tuple[str, ...]


class KeyInfo(_Result):
    key_id: str
    public_key_pem: str
    note_name: str
    # The same key as a `[trust] signers` entry names it: "ed25519:<base64 of the raw key>".
    signer_key: str


class NothingToRepair(_Result):
    repaired: Literal[False]
    quarantined_bytes: Literal[0]


class AdoptedAppend(_Result):
    """An interrupted append of this key, completed instead of quarantined."""

    repaired: Literal[True]
    adopted_entries: int
    quarantined_bytes: Literal[0]


class Quarantined(_Result):
    """What followed the witnessed log, moved aside and recorded as entry `seq`."""

    quarantined_bytes: int
    quarantined_entries: int
    quarantine_file: str
    repaired: Literal[True]
    seq: int


Repair = NothingToRepair | AdoptedAppend | Quarantined
_REPAIR: TypeAdapter[Repair] = TypeAdapter(Repair)


def repair_result(answer: dict[str, Any]) -> Repair:
    """The store's repair answer as its variant: exactly one accepts each shape, and an
    unknown key is refused (pydantic.ValidationError) rather than passed on."""
    return _REPAIR.validate_python(answer)


def open_store(repo_dir: Path, *, check_binding: bool = True) -> tuple[Repo, EvidenceStore]:
    """The repository and its store, whose genesis entry must name this common dir."""
    repo = open_repo(repo_dir)
    store = EvidenceStore.open(
        state_root(), repo.repo_id, common_dir=repo.common_dir, check_binding=check_binding
    )
    return repo, store


def initialised(repo_id: str) -> bool:
    """Whether `oms init` made this repository's evidence log; tells without creating
    anything under the state root (a user-scope hook asks in every repository)."""
    return EvidenceStore(state_root(), repo_id).log_path.exists()


def init(repo_dir: Path, default_branch: str | None = None) -> Initialised:
    root = state_root()
    ensure_private_dir(root)
    repo = open_repo(repo_dir)
    store, created = EvidenceStore.init(root, repo.repo_id, repo.common_dir)
    recorded = record_default_branch(repo, default_branch) if default_branch else None
    mark = _trust_at_init(store, repo)
    return Initialised(
        created=created,
        state_root=str(root),
        repo_id=repo.repo_id,
        key_id=store.key.key_id,
        entries=store.head(),
        default_branch=recorded or _default_or_none(repo),
        trusted_mark=mark,
    )


INIT_NOTE = (
    "trusted by `oms init`: the policy and plan are read here until a READY verdict "
    "or a human at a terminal moves the mark"
)


def _trust_at_init(store: EvidenceStore, repo: Repo) -> str | None:
    """The trusted mark; `oms init` records the default branch's tip when the log has none.
    None without a default branch (the first gate records it) or when the marks in the log
    are not on it (a human decides, with `oms policy trust`)."""
    try:
        found = find_mark(store, repo)
        if found is None:
            ref, tip = default_branch_ref(repo)
            found = record_trust(store, repo, ref, tip, "init", INIT_NOTE)
    except (UsageError, Blocked):
        return None
    return found.commit


def _default_or_none(repo: Repo) -> str | None:
    try:
        return default_branch_ref(repo)[0]
    except UsageError:
        return None


def note(repo_dir: Path, message: str, attach: Path | None) -> NoteRecorded:
    if len(message) > MAX_NOTE_CHARS:
        raise UsageError(f"message is longer than {MAX_NOTE_CHARS} characters")
    _, store = open_store(repo_dir)
    store.key  # noqa: B018 -- fail before storing anything when the key is gone
    blobs: list[str] = []
    attachment = None
    if attach is not None:
        try:
            if attach.stat().st_size > MAX_ATTACHMENT_BYTES:
                raise UsageError(f"attachment is larger than {MAX_ATTACHMENT_BYTES} bytes")
            content = attach.read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read attachment: {exc.strerror}") from None
        blobs.append(store.blobs.put(content))
        attachment = Attachment(name=attach.name, bytes=len(content))
    payload = Note(message=message, attachment=attachment)
    entry = store.append(Draft.of(payload, blobs=blobs))
    return NoteRecorded(seq=entry.seq, kind=entry.kind, time=entry.time, blobs=tuple(entry.blobs))


def audit_repo(repo_dir: Path) -> AuditReport:
    # The audit reports a log bound to another repository; it does not refuse to look.
    _, store = open_store(repo_dir, check_binding=False)
    return audit(store)


def show(repo_dir: Path, seq: int) -> dict[str, Any]:
    _, store = open_store(repo_dir)
    return show_entry(store, seq)


def prove_entry(repo_dir: Path, seq: int) -> dict[str, Any]:
    _, store = open_store(repo_dir)
    return prove(store, seq)


def export_entry(repo_dir: Path, seq: int) -> dict[str, Any]:
    """A DSSE envelope for entry `seq`: a `result` entry as the result gate's SLSA VSA."""
    _, store = open_store(repo_dir)
    return export_dsse(store, seq, result_predicate)


class StoredBlob(_Result):
    """`oms evidence blob`: one blob of a verified entry, by the name the entry gives it."""

    seq: int
    name: str
    blob: str
    bytes: int


def blob_names(entry: Entry) -> dict[str, str]:
    """The names an entry gives its blobs: `<check>.stdout|stderr` for a result, the
    attachment's file name for a note."""
    names: dict[str, str] = {}
    if entry.kind == ResultRecord.KIND:
        for check in ResultRecord.of(entry).checks:
            names[f"{check.name}.stdout"] = check.stdout_blob
            names[f"{check.name}.stderr"] = check.stderr_blob
    elif entry.kind == Note.KIND and entry.blobs:
        attachment = Note.of(entry).attachment
        if attachment is not None:
            names[attachment.name] = entry.blobs[0]
    return {n: d for n, d in names.items() if d in entry.blobs}


def read_blob(repo_dir: Path, seq: int, name: str) -> tuple[StoredBlob, bytes]:
    """A blob of entry `seq` by its name or its digest (a unique prefix of 12 hex digits
    will do), verified against that digest."""
    _, store = open_store(repo_dir)
    entry = verified_entry(store, seq).entry
    names = blob_names(entry)
    entry_blobs = entry.blobs
    digest = names.get(name)
    if digest is None:
        if not entry_blobs:
            raise NotFound(f"entry {seq} has no blobs")
        try:
            digest = resolve_prefix(name, entry_blobs, "blob of this entry").hex
        except UsageError:
            known = ", ".join(sorted(names)) or "its digests"
            raise NotFound(f"entry {seq} has no blob {name[:80]!r}; it has {known}") from None
    data = store.blobs.get(digest)
    return StoredBlob(seq=seq, name=name, blob=digest, bytes=len(data)), data


def verify_envelope_file(path: Path, key_file: Path | None) -> EnvelopeVerdict:
    """An exported envelope checked offline against `key_file` (PEM) or this state root's
    public key."""
    try:
        envelope = path.read_bytes()
        pem = key_file.read_bytes() if key_file is not None else None
    except OSError as exc:
        raise UsageError(f"cannot read {exc.filename}: {exc.strerror}") from None
    if pem is not None and key_file is not None:
        key = public_key_from_pem(pem, str(key_file))
    else:
        key = load_key(state_root()).public
    return verify_exported(envelope, key)


def key_info(repo_dir: Path) -> KeyInfo:
    _, store = open_store(repo_dir)
    key = store.key
    return KeyInfo(key_id=key.key_id, public_key_pem=key.public_pem, note_name=store.origin,
                   signer_key=signer_key_text(key.public_raw))  # fmt: skip


def repair(repo_dir: Path) -> Repair:
    _, store = open_store(repo_dir)
    return repair_result(store.repair())
