"""The evidence store of one repository: log, blobs, signed checkpoints and the witness.

Files under `$OMS_HOME/repos/<repo-id>/evidence/`:
  log.jsonl           the hash-chained entries (see entry.py); entry 0 is the genesis
                      entry binding the log to its repository (repo id, common dir)
  blobs/              content-addressed blobs (see blobs.py)
  checkpoint          the latest signed checkpoint (C2SP tlog-checkpoint in a signed note)
  checkpoint.pending  an append's signed checkpoint, written before its lines (pending.py)
  tree.json           a cache of the Merkle frontier, checked against the witnessed root
A copy of the latest checkpoint lives at `$OMS_HOME/witness/<repo-id>`, outside the
evidence directory, so a log rolled back or truncated as a whole is still caught.

An append, under the lock: prove the witnessed prefix (one streaming SHA-256 against
the witness' signed extent), settle anything past it (adopt this key's interrupted
append, roll back one killed mid-write, refuse anything else), write the pending
checkpoint for the new size, the lines, then the witness and the checkpoint. It is
acknowledged only once the witness covers it, and it signs only over its own lines.

Three fsync calls make an append durable: the log's lines, then the witness file and
its directory. Nothing else is synced, because nothing else is needed to keep or to
check an acknowledged entry: the witness is written after the lines are on disk, and
the checkpoint after the witness, so on disk the checkpoint is never ahead of the
witness. A crash that loses the checkpoint's last write leaves it older than the
witness, and the next append (or `oms evidence repair`) rewrites it from the witness
once the log has been proven against that (`_settle`); a checkpoint ahead of the
witness, unsigned or missing is still refused. The pending checkpoint serves a process
killed mid-append (its bytes are in the page cache); after a power loss that took it,
lines it announced and no witness covers were never acknowledged and are refused until
`oms evidence repair` quarantines them. tree.json is a cache checked against the root.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Collection, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from . import checkpoint as cp
from .blobs import BlobStore
from .entry import (
    ENTRY_VERSION,
    GENESIS_KIND,
    MAX_LINE_BYTES,
    ZERO_HASH,
    Entry,
    Genesis,
    Subject,
    line_hash,
)
from .errors import EntryNotFound, NotInitialised, StoreUnavailable, TamperDetected, TornTail
from .keys import SigningKey, create_key, load_key
from .log import LOG_FILE, append_lines, last_line, locked, read_log, split_lines
from .merkle import Frontier, leaf_hash
from .payload import Payload
from .pending import PENDING_FILE, Pending, decode_pending, log_extension, log_extent
from .state import atomic_write, check_state_dirs, fsync_dir

P = TypeVar("P", bound=Payload)

CHECKPOINT_FILE = "checkpoint"
TREE_FILE = "tree.json"

GROWN: set[str] = set()
"""Repo ids whose log this process appended to: a command that appended asks the
cosigners once it has answered (gatekeeper/work/cosign.py), one that did not never does."""


@dataclass(frozen=True)
class Draft:
    """An entry before it has a place in the chain."""

    kind: str
    subject: Sequence[Mapping[str, Any]] = ()
    data: Mapping[str, Any] = field(default_factory=dict)
    blobs: Sequence[str] = ()
    policy: str | None = None

    @classmethod
    def of(cls, payload: Payload, subject: Sequence[Mapping[str, Any]] = (),
           blobs: Sequence[str] = (), policy: str | None = None) -> Draft:  # fmt: skip
        """A draft whose kind and data come from a typed payload."""
        return cls(payload.KIND, subject, payload.data(), blobs, policy)


def store_dirs(repo_id: str) -> tuple[str, ...]:
    """The directories under the state root that one repository's store writes into."""
    return (f"repos/{repo_id}/evidence/blobs", f"repos/{repo_id}/transfers", "witness")


