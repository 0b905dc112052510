"""Offline audit of an evidence store.

Order matters for speed: canonical form, seq, chain links and the Merkle root are
hashes (cheap); signatures are verified only on the checkpoint, the witness and a
pending checkpoint, never per entry. The first failure found is reported with its
seq. Intact means signed: the checkpoint and the witness both cover every entry.
Every anomaly in the store's files is a report, never an exception.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from . import checkpoint as cp
from .blobs import is_digest
from .canonical import ZERO_HASH
from .chaincheck import check_whole_lines
from .errors import StoreUnavailable, TamperDetected
from .log import read_log, split_lines
from .merkle import node_hash, root_from_leaf_hashes
from .store import EvidenceStore


@dataclass(frozen=True)
class AuditReport:
    intact: bool
    entries: int
    checkpoint_size: int | None
    witness_size: int | None
    blobs_checked: int
    first_bad_seq: int | None = None
    reason: str | None = None
    torn_tail_bytes: int = 0

    def to_json(self) -> dict[str, object]:
        return asdict(self)


class _Bad(Exception):
    def __init__(self, seq: int | None, reason: str) -> None:
        super().__init__(reason)
        self.seq = seq
        self.reason = reason


@dataclass
class _Tree:
    """The log's leaf hashes (kept packed) and the roots known so far, by size."""

    packed: bytes
    size: int
    roots: dict[int, bytes]

    def root(self, size: int) -> bytes:
        if size not in self.roots:
            p = self.packed
            self.roots[size] = root_from_leaf_hashes(
                [p[i : i + 32] for i in range(0, 32 * size, 32)]
            )
        return self.roots[size]


def _check_lines(path: str, data: bytes) -> tuple[_Tree, set[str]]:
    """Verify every complete line; return the Merkle leaves and roots, and the blobs named."""
    try:
        chunks = check_whole_lines(path, data[: data.rfind(b"\n") + 1])
    except OSError as exc:
        raise StoreUnavailable(f"cannot audit the log: {exc}") from None
    count = 0
    blobs: set[str] = set()
    expect_prev = ZERO_HASH
    for chunk in chunks:
        base = count
        if chunk.count == 0 and chunk.bad_index is None:
            continue  # an empty log: nothing to link
        if chunk.bad_index == 0:
            raise _Bad(base, f"entry {base}: {chunk.bad_reason}")
        if chunk.first_seq != base:
            raise _Bad(base, f"entry {base}: seq is {chunk.first_seq!r}, expected {base}")
        if chunk.first_prev != expect_prev:
            if base:  # the first line of this chunk is intact; the one before it changed
                raise _Bad(
                    base - 1,
                    f"entry {base - 1}: modified: the entry after it no longer links to it",
                )
            raise _Bad(base, f"entry {base}: prev does not match the hash of the entry before it")
        if chunk.bad_index is not None:
            seq = base + chunk.bad_index
            raise _Bad(seq, f"entry {seq}: {chunk.bad_reason}")
        count += chunk.count
        blobs |= chunk.blobs
        if chunk.last_hash is not None:
            expect_prev = chunk.last_hash
    roots: dict[int, bytes] = {}
    full = [c for c in chunks if c.count]
    if len(full) == 1 and full[0].root_hex:
        roots[count] = bytes.fromhex(full[0].root_hex)
    elif len(full) == 2 and full[0].root_hex and full[1].root_hex:
        k = full[0].count  # check_whole_lines split at the largest power of two below count
        if k & (k - 1) == 0 and k < count <= 2 * k:
            roots[count] = node_hash(
                bytes.fromhex(full[0].root_hex), bytes.fromhex(full[1].root_hex)
            )
    return _Tree(b"".join(c.leaves for c in chunks), count, roots), blobs


def _read(store: EvidenceStore, name: str) -> bytes | None:
    path = store.checkpoint_path if name == "checkpoint" else store.witness_path
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreUnavailable(f"cannot read the {name}: {exc.strerror}") from None


