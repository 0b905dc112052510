"""Offline audit of an evidence store.

Order matters for speed: canonical form, seq, chain links and the Merkle root are
hashes (cheap); signatures are verified only on the checkpoint and the witness,
never per entry. The first failure found is reported with its seq.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from . import checkpoint as cp
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


def _check_note(
    store: EvidenceStore,
    name: str,
    note: bytes | None,
    tree: _Tree,
) -> int:
    """Verify a signed checkpoint and that its root is the root of that log prefix."""
    if note is None:
        raise _Bad(None, f"the {name} is missing")
    try:
        c = cp.verify_signed_checkpoint(note, store.origin, store.key.public)
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


def audit(store: EvidenceStore) -> AuditReport:
    """Audit the whole store; StoreUnavailable if it cannot be read or the key is gone."""
    data = read_log(store.log_path)
    tail = data[data.rfind(b"\n") + 1 :]
    key = store.key  # raises KeyUnavailable: without it nothing can be verified
    del key

    def note(path_name: str) -> bytes | None:
        path = store.checkpoint_path if path_name == "checkpoint" else store.witness_path
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailable(f"cannot read the {path_name}: {exc.strerror}") from None

    cp_size: int | None = None
    wit_size: int | None = None
    blobs_checked = 0
    entries = data.count(b"\n")
    try:
        tree, blobs = _check_lines(str(store.log_path), data)
        cp_size = _check_note(store, "checkpoint", note("checkpoint"), tree)
        wit_size = _check_note(store, "witness checkpoint", note("witness"), tree)
        for digest in sorted(blobs):
            try:
                problem = store.blobs.check(digest)
            except TamperDetected as exc:
                problem = str(exc)
            except Exception:
                problem = f"blob name {digest[:80]!r} is not a digest"
            if problem is not None:
                lines = split_lines(data)[0]
                seq = next(i for i, ln in enumerate(lines) if digest.encode() in ln)
                raise _Bad(seq, f"entry {seq}: {problem}")
            blobs_checked += 1
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
            checkpoint_size=cp_size,
            witness_size=wit_size,
            blobs_checked=blobs_checked,
            first_bad_seq=bad.seq,
            reason=bad.reason,
            torn_tail_bytes=len(tail),
        )
    return AuditReport(
        intact=True,
        entries=entries,
        checkpoint_size=cp_size,
        witness_size=wit_size,
        blobs_checked=blobs_checked,
    )