@dataclass(frozen=True)
class _Tip:
    """The signed end of the log: its frontier, byte length, SHA-256 so far and last hash."""

    frontier: Frontier
    offset: int
    digest: Any  # a hashlib sha256 object over exactly log[:offset]
    prev: str

    def extend(self, lines: Sequence[bytes]) -> _Tip:
        frontier = Frontier.from_list(self.frontier.size, self.frontier.to_list())
        digest = self.digest.copy()
        prev = self.prev
        for line in lines:
            frontier.append(leaf_hash(line))
            digest.update(line + b"\n")
            prev = line_hash(line)
        return _Tip(frontier, self.offset + sum(len(x) + 1 for x in lines), digest, prev)

    def matches(self, c: cp.Checkpoint) -> bool:
        """Whether a checkpoint signs exactly this log: size, root and byte extent."""
        return (c.size, c.root, log_extent(c)) == (
            self.frontier.size,
            self.frontier.root(),
            (self.offset, self.digest.hexdigest()),
        )


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _real(path: Path) -> str:
    return os.path.realpath(path)


class EvidenceStore:
    def __init__(self, root: Path, repo_id: str, common_dir: Path | None = None) -> None:
        self.root = root
        self.repo_id = repo_id
        self.common_dir = common_dir
        self.dir = root / "repos" / repo_id / "evidence"
        self.log_path = self.dir / LOG_FILE
        self.checkpoint_path = self.dir / CHECKPOINT_FILE
        self.pending_path = self.dir / PENDING_FILE
        self.witness_path = root / "witness" / repo_id
        self.blobs = BlobStore(self.dir / "blobs")
        self._key: SigningKey | None = None

    # -- set-up -----------------------------------------------------------------

    @property
    def origin(self) -> str:
        """The checkpoint origin line and signed-note key name."""
        return f"oms.local/{self.repo_id}"

    @classmethod
    def init(
        cls, root: Path, repo_id: str, common_dir: Path | None = None
    ) -> tuple[EvidenceStore, bool]:
        """Create state root, key, log, genesis entry and first checkpoint. Idempotent."""
        check_state_dirs(root, *store_dirs(repo_id), create=True)
        key, _ = create_key(root)
        store = cls(root, repo_id, common_dir)
        store._key = key
        created = False
        with locked(store.dir):
            if not store.log_path.exists():
                try:
                    fd = os.open(store.log_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    os.fsync(fd)
                    os.close(fd)
                except OSError as exc:
                    raise StoreUnavailable(f"cannot create evidence log: {exc.strerror}") from None
                created = True
            if not store.checkpoint_path.exists() and not store.witness_path.exists():
                # Fresh: a log with lines here is signed by nothing (unless it is this
                # key's own interrupted init, which _settle adopts).
                tip = store._settle(key, fresh=True)
                if tip.frontier.size == 0:
                    store._write(tip, [store._genesis_draft()], key)
                    # Once per store: a crash cannot leave the first checkpoint missing.
                    atomic_write(store.checkpoint_path, store.checkpoint_path.read_bytes())
                created = True
        store.check_binding()
        return store, created

    @classmethod
    def open(
        cls,
        root: Path,
        repo_id: str,
        *,
        common_dir: Path | None = None,
        check_binding: bool = True,
    ) -> EvidenceStore:
        """The store of `repo_id`; its genesis entry must name this repository.

        With `common_dir` (every gatekeeper caller passes `repo.common_dir`), the
        common dir recorded at `oms init` must be this one. The audit opens with
        `check_binding=False` and reports a wrong genesis as tampering instead.
        """
        check_state_dirs(root, *store_dirs(repo_id))  # on every use, not only at init
        store = cls(root, repo_id, common_dir)
        if not store.log_path.exists():
            raise NotInitialised(
                f"no evidence log for this repository under {root}; run `oms init`"
            )
        if check_binding:
            store.check_binding()
        return store

    def _genesis_draft(self) -> Draft:
        common = None if self.common_dir is None else _real(self.common_dir)
        data = Genesis(repo_id=self.repo_id, common_dir=common)
        return Draft(kind=GENESIS_KIND, data=data.model_dump(mode="json"))

    def first_line(self) -> bytes | None:
        """Entry 0's line, None when the log has no complete line."""
        try:
            with open(self.log_path, "rb") as f:
                head = f.read(MAX_LINE_BYTES + 1)
        except OSError as exc:
            raise StoreUnavailable(f"cannot read evidence log: {exc.strerror}") from None
        line, newline, _ = head.partition(b"\n")
        return line if newline else None

    def genesis_problem(self, line: bytes) -> str | None:
        """Why entry 0 does not bind this log to this repository; None when it does."""
        try:
            entry = Entry.model_validate_json(line)
            if entry.kind != GENESIS_KIND or entry.seq != 0:
                return "entry 0 is not a genesis entry: the log is not bound to a repository"
            genesis = Genesis.model_validate(entry.data)
        except ValueError:
            return "entry 0 is not a valid genesis entry"
        if genesis.repo_id != self.repo_id:
            return f"the log belongs to repository {genesis.repo_id[:40]!r}, not {self.repo_id}"
        if self.common_dir is not None and genesis.common_dir != _real(self.common_dir):
            return "the log was created for another repository (its git common dir differs)"
        return None

    def check_binding(self) -> None:
        """TamperDetected unless entry 0 binds this log to this repository."""
        line = self.first_line()
        if line is None:
            if os.path.lexists(self.witness_path):
                raise TamperDetected("the evidence log lost its entries", seq=0)
            raise NotInitialised("the evidence log has no genesis entry; run `oms init`")
        problem = self.genesis_problem(line)
        if problem is not None:
            raise TamperDetected(problem, seq=0)

    @property
    def key(self) -> SigningKey:
        if self._key is None:
            self._key = load_key(self.root)
        return self._key

    # -- signed notes -------------------------------------------------------------

    def verify_note(self, note: bytes) -> cp.Checkpoint:
        """A checkpoint of this log signed by this key; CheckpointError otherwise."""
        return cp.verify_signed_checkpoint(note, self.origin, self.key.public, origin=self.origin)

    def _note(self, path: Path) -> tuple[bytes, cp.Checkpoint] | None:
        """A verified checkpoint note, None if the file is absent; TamperDetected if bad."""
        try:
            note = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {path.name}: {exc.strerror}") from None
        try:
            return note, self.verify_note(note)
        except cp.CheckpointError as exc:
            raise TamperDetected(f"{path.name}: {exc}") from None

    def read_pending(self) -> tuple[Pending, cp.Checkpoint] | None:
        """The pending checkpoint if there is one signed by this key for this log."""
        try:
            raw = self.pending_path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {PENDING_FILE}: {exc.strerror}") from None
        pending = decode_pending(raw)
        if pending is None:
            return None
        try:
            return pending, self.verify_note(pending.note)
        except cp.CheckpointError:
            return None

    def latest_checkpoint(self) -> tuple[cp.Checkpoint, bytes]:
        found = self._note(self.checkpoint_path)
        if found is None:
            raise TamperDetected("the signed checkpoint is missing")
        return found[1], found[0]

    def witness(self) -> tuple[cp.Checkpoint, bytes]:
        found = self._note(self.witness_path)
        if found is None:
            raise TamperDetected("the witness checkpoint is missing")
        return found[1], found[0]

    # -- appends ----------------------------------------------------------------

    def append(self, draft: Draft) -> Entry:
        return self.append_many([draft])[0]

    def append_many(self, drafts: Sequence[Draft]) -> list[Entry]:
        """Append entries durably under one signed checkpoint (one signature per batch).

        Returns only once the checkpoint and the witness cover them. The key is
        loaded before anything is written, so a missing key appends nothing; a log
        that does not prove against its witness appends nothing (TamperDetected).
        """
        key = self.key
        with locked(self.dir):
            return self._write(self._settle(key), drafts, key)

    def _build(self, tip: _Tip, drafts: Sequence[Draft]) -> tuple[list[Entry], list[bytes]]:
        entries: list[Entry] = []
        lines: list[bytes] = []
        prev = tip.prev
        for i, d in enumerate(drafts):
            entry = Entry(
                v=ENTRY_VERSION,
                seq=tip.frontier.size + i,
                prev=prev,
                time=utc_now(),
                kind=d.kind,
                subject=[Subject.model_validate(s) for s in d.subject],
                data=dict(d.data),
                blobs=list(d.blobs),
                policy=d.policy,
            )
            line = entry.line()
            if len(line) > MAX_LINE_BYTES:
                raise StoreUnavailable(
                    f"entry of kind {d.kind} is {len(line)} bytes; the limit is "
                    f"{MAX_LINE_BYTES} (large data belongs in a blob)"
                )
            for digest in entry.blobs:
                if not self.blobs.path(digest).is_file():
                    raise StoreUnavailable(f"entry names blob {digest}, which is not stored")
            prev = line_hash(line)
            entries.append(entry)
            lines.append(line)
        return entries, lines

    def _write(self, tip: _Tip, drafts: Sequence[Draft], key: SigningKey) -> list[Entry]:
        """Pending checkpoint, lines, then checkpoint and witness (see the module doc)."""
        entries, lines = self._build(tip, drafts)
        new = tip.extend(lines)
        note = cp.sign_checkpoint(
            cp.Checkpoint(
                origin=self.origin,
                size=new.frontier.size,
                root=new.frontier.root(),
                extensions=(log_extension(new.offset, new.digest.hexdigest()),),
            ),
            self.origin,
            key.private,
        )
        payload = b"".join(line + b"\n" for line in lines)
        # For a killed process, not for a power loss (module doc): no fsync.
        pending = Pending(tip.offset, note, payload).encode()
        atomic_write(self.pending_path, pending, durable=False)
        try:
            append_lines(self.log_path, lines)
        except StoreUnavailable:
            self.pending_path.unlink(missing_ok=True)
            raise
        self._promote(note, new)
        return entries

    def _promote(self, note: bytes, tip: _Tip) -> None:
        """The witness (durable: this acknowledges the append), then the checkpoint."""
        atomic_write(self.witness_path, note)
        atomic_write(self.checkpoint_path, note, durable=False)  # never ahead of the witness
        GROWN.add(self.repo_id)
        self.pending_path.unlink(missing_ok=True)  # stale once the witness covers it
        data = {"bytes": tip.offset, "size": tip.frontier.size, "frontier": tip.frontier.to_list()}
        # A cache only: trusted only when its root is the witnessed root, so no fsync.
        atomic_write(self.dir / TREE_FILE, json.dumps(data).encode(), durable=False)

    # -- settling the tail --------------------------------------------------------

    def _settle(self, key: SigningKey, *, fresh: bool = False) -> _Tip:
        """The witnessed tip, with whatever follows it adopted, rolled back or refused.

        Under the lock. `fresh` (init only) treats a missing witness as an empty log.
        """
        witness = self._note(self.witness_path)
        if witness is None and not fresh:
            raise TamperDetected("the witness checkpoint is missing; the log cannot be extended")
        if witness is None:
            tip, rest = _Tip(Frontier(), 0, hashlib.sha256(), ZERO_HASH), read_log(self.log_path)
        else:
            tip, rest = self._witnessed(witness[1])
        pending = self.read_pending()
        if rest:
            tip = self._resolve_tail(tip, rest, pending)
        elif os.path.lexists(self.pending_path):
            self.pending_path.unlink()  # its lines never reached the log
        if witness is not None:
            found = self._note(self.checkpoint_path)
            if found is None:
                raise TamperDetected("the signed checkpoint is missing; the log cannot be extended")
            if not tip.matches(found[1]) and not self._catch_up(found[1], tip, witness):
                raise TamperDetected("the checkpoint does not match the witness checkpoint")
        return tip

    def _catch_up(self, c: cp.Checkpoint, tip: _Tip, witness: tuple[bytes, cp.Checkpoint]) -> bool:
        """Rewrite a checkpoint `c` that is behind the witness (a crash lost its last write:
        see the module doc) from the witness, if the witness signs the proven tip; whether
        it did. Under the lock. One ahead of the witness is never caught up."""
        if c.size >= witness[1].size or not tip.matches(witness[1]):
            return False
        atomic_write(self.checkpoint_path, witness[0], durable=False)
        return True

    def _witnessed(self, c: cp.Checkpoint) -> tuple[_Tip, bytes]:
        """The tip the witness signed, proven by hashing the log's first bytes; and the rest."""
        extent = log_extent(c)
        if extent is None:
            raise TamperDetected("the witness checkpoint does not name the log's extent")
        length, digest_hex = extent
        digest = hashlib.sha256()
        try:
            with open(self.log_path, "rb") as f:
                left = length
                while left and (chunk := f.read(min(1 << 20, left))):
                    digest.update(chunk)
                    left -= len(chunk)
                rest = f.read()
        except FileNotFoundError:
            raise StoreUnavailable(f"evidence log {self.log_path} is missing") from None
        except OSError as exc:
            raise StoreUnavailable(f"cannot read evidence log: {exc.strerror}") from None
        if left:
            raise TamperDetected(
                f"the log is shorter than the {c.size} entries the witness signed: "
                "it was truncated or rolled back"
            )
        if digest.hexdigest() != digest_hex:
            raise TamperDetected(
                f"the first {c.size} entries no longer match the witness checkpoint: "
                "the log was modified; run `oms evidence audit`"
            )
        frontier = self._cached_frontier(c, length) or self._frontier_of_prefix(c, length)
        last = last_line(self.log_path, length)
        prev = line_hash(last) if last is not None else ZERO_HASH
        return _Tip(frontier, length, digest, prev), rest

    def _cached_frontier(self, c: cp.Checkpoint, length: int) -> Frontier | None:
        try:
            cached = json.loads((self.dir / TREE_FILE).read_bytes())
            if cached["bytes"] == length and cached["size"] == c.size:
                frontier = Frontier.from_list(int(cached["size"]), list(cached["frontier"]))
                if frontier.root() == c.root:
                    return frontier
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return None

    def _frontier_of_prefix(self, c: cp.Checkpoint, length: int) -> Frontier:
        frontier = Frontier()
        lines, tail = split_lines(read_log(self.log_path)[:length])
        for line in lines:
            frontier.append(leaf_hash(line))
        if tail or frontier.size != c.size or frontier.root() != c.root:
            raise TamperDetected("the witness checkpoint does not match the log it names")
        return frontier

    def _resolve_tail(
        self, tip: _Tip, rest: bytes, pending: tuple[Pending, cp.Checkpoint] | None
    ) -> _Tip:
        """Bytes past the witness: this key's interrupted append, or refused."""
        if pending is not None and pending[0].offset == tip.offset:
            record, signed = pending
            if rest == record.payload:
                adopted = tip.extend(split_lines(rest)[0])
                if not adopted.matches(signed):
                    raise TamperDetected("the pending checkpoint does not sign the lines it names")
                self._promote(record.note, adopted)
                return adopted
            if record.payload.startswith(rest):
                self._quarantine(tip, rest)  # killed mid-write: never acknowledged
                self.pending_path.unlink(missing_ok=True)
                return tip
        if b"\n" in rest:
            raise TamperDetected(
                f"entry {tip.frontier.size} is not covered by any signed checkpoint "
                "(oms did not write it); `oms evidence repair` quarantines it",
                seq=tip.frontier.size,
            )
        raise TornTail(
            "evidence log ends in a torn line (a crash mid-append); run `oms evidence repair`"
        )

    def _quarantine(self, tip: _Tip, rest: bytes) -> str:
        """Move the bytes past the tip to a quarantine file and cut the log back to the tip."""
        qname = f"quarantine-{utc_now().replace(':', '')}-{tip.frontier.size}.bin"
        atomic_write(self.dir / qname, rest)
        try:
            fd = os.open(self.log_path, os.O_WRONLY | os.O_NOFOLLOW)
            try:
                os.ftruncate(fd, tip.offset)
                os.fsync(fd)
            finally:
                os.close(fd)
            fsync_dir(self.dir)
        except OSError as exc:
            raise StoreUnavailable(f"cannot cut the log back: {exc.strerror}") from None
        return qname

    # -- reads ------------------------------------------------------------------

    def lines(self) -> list[bytes]:
        lines, _ = split_lines(read_log(self.log_path))
        return lines

    def line(self, seq: int) -> bytes:
        lines = self.lines()
        if not 0 <= seq < len(lines):
            raise EntryNotFound(f"no entry {seq}; the log has {len(lines)} entries")
        return lines[seq]

    def entry(self, seq: int) -> Entry:
        try:
            return Entry.model_validate_json(self.line(seq))
        except ValueError:
            raise TamperDetected(f"entry {seq} is not a valid entry", seq=seq) from None

    def entries(self, kind: str | Collection[str] | None = None, start: int = 0) -> list[Entry]:
        """Every entry (of `kind`, or of any of several kinds) from seq `start` on, in log
        order, each parsed and validated as an Entry; one read of the log however many kinds
        are asked for."""
        kinds = {kind} if isinstance(kind, str) else None if kind is None else set(kind)
        out = []
        for seq, line in enumerate(self.lines()[start:], start):
            try:
                if kinds is not None and json.loads(line).get("kind") not in kinds:
                    continue
                out.append(Entry.model_validate_json(line))
            except (ValueError, AttributeError, TypeError):
                raise TamperDetected(f"entry {seq} is not a valid entry", seq=seq) from None
        return out

    def payloads(self, model: type[P]) -> list[tuple[Entry, P]]:
        """Every entry of `model`'s kind with its typed payload (TamperDetected if one does
        not fit): the one way gates read evidence back."""
        return [(e, model.of(e)) for e in self.entries(model.KIND)]

    def head(self) -> int:
        """The number of complete entries."""
        return len(self.lines())

    # -- repair -----------------------------------------------------------------

    def repair(self) -> dict[str, Any]:
        """Quarantine what follows the witnessed log (a torn line, entries no checkpoint
        signs), never a signed entry, and record it; an interrupted append of this key
        is adopted instead."""
        with locked(self.dir):
            witness = self._note(self.witness_path)
            if witness is None:
                raise TamperDetected("the witness checkpoint is missing; nothing can be repaired")
            tip, rest = self._witnessed(witness[1])
            pending = self.read_pending()
            if rest and pending is not None and pending[0].payload == rest:
                if pending[0].offset == tip.offset:  # this key's interrupted append
                    adopted = self._resolve_tail(tip, rest, pending)
                    n = adopted.frontier.size - tip.frontier.size
                    return {"repaired": True, "adopted_entries": n, "quarantined_bytes": 0}
            if not rest:
                self.pending_path.unlink(missing_ok=True)
                with suppress(TamperDetected):  # a bad checkpoint is the audit's to report
                    found = self._note(self.checkpoint_path)
                    if found is not None and self._catch_up(found[1], tip, witness):
                        # An interrupted append whose entries were all acknowledged.
                        return {"repaired": True, "adopted_entries": 0, "quarantined_bytes": 0}
                return {"repaired": False, "quarantined_bytes": 0}
            qname = self._quarantine(tip, rest)
            self.pending_path.unlink(missing_ok=True)
        digest = self.blobs.put(rest)
        data = {
            "quarantined_bytes": len(rest),
            "quarantined_entries": rest.count(b"\n"),
            "quarantine_file": qname,
        }
        entry = self.append(Draft(kind="repair", data=data, blobs=[digest]))
        return {**data, "repaired": True, "seq": entry.seq}
