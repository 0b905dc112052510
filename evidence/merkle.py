"""RFC 6962 Merkle tree hashing (RFC 6962 §2.1, unchanged in RFC 9162 §2.1).

Leaves and interior nodes are domain-separated SHA-256 hashes::

    MTH({})       = SHA-256()
    leaf hash     = SHA-256(0x00 || entry)
    node hash     = SHA-256(0x01 || left || right)

and a tree of ``n > 1`` leaves splits at ``k``, the largest power of two
strictly below ``n``.  Equivalently, the tree is the sequence of perfect
subtrees given by the binary digits of ``n`` (largest first), folded from the
right; :class:`Frontier` keeps exactly those subtree roots so a log can extend
its root in O(log n) per entry.

Inclusion proofs are the audit paths of RFC 6962 §2.1.1 (``PATH(m, D[n])``);
they are verified with the algorithm of RFC 9162 §2.1.3.2. Consistency proofs
are RFC 6962 §2.1.2's ``PROOF(m, D[n])``, verified as RFC 9162 §2.1.4.2 does
(what a C2SP tlog-witness checks before it cosigns).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "Frontier",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "node_hash",
    "root_from_leaf_hashes",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE = 32
"""Size in bytes of every hash in the tree (SHA-256)."""

_LEAF_PREFIX = b"\x00"
_NODE_PREFIX = b"\x01"

EMPTY_ROOT: bytes = hashlib.sha256(b"").digest()
"""MTH({}), the root of the empty tree: SHA-256 of the empty string."""


def leaf_hash(data: bytes) -> bytes:
    """Return the RFC 6962 leaf hash SHA-256(0x00 || data)."""
    return hashlib.sha256(_LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Return the RFC 6962 interior node hash SHA-256(0x01 || left || right)."""
    return hashlib.sha256(_NODE_PREFIX + left + right).digest()


def root_from_leaf_hashes(hashes: Sequence[bytes]) -> bytes:
    """Return MTH of the tree whose leaf hashes are ``hashes`` (in order).

    Iterative and linear: a stack holds the roots of the perfect subtrees seen
    so far together with their heights; each new leaf is merged with equal-
    height entries as it arrives (exactly n - 1 node hashes for n leaves), and
    the remaining stack is folded from the right at the end.  Leaves are
    consumed two at a time so every pair is hashed without going through the
    stack.
    """
    n = len(hashes)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return hashes[0]

    sha256 = hashlib.sha256
    prefix = _NODE_PREFIX
    # Parallel stacks: subtree roots and their heights (leaf = height 0).
    stack: list[bytes] = []
    heights: list[int] = []
    push_hash = stack.append
    push_height = heights.append
    pop_hash = stack.pop
    pop_height = heights.pop

    it = iter(hashes)
    for left, right in zip(it, it, strict=False):
        node = sha256(prefix + left + right).digest()
        height = 1
        while heights and heights[-1] == height:
            pop_height()
            node = sha256(prefix + pop_hash() + node).digest()
            height += 1
        push_hash(node)
        push_height(height)

    if n & 1:
        # The unpaired last leaf becomes the smallest (height 0) subtree.
        push_hash(hashes[n - 1])

    node = stack[-1]
    for i in range(len(stack) - 2, -1, -1):
        node = sha256(prefix + stack[i] + node).digest()
    return node


class Frontier:
    """The compact range [0, size) of an RFC 6962 tree.

    Holds one root per perfect subtree in the binary decomposition of ``size``
    (largest first), i.e. popcount(size) hashes; that is all that is needed to
    append further leaves and to compute the current tree root.
    """

    __slots__ = ("_hashes", "_size")

    def __init__(self) -> None:
        self._size = 0
        self._hashes: list[bytes] = []

    @property
    def size(self) -> int:
        """Number of leaves appended so far."""
        return self._size

    def append(self, leaf_hash: bytes) -> None:
        """Append one leaf (already leaf-hashed) to the tree. O(log n) hashes."""
        if len(leaf_hash) != HASH_SIZE:
            raise ValueError(f"expected a {HASH_SIZE}-byte leaf hash, found {len(leaf_hash)} bytes")
        sha256 = hashlib.sha256
        hashes = self._hashes
        node = bytes(leaf_hash)
        size = self._size
        # Each trailing 1 bit of the old size is a perfect subtree of the same
        # height as the node being carried: merge them.
        while size & 1:
            node = sha256(_NODE_PREFIX + hashes.pop() + node).digest()
            size >>= 1
        hashes.append(node)
        self._size += 1

    def root(self) -> bytes:
        """Return MTH of the first ``size`` leaves (EMPTY_ROOT when empty)."""
        hashes = self._hashes
        if not hashes:
            return EMPTY_ROOT
        sha256 = hashlib.sha256
        node = hashes[-1]
        for i in range(len(hashes) - 2, -1, -1):
            node = sha256(_NODE_PREFIX + hashes[i] + node).digest()
        return node

    def to_list(self) -> list[str]:
        """Return the subtree roots as lowercase hex, largest subtree first."""
        return [h.hex() for h in self._hashes]

    @classmethod
    def from_list(cls, size: int, hashes: list[str]) -> Frontier:
        """Rebuild a frontier from ``size`` and the output of :meth:`to_list`.

        Raises ValueError unless ``size`` is a non-negative integer and
        ``hashes`` holds exactly popcount(size) hex-encoded 32-byte hashes.
        """
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"expected a non-negative integer size, found {size!r}")
        expected = size.bit_count()
        if len(hashes) != expected:
            raise ValueError(
                f"expected {expected} subtree hashes for size {size} (popcount), "
                f"found {len(hashes)}"
            )
        decoded: list[bytes] = []
        for i, text in enumerate(hashes):
            if not isinstance(text, str):
                raise ValueError(f"expected hex string for subtree hash {i}, found {text!r}")
            try:
                raw = bytes.fromhex(text)
            except ValueError:
                raise ValueError(
                    f"expected hex string for subtree hash {i}, found {text[:80]!r}"
                ) from None
            if len(raw) != HASH_SIZE:
                raise ValueError(
                    f"expected {HASH_SIZE}-byte subtree hash {i}, found {len(raw)} bytes"
                )
            decoded.append(raw)
        frontier = cls()
        frontier._size = size
        frontier._hashes = decoded
        return frontier

    def __repr__(self) -> str:
        return f"Frontier(size={self._size}, hashes={self.to_list()!r})"


