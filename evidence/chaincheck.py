"""Checking runs of log lines: canonical form, shape, seq and prev links, leaf hashes.

A long log is checked in chunks by worker processes (`python -m evidence._chainworker
PATH START END`), one per core, because the per-line work is interpreter-bound.
Workers are plain subprocesses (`_chainworker`), not multiprocessing, so no caller's `__main__` is
ever re-imported. This module imports only the line format, so workers start fast.
The joins between chunks (first seq, first prev) are checked by the caller.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field

from .canonical import ENTRY_KEYS, NOT_FAST, fast_parse_canonical, parse_canonical
from .merkle import root_from_leaf_hashes

# Below this many bytes of log, one process is faster than starting workers.
PARALLEL_BYTES = 8 << 20


@dataclass(frozen=True)
class Chunk:
    """What one run of consecutive lines says about itself."""

    count: int
    first_seq: object = None
    first_prev: object = None
    last_hash: str | None = None
    leaves: bytes = b""  # concatenated 32-byte RFC 6962 leaf hashes
    blobs: frozenset[str] = field(default_factory=frozenset)
    bad_index: int | None = None  # index within the chunk of the first bad line
    bad_reason: str | None = None
    root_hex: str | None = None  # RFC 6962 root of this chunk's leaves as a tree of their own


def check_chunk(lines: list[bytes]) -> Chunk:
    """Check each line; the first line's seq and prev are returned for the caller to link."""
    sha256 = hashlib.sha256
    leaves: list[bytes] = []
    blobs: set[str] = set()
    first_seq: object = None
    first_prev: object = None
    prev: str | None = None
    seq = 0

    def stop(i: int, reason: str) -> Chunk:
        return Chunk(i, first_seq, first_prev, prev, b"".join(leaves), frozenset(blobs), i, reason)

    fast = fast_parse_canonical
    for i, line in enumerate(lines):
        obj = fast(line)
        if obj is NOT_FAST:
            try:
                obj = parse_canonical(line)
            except ValueError as exc:
                return stop(i, str(exc))
        if type(obj) is not dict or obj.keys() != ENTRY_KEYS:
            return stop(i, "not an evidence entry (wrong keys)")
        if i == 0:
            first_seq, first_prev = obj["seq"], obj["prev"]
            seq = obj["seq"] if type(obj["seq"]) is int else -1
        elif obj["seq"] != seq + i:
            return stop(i, f"seq is {obj['seq']!r}, expected {seq + i}")
        elif obj["prev"] != prev:
            if i + 1 == len(lines) or _prev_of(lines[i + 1]) == sha256(line).hexdigest():
                # This entry is itself intact (the next one still links to it, or none
                # follows): what changed is the entry before it.
                return stop(i - 1, "modified: the entry after it no longer links to it")
            return stop(i, "prev does not match the hash of the entry before it")
        b = obj["blobs"]
        if b:
            if type(b) is not list or not all(type(x) is str for x in b):
                return stop(i, "blobs is not a list of digests")
            blobs.update(b)
        prev = sha256(line).hexdigest()
        leaves.append(sha256(b"\x00" + line).digest())
    root = root_from_leaf_hashes(leaves).hex()
    return Chunk(
        len(lines), first_seq, first_prev, prev, b"".join(leaves), frozenset(blobs), root_hex=root
    )


def _prev_of(line: bytes) -> object:
    """The `prev` of a line, None if it has none (only to say which entry changed)."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return obj.get("prev") if type(obj) is dict else None


def split_whole(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    lines.pop()  # the caller passes whole lines: the last piece is empty
    return lines


def _split_point(data: bytes, n: int) -> int:
    """Byte offset just after line k, k the largest power of two below n (RFC 6962's split).

    Splitting there makes each side's own Merkle root one child of the whole tree's
    root, so the two sides hash in parallel too.
    """
    k = 1 << ((n - 1).bit_length() - 1)
    # Guess by average line length, then walk line by line to exactly k lines.
    pos = data.rfind(b"\n", 0, len(data) * k // n) + 1
    have = data.count(b"\n", 0, pos)
    while have < k:
        pos = data.index(b"\n", pos) + 1
        have += 1
    while have > k:
        pos = data.rindex(b"\n", 0, pos - 1) + 1
        have -= 1
    return pos


def encode_chunk(chunk: Chunk) -> bytes:
    head = {k: v for k, v in chunk.__dict__.items() if k != "leaves"}
    head["blobs"] = sorted(chunk.blobs)
    return json.dumps(head).encode() + b"\n" + chunk.leaves


def decode_chunk(raw: bytes) -> Chunk:
    head_s, _, leaves = raw.partition(b"\n")
    head = json.loads(head_s)
    head["blobs"] = frozenset(head["blobs"])
    return Chunk(leaves=leaves, **head)


def check_whole_lines(path: str, data: bytes) -> list[Chunk]:
    """Check `data` (whole lines of the log at `path`): one chunk, or two checked at once.

    With two, the first holds exactly the largest power of two of lines below the
    total, so the whole tree's root is node_hash(first root, second root).
    """
    n = data.count(b"\n")
    if len(data) < PARALLEL_BYTES or (os.cpu_count() or 1) < 2 or n < 2:
        return [check_chunk(split_whole(data))]
    cut = _split_point(data, n)
    # A worker checks the second span while this process checks the first.
    proc = subprocess.Popen(
        [sys.executable, "-m", "evidence._chainworker", path, str(cut), str(len(data))],
        stdout=subprocess.PIPE,
    )
    first = check_chunk(split_whole(data[:cut]))
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise OSError(f"audit worker exited {proc.returncode}")
    return [first, decode_chunk(out)]
