"""The evidence store of one repository: log, blobs, signed checkpoints and the witness.

Files under `$OMS_HOME/repos/<repo-id>/evidence/`:
  log.jsonl   the hash-chained entries (see entry.py)
  blobs/      content-addressed blobs (see blobs.py)
  checkpoint  the latest signed checkpoint (C2SP tlog-checkpoint in a signed note)
  tree.json   a cache of the Merkle frontier, checked against the log size
A copy of the latest checkpoint lives at `$OMS_HOME/witness/<repo-id>`, outside the
evidence directory, so a log rolled back or truncated as a whole is still caught.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import checkpoint as cp
from .blobs import BlobStore
from .entry import (
    ENTRY_VERSION,
    MAX_LINE_BYTES,
    ZERO_HASH,
    Entry,
    Subject,
    line_hash,
)
from .errors import EntryNotFound, NotInitialised, StoreUnavailable, TamperDetected
from .keys import SigningKey, create_key, load_key
from .log import LOG_FILE, append_lines, check_tail, last_line, locked, read_log, split_lines
from .merkle import Frontier, leaf_hash
from .state import atomic_write, check_state_dirs

CHECKPOINT_FILE = "checkpoint"
TREE_FILE = "tree.json"


@dataclass(frozen=True)
class Draft:
    """An entry before it has a place in the chain."""

    kind: str
    subject: Sequence[Mapping[str, Any]] = ()
    data: Mapping[str, Any] = field(default_factory=dict)
    blobs: Sequence[str] = ()
    policy: str | None = None


def store_dirs(repo_id: str) -> tuple[str, ...]:
    """The directories under the state root that one repository's store writes into."""
    return (f"repos/{repo_id}/evidence/blobs", f"repos/{repo_id}/transfers", "witness")


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EvidenceStore:
    def __init__(self, root: Path, repo_id: str) -> None:
        self.root = root
        self.repo_id = repo_id
        self.dir = root / "repos" / repo_id / "evidence"
        self.log_path = self.dir / LOG_FILE
        self.checkpoint_path = self.dir / CHECKPOINT_FILE
        self.witness_path = root / "witness" / repo_id
        self.blobs = BlobStore(self.dir / "blobs")
        self._key: SigningKey | None = None

    # -- set-up -----------------------------------------------------------------

    @property
    def origin(self) -> str:
        """The checkpoint origin line and signed-note key name."""
        return f"oms.local/{self.repo_id}"

    @classmethod
    def init(cls, root: Path, repo_id: str) -> tuple[EvidenceStore, bool]:
        """Create state root, key, empty log and first checkpoint. Idempotent."""
        check_state_dirs(root, *store_dirs(repo_id), create=True)
        key, _ = create_key(root)
        store = cls(root, repo_id)
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
                if check_tail(store.log_path) != 0:
                    raise TamperDetected("the log has entries but no checkpoint or witness")
                store._checkpoint(Frontier())
                created = True
        return store, created

    @classmethod
    def open(cls, root: Path, repo_id: str) -> EvidenceStore:
        check_state_dirs(root, *store_dirs(repo_id))  # on every use, not only at init
        store = cls(root, repo_id)
        if not store.log_path.exists():
            raise NotInitialised(
                f"no evidence log for this repository under {root}; run `oms init`"
            )
        return store

    @property
    def key(self) -> SigningKey:
        if self._key is None:
            self._key = load_key(self.root)
        return self._key

    # -- appends ----------------------------------------------------------------

    def append(self, draft: Draft) -> Entry:
        return self.append_many([draft])[0]

    def append_many(self, drafts: Sequence[Draft]) -> list[Entry]:
        """Append entries durably (one fsync for the batch), then sign a checkpoint.

        Returns only after the lines are on disk. The key is loaded before anything
        is written, so a missing key appends nothing.
        """
        key = self.key
        with locked(self.dir):
            size = check_tail(self.log_path)
            frontier = self._frontier(size)
            last = last_line(self.log_path, size)
            prev = line_hash(last) if last is not None else ZERO_HASH
            entries: list[Entry] = []
            lines: list[bytes] = []
            for i, d in enumerate(drafts):
                entry = Entry(
                    v=ENTRY_VERSION,
                    seq=frontier.size + i,
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
            append_lines(self.log_path, lines)
            for line in lines:
                frontier.append(leaf_hash(line))
            self._save_frontier(frontier, size + sum(len(x) + 1 for x in lines))
            self._checkpoint(frontier, key)
        return entries

    def _frontier(self, log_bytes: int) -> Frontier:
        """The Merkle frontier of the log, proven consistent with the signed witness.

        A log is only ever extended if its first `witness.size` entries still have
        the root the witness signed: otherwise an append would sign over a log that
        was rewritten, truncated or rolled back. The cached frontier is used only
        when it is exactly the witnessed tree (same size, same root) and matches
        the log's byte size; anything else is recomputed from the log and checked.
        """
        witnessed = self._read_checkpoint(self.witness_path)
        if witnessed is None:
            raise TamperDetected("the witness checkpoint is missing; the log cannot be extended")
        try:
            cached = json.loads((self.dir / TREE_FILE).read_bytes())
            if cached["bytes"] == log_bytes and cached["size"] == witnessed.size:
                frontier = Frontier.from_list(int(cached["size"]), list(cached["frontier"]))
                if frontier.root() == witnessed.root:
                    return frontier
        except (OSError, ValueError, KeyError, TypeError):
            pass
        frontier = Frontier()
        lines, _ = split_lines(read_log(self.log_path)[:log_bytes])
        if len(lines) < witnessed.size:
            raise TamperDetected(
                f"log has {len(lines)} entries but the witness checkpoint has {witnessed.size}: "
                "the log was truncated or rolled back",
                seq=len(lines),
            )
        prefix_root = frontier.root() if witnessed.size == 0 else None
        for line in lines:
            frontier.append(leaf_hash(line))
            if frontier.size == witnessed.size:
                prefix_root = frontier.root()
        if prefix_root != witnessed.root:
            raise TamperDetected(
                f"the first {witnessed.size} entries no longer match the witnessed root: "
                "the log was modified; run `oms evidence audit`"
            )
        return frontier

    def _save_frontier(self, frontier: Frontier, log_bytes: int) -> None:
        data = {"bytes": log_bytes, "size": frontier.size, "frontier": frontier.to_list()}
        # A cache only: validated by size on read, so it needs no fsync.
        atomic_write(self.dir / TREE_FILE, json.dumps(data).encode(), durable=False)

    def _checkpoint(self, frontier: Frontier, key: SigningKey | None = None) -> None:
        key = key or self.key
        note = cp.sign_checkpoint(
            cp.Checkpoint(origin=self.origin, size=frontier.size, root=frontier.root()),
            self.origin,
            key.private,
        )
        atomic_write(self.checkpoint_path, note)
        atomic_write(self.witness_path, note)

    def _read_checkpoint(self, path: Path) -> cp.Checkpoint | None:
        """A verified checkpoint, None if the file is absent; TamperDetected if bad."""
        try:
            note = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailable(f"cannot read {path.name}: {exc.strerror}") from None
        try:
            return cp.verify_signed_checkpoint(note, self.origin, self.key.public)
        except cp.CheckpointError as exc:
            raise TamperDetected(f"{path.name}: {exc}") from None

    def latest_checkpoint(self) -> tuple[cp.Checkpoint, bytes]:
        note = self._read_checkpoint(self.checkpoint_path)
        if note is None:
            raise TamperDetected("the signed checkpoint is missing")
        return note, self.checkpoint_path.read_bytes()

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

    def head(self) -> int:
        """The number of complete entries."""
        return len(self.lines())

    # -- repair -----------------------------------------------------------------

    def repair(self) -> dict[str, Any]:
        """Move a torn tail (never a complete entry) to a quarantine file; record it."""
        with locked(self.dir):
            data = read_log(self.log_path)
            lines, tail = split_lines(data)
            if not tail:
                return {"repaired": False, "quarantined_bytes": 0}
            qname = f"quarantine-{utc_now().replace(':', '')}-{len(lines)}.bin"
            atomic_write(self.dir / qname, tail)
            keep = len(data) - len(tail)
            try:
                fd = os.open(self.log_path, os.O_WRONLY | os.O_NOFOLLOW)
                try:
                    os.ftruncate(fd, keep)
                    os.fsync(fd)
                finally:
                    os.close(fd)
            except OSError as exc:
                raise StoreUnavailable(f"cannot repair the log: {exc.strerror}") from None
        digest = self.blobs.put(tail)
        entry = self.append(
            Draft(
                kind="repair",
                data={"quarantined_bytes": len(tail), "quarantine_file": qname},
                blobs=[digest],
            )
        )
        return {"repaired": True, "quarantined_bytes": len(tail), "seq": entry.seq}