def inclusion_proof(index: int, leaf_hashes: Sequence[bytes]) -> list[bytes]:
    """Return the RFC 6962 §2.1.1 audit path PATH(index, D[n]), leaf to root.

    ``leaf_hashes`` are the leaf hashes of the whole tree (n = its length).
    Raises ValueError if ``index`` is not in [0, n).
    """
    n = len(leaf_hashes)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
        raise ValueError(f"expected a leaf index in [0, {n}), found {index!r}")
    # Walk down from the root, recording the sibling subtree root at each
    # split; the path lists them bottom-up, so reverse at the end.
    path: list[bytes] = []
    lo, hi, m = 0, n, index
    while hi - lo > 1:
        k = 1 << ((hi - lo - 1).bit_length() - 1)  # largest power of 2 < hi - lo
        if m < k:
            path.append(root_from_leaf_hashes(leaf_hashes[lo + k : hi]))
            hi = lo + k
        else:
            path.append(root_from_leaf_hashes(leaf_hashes[lo : lo + k]))
            lo += k
            m -= k
    path.reverse()
    return path


def verify_inclusion(
    index: int, size: int, leaf_hash: bytes, proof: Sequence[bytes], root: bytes
) -> bool:
    """Check an inclusion proof per RFC 9162 §2.1.3.2.

    Returns True only if ``proof`` shows that ``leaf_hash`` is leaf ``index``
    of the tree of ``size`` leaves whose root is ``root``.  Malformed input
    (bad index or size, hashes of the wrong type or length, a proof that is
    too short or too long) yields False; it never raises for a bad proof.
    """
    if isinstance(index, bool) or isinstance(size, bool):
        return False
    if not isinstance(index, int) or not isinstance(size, int):
        return False
    if not 0 <= index < size:
        return False
    if not isinstance(leaf_hash, bytes) or len(leaf_hash) != HASH_SIZE:
        return False
    if not isinstance(root, bytes) or len(root) != HASH_SIZE:
        return False
    try:
        elements = list(proof)
    except TypeError:
        return False

    sha256 = hashlib.sha256
    prefix = _NODE_PREFIX
    fn = index
    sn = size - 1
    r = leaf_hash
    for p in elements:
        if not isinstance(p, bytes) or len(p) != HASH_SIZE:
            return False
        if sn == 0:
            return False  # proof is longer than the path
        if fn & 1 or fn == sn:
            r = sha256(prefix + p + r).digest()
            if not fn & 1:
                # Skip the levels where this node is promoted unchanged
                # (it is the last node of its level and has no sibling).
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = sha256(prefix + r + p).digest()
        fn >>= 1
        sn >>= 1
    return sn == 0 and hmac.compare_digest(r, root)


def consistency_proof(old_size: int, leaf_hashes: Sequence[bytes]) -> list[bytes]:
    """Return RFC 6962 §2.1.2 ``PROOF(old_size, D[n])`` (empty when old_size is 0 or n).

    ``leaf_hashes`` are the leaf hashes of the whole new tree. Raises ValueError
    unless 0 <= old_size <= n.
    """
    n = len(leaf_hashes)
    if isinstance(old_size, bool) or not isinstance(old_size, int) or not 0 <= old_size <= n:
        raise ValueError(f"expected an old size in [0, {n}], found {old_size!r}")
    if old_size in (0, n):
        return []
    # SUBPROOF(m, D[lo:hi], whole): walk down, collecting the sibling roots bottom-up.
    path: list[bytes] = []
    lo, hi, m, whole = 0, n, old_size, True
    while m != hi - lo:
        k = 1 << ((hi - lo - 1).bit_length() - 1)  # largest power of 2 < hi - lo
        if m <= k:
            path.append(root_from_leaf_hashes(leaf_hashes[lo + k : hi]))
            hi = lo + k
        else:
            path.append(root_from_leaf_hashes(leaf_hashes[lo : lo + k]))
            lo, m, whole = lo + k, m - k, False
    if not whole:
        path.append(root_from_leaf_hashes(leaf_hashes[lo:hi]))
    path.reverse()
    return path


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """Check a consistency proof per RFC 9162 §2.1.4.2; False (never raises) if it fails.

    An old size of 0 takes an empty proof (the empty tree is a prefix of every
    tree); equal sizes take an empty proof and equal roots.
    """
    sizes = (old_size, new_size)
    if any(isinstance(x, bool) or not isinstance(x, int) for x in sizes):
        return False
    if not 0 <= old_size <= new_size:
        return False
    items = list(proof)
    if not all(isinstance(p, bytes) and len(p) == HASH_SIZE for p in (*items, old_root, new_root)):
        return False
    if old_size == 0:
        return not items
    if old_size == new_size:
        return not items and hmac.compare_digest(old_root, new_root)
    if not items:
        return False
    if old_size & (old_size - 1) == 0:  # a power of two: the old root is a node itself
        items.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = items[0]
    for c in items[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and hmac.compare_digest(fr, old_root) and hmac.compare_digest(sr, new_root)