def _check_note(store: EvidenceStore, name: str, note: bytes | None, tree: _Tree) -> int:
    """Verify a signed checkpoint of this log and that its root is that log prefix's root."""
    if note is None:
        raise _Bad(None, f"the {name} is missing")
    try:
        c = store.verify_note(note)
    except cp.CheckpointError as exc:
        raise _Bad(None, f"{name}: {exc}") from None
    if c.size > tree.size:
        raise _Bad(
            tree.size,
            f"{name} covers {c.size} entries but the log has {tree.size}: "
            "entries were removed or the log was rolled back",
        )
    if tree.root(c.size) != c.root:
        raise _Bad(None, f"{name} root does not match the first {c.size} entries")
    return c.size


def _check_coverage(store: EvidenceStore, cp_size: int, wit_size: int, tree: _Tree) -> None:
    """Every entry is covered by the checkpoint and the witness (they agree)."""
    if cp_size < wit_size:
        raise _Bad(
            cp_size,
            f"the checkpoint covers {cp_size} entries but the witness {wit_size}: "
            "the checkpoint was rolled back or a crash lost its last write; "
            "`oms evidence repair` rewrites it from the witness",
        )
    if wit_size == tree.size and cp_size == wit_size:
        return
    pending = store.read_pending()
    if pending is not None and pending[1].size == tree.size:
        if tree.root(tree.size) == pending[1].root:
            raise _Bad(
                wit_size,
                f"entries {wit_size} to {tree.size - 1} are signed only by the pending "
                "checkpoint of an interrupted append; the next append or "
                "`oms evidence repair` adopts them",
            )
    if cp_size > wit_size:
        raise _Bad(
            wit_size,
            f"the checkpoint covers {cp_size} entries but the witness only {wit_size}",
        )
    raise _Bad(
        wit_size,
        f"entry {wit_size} and those after it are complete but no signed checkpoint covers "
        "them (oms did not write them); `oms evidence repair` quarantines them",
    )


def _seq_naming(data: bytes, digest: str) -> int | None:
    """The first entry naming a blob (failure path only: lines are parsed, not searched)."""
    for seq, line in enumerate(split_lines(data)[0]):
        try:
            names = json.loads(line).get("blobs") or []
        except (ValueError, AttributeError, RecursionError):
            continue
        if isinstance(names, list) and digest in names:
            return seq
    return None


def _check_blobs(store: EvidenceStore, blobs: set[str], data: bytes) -> int:
    checked = 0
    for digest in sorted(blobs):
        if not is_digest(digest):
            problem: str | None = f"names a blob {digest[:80]!r} that is not a SHA-256 digest"
        else:
            try:
                problem = store.blobs.check(digest)
            except TamperDetected as exc:
                problem = str(exc)
        if problem is not None:
            seq = _seq_naming(data, digest)
            raise _Bad(seq, f"entry {seq}: {problem}")
        checked += 1
    return checked


def audit(store: EvidenceStore) -> AuditReport:
    """Audit the whole store; StoreUnavailable if it cannot be read or the key is gone."""
    data = read_log(store.log_path)
    tail = data[data.rfind(b"\n") + 1 :]
    store.key  # noqa: B018 -- raises KeyUnavailable: without it nothing can be verified
    sizes: dict[str, int] = {}
    entries = data.count(b"\n")
    try:
        tree, blobs = _check_lines(str(store.log_path), data)
        first = store.first_line()
        problem = "the log has no genesis entry" if first is None else store.genesis_problem(first)
        if problem is not None:
            raise _Bad(0, f"entry 0: {problem}")
        sizes["checkpoint"] = _check_note(store, "checkpoint", _read(store, "checkpoint"), tree)
        sizes["witness"] = _check_note(store, "witness checkpoint", _read(store, "witness"), tree)
        _check_coverage(store, sizes["checkpoint"], sizes["witness"], tree)
        sizes["blobs"] = _check_blobs(store, blobs, data)
        if tail:
            raise _Bad(
                entries,
                f"the log ends in a torn line of {len(tail)} bytes (a crash mid-append); "
                "run `oms evidence repair`",
            )
    except _Bad as bad:
        return AuditReport(
            intact=False,
            entries=entries,
            checkpoint_size=sizes.get("checkpoint"),
            witness_size=sizes.get("witness"),
            blobs_checked=sizes.get("blobs", 0),
            first_bad_seq=bad.seq,
            reason=bad.reason,
            torn_tail_bytes=len(tail),
        )
    return AuditReport(
        intact=True,
        entries=entries,
        checkpoint_size=sizes["checkpoint"],
        witness_size=sizes["witness"],
        blobs_checked=sizes["blobs"],
    )
