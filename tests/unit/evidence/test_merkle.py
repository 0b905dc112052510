"""Tests for evidence.merkle (RFC 6962 §2.1 / RFC 9162 §2.1.3).

Vectors are the well-known RFC 6962 test data published with the
transparency-dev Merkle library (github.com/transparency-dev/merkle, files
proof/verify_test.go and rfc6962/rfc6962_test.go, inherited from
google/trillian and google/certificate-transparency).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evidence.merkle import (
    EMPTY_ROOT,
    Frontier,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root_from_leaf_hashes,
    verify_consistency,
    verify_inclusion,
)

# --- Published vectors (transparency-dev/merkle proof/verify_test.go) --------

LEAVES = [
    bytes.fromhex(""),
    bytes.fromhex("00"),
    bytes.fromhex("10"),
    bytes.fromhex("2021"),
    bytes.fromhex("3031"),
    bytes.fromhex("40414243"),
    bytes.fromhex("5051525354555657"),
    bytes.fromhex("606162636465666768696a6b6c6d6e6f"),
]
LEAF_HASHES = [leaf_hash(d) for d in LEAVES]

# ROOTS[i] is the root of the tree of the first i + 1 leaves.
ROOTS = [
    bytes.fromhex(h)
    for h in (
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    )
]

# (0-based leaf index, tree size, audit path).  The Go source lists the leaf
# 1-based; the indices here are already converted.
INCLUSION_VECTORS: list[tuple[int, int, list[bytes]]] = [
    (0, 1, []),
    (
        0,
        8,
        [
            bytes.fromhex("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
            bytes.fromhex("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            bytes.fromhex("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
        ],
    ),
    (
        5,
        8,
        [
            bytes.fromhex("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
            bytes.fromhex("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
            bytes.fromhex("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ],
    ),
    (
        2,
        3,
        [bytes.fromhex("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")],
    ),
    (
        1,
        5,
        [
            bytes.fromhex("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
            bytes.fromhex("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            bytes.fromhex("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
        ],
    ),
]

SOME_HASH = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")


def reference_mth(hashes: Sequence[bytes]) -> bytes:
    """MTH straight from the recursive definition in RFC 6962 §2.1."""
    n = len(hashes)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return hashes[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return hashlib.sha256(b"\x01" + reference_mth(hashes[:k]) + reference_mth(hashes[k:])).digest()


def synthetic_leaf_hashes(n: int) -> list[bytes]:
    return [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]


# --- Hash primitives ---------------------------------------------------------


def test_hashes_match_rfc6962_hasher_vectors() -> None:
    # transparency-dev/merkle rfc6962/rfc6962_test.go
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert (
        leaf_hash(b"").hex() == "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    )
    assert (
        leaf_hash(b"L123456").hex()
        == "395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56"
    )
    assert (
        node_hash(b"N123", b"N456").hex()
        == "aa217fe888e47007fa15edab33c2b492a722cb106c64667fc2b044444de66bbb"
    )


def test_leaf_and_node_hashes_are_domain_separated() -> None:
    a, b = leaf_hash(b"Hello"), leaf_hash(b"World")
    assert a != b
    assert node_hash(a, b) != leaf_hash(a + b)
    assert node_hash(a, b) != node_hash(b, a)
    assert leaf_hash(b"") != EMPTY_ROOT


# --- Roots -------------------------------------------------------------------


def test_root_matches_rfc6962_vectors() -> None:
    assert root_from_leaf_hashes([]) == EMPTY_ROOT
    for size in range(1, len(LEAVES) + 1):
        assert root_from_leaf_hashes(LEAF_HASHES[:size]) == ROOTS[size - 1], size


def test_frontier_root_matches_rfc6962_vectors() -> None:
    frontier = Frontier()
    assert frontier.root() == EMPTY_ROOT
    for size, h in enumerate(LEAF_HASHES, start=1):
        frontier.append(h)
        assert frontier.size == size
        assert frontier.root() == ROOTS[size - 1], size


@settings(max_examples=100, deadline=None)
@given(size=st.integers(min_value=0, max_value=300))
def test_root_equals_recursive_rfc6962_definition(size: int) -> None:
    hashes = synthetic_leaf_hashes(size)
    assert root_from_leaf_hashes(hashes) == reference_mth(hashes)


@settings(max_examples=100, deadline=None)
@given(size=st.integers(min_value=0, max_value=300))
def test_frontier_root_equals_full_recompute(size: int) -> None:
    hashes = synthetic_leaf_hashes(size)
    frontier = Frontier()
    for i, h in enumerate(hashes):
        frontier.append(h)
        # Spot-check intermediate sizes too (powers of two and their
        # neighbours are where the structure changes).
        if (i + 1) & i == 0 or (i + 2) & (i + 1) == 0:
            assert frontier.root() == reference_mth(hashes[: i + 1])
    assert frontier.size == size
    assert len(frontier.to_list()) == size.bit_count()
    assert frontier.root() == root_from_leaf_hashes(hashes) == reference_mth(hashes)


def test_root_of_large_tree_needs_no_recursion() -> None:
    # 2**17 + 3 leaves: deeper than any sane recursion limit would allow if
    # the implementation recursed per leaf; compare the two iterative paths.
    hashes = synthetic_leaf_hashes(2**17 + 3)
    frontier = Frontier()
    for h in hashes:
        frontier.append(h)
    assert root_from_leaf_hashes(hashes) == frontier.root()


def test_root_accepts_any_sequence() -> None:
    hashes = tuple(LEAF_HASHES)
    assert root_from_leaf_hashes(hashes) == ROOTS[-1]


# --- Frontier serialisation ---------------------------------------------------


def test_frontier_lists_subtree_roots_largest_first() -> None:
    frontier = Frontier()
    for h in LEAF_HASHES[:7]:
        frontier.append(h)
    assert frontier.to_list() == [
        ROOTS[3].hex(),  # leaves 0..3
        node_hash(LEAF_HASHES[4], LEAF_HASHES[5]).hex(),  # leaves 4..5
        LEAF_HASHES[6].hex(),  # leaf 6
    ]


def test_frontier_round_trips_through_list_and_keeps_appending() -> None:
    hashes = synthetic_leaf_hashes(77)
    frontier = Frontier()
    for h in hashes[:50]:
        frontier.append(h)
    restored = Frontier.from_list(frontier.size, frontier.to_list())
    assert restored.size == 50
    assert restored.root() == frontier.root()
    for h in hashes[50:]:
        restored.append(h)
    assert restored.root() == reference_mth(hashes)


def test_empty_frontier_round_trips() -> None:
    restored = Frontier.from_list(0, [])
    assert restored.size == 0
    assert restored.to_list() == []
    assert restored.root() == EMPTY_ROOT


@pytest.mark.parametrize(
    ("size", "hashes"),
    [
        (5, [ROOTS[3].hex()]),  # popcount(5) == 2
        (4, [ROOTS[3].hex(), LEAF_HASHES[4].hex()]),  # popcount(4) == 1
        (0, [ROOTS[0].hex()]),
        (1, ["zz" * 32]),  # not hex
        (1, ["ab" * 31]),  # 31 bytes
        (1, ["ab" * 33]),  # 33 bytes
        (-1, []),
    ],
)
def test_frontier_from_list_rejects_inconsistent_input(size: int, hashes: list[str]) -> None:
    with pytest.raises(ValueError, match="expected"):
        Frontier.from_list(size, hashes)


def test_frontier_rejects_leaf_hash_of_wrong_length() -> None:
    with pytest.raises(ValueError, match="32-byte"):
        Frontier().append(b"short")


# --- Inclusion proofs ----------------------------------------------------------


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION_VECTORS)
def test_inclusion_proof_matches_published_vectors(
    index: int, size: int, proof: list[bytes]
) -> None:
    assert inclusion_proof(index, LEAF_HASHES[:size]) == proof
    assert verify_inclusion(index, size, LEAF_HASHES[index], proof, ROOTS[size - 1])


def test_inclusion_proofs_verify_for_every_leaf_of_small_trees() -> None:
    for size in range(1, 65):
        hashes = synthetic_leaf_hashes(size)
        root = reference_mth(hashes)
        for index in range(size):
            proof = inclusion_proof(index, hashes)
            assert verify_inclusion(index, size, hashes[index], proof, root), (index, size)
            # The same proof must not verify for a different position.
            for other in range(size):
                if other != index:
                    assert not verify_inclusion(other, size, hashes[index], proof, root)


@settings(max_examples=50, deadline=None)
@given(data=st.data())
def test_inclusion_proofs_verify_in_larger_trees(data: st.DataObject) -> None:
    size = data.draw(st.integers(min_value=1, max_value=300))
    index = data.draw(st.integers(min_value=0, max_value=size - 1))
    hashes = synthetic_leaf_hashes(size)
    proof = inclusion_proof(index, hashes)
    assert verify_inclusion(index, size, hashes[index], proof, root_from_leaf_hashes(hashes))


def corrupted_proofs(
    index: int, size: int, leaf: bytes, proof: list[bytes], root: bytes
) -> list[tuple[str, int, int, bytes, list[bytes], bytes]]:
    probes = [
        ("index - 1", index - 1, size, leaf, proof, root),
        ("index + 1", index + 1, size, leaf, proof, root),
        ("index ^ 2", index ^ 2, size, leaf, proof, root),
        ("size * 2", index, size * 2, leaf, proof, root),
        ("size // 2", index, size // 2, leaf, proof, root),
        ("wrong leaf", index, size, leaf_hash(b"WrongLeaf"), proof, root),
        ("empty-tree root", index, size, leaf, proof, EMPTY_ROOT),
        ("some other root", index, size, leaf, proof, SOME_HASH),
        ("trailing root", index, size, leaf, [*proof, root], root),
        ("preceding root", index, size, leaf, [root, *proof], root),
        ("trailing empty", index, size, leaf, [*proof, b""], root),
        ("preceding empty", index, size, leaf, [b"", *proof], root),
    ]
    for i in range(len(proof)):
        flipped = list(proof)
        flipped[i] = bytes([flipped[i][0] ^ 8]) + flipped[i][1:]
        probes.append((f"bit flip in proof[{i}]", index, size, leaf, flipped, root))
    if proof:
        probes.append(("removed last element", index, size, leaf, proof[:-1], root))
    if len(proof) > 1:
        probes.append(
            ("inserted element", index, size, leaf, [proof[0], SOME_HASH, *proof[1:]], root)
        )
    return probes


def test_tampered_proof_is_rejected() -> None:
    for index, size, proof in INCLUSION_VECTORS:
        if not proof:
            continue
        root = ROOTS[size - 1]
        leaf = LEAF_HASHES[index]
        assert verify_inclusion(index, size, leaf, proof, root)
        for desc, i, n, lh, p, r in corrupted_proofs(index, size, leaf, proof, root):
            assert not verify_inclusion(i, n, lh, p, r), (index, size, desc)


def test_tampered_proofs_are_rejected_in_a_bigger_tree() -> None:
    hashes = synthetic_leaf_hashes(1000)
    root = root_from_leaf_hashes(hashes)
    for index in (0, 1, 511, 512, 767, 998, 999):
        proof = inclusion_proof(index, hashes)
        assert verify_inclusion(index, 1000, hashes[index], proof, root)
        for desc, i, n, lh, p, r in corrupted_proofs(index, 1000, hashes[index], proof, root):
            assert not verify_inclusion(i, n, lh, p, r), (index, desc)


def test_single_leaf_tree_proof_is_empty_and_checks_hash_sizes() -> None:
    h = leaf_hash(b"data")
    assert inclusion_proof(0, [h]) == []
    assert verify_inclusion(0, 1, h, [], h)
    assert not verify_inclusion(0, 1, h, [], b"")
    assert not verify_inclusion(0, 1, b"", [], h)
    assert not verify_inclusion(0, 1, b"", [], b"")


@pytest.mark.parametrize(
    ("index", "size"),
    [(0, 0), (1, 0), (1, 1), (2, 1), (-1, 4), (4, 4), (0, -1)],
)
def test_verify_inclusion_rejects_impossible_positions(index: int, size: int) -> None:
    assert not verify_inclusion(index, size, SOME_HASH, [], SOME_HASH)
    assert not verify_inclusion(index, size, SOME_HASH, [], EMPTY_ROOT)


def test_verify_inclusion_returns_false_for_malformed_proof_elements() -> None:
    index, size, proof = INCLUSION_VECTORS[1]
    leaf, root = LEAF_HASHES[index], ROOTS[size - 1]
    bad_elements: list[object] = [None, "00" * 32, 7, bytearray(proof[0]), proof[0][:31]]
    for bad in bad_elements:
        tampered: list[object] = [bad, *proof[1:]]
        assert not verify_inclusion(index, size, leaf, tampered, root)  # type: ignore[arg-type]
    assert not verify_inclusion(index, size, leaf, None, root)  # type: ignore[arg-type]
    assert not verify_inclusion("0", size, leaf, proof, root)  # type: ignore[arg-type]
    assert not verify_inclusion(index, size, None, proof, root)  # type: ignore[arg-type]


@pytest.mark.parametrize("index", [-1, 8, 100])
def test_inclusion_proof_rejects_out_of_range_index(index: int) -> None:
    with pytest.raises(ValueError, match="expected a leaf index"):
        inclusion_proof(index, LEAF_HASHES)


def test_root_from_random_leaf_hashes_is_stable_across_implementations() -> None:
    hashes = [os.urandom(32) for _ in range(257)]
    frontier = Frontier()
    for h in hashes:
        frontier.append(h)
    assert root_from_leaf_hashes(hashes) == frontier.root() == reference_mth(hashes)


# --- Consistency proofs (RFC 6962 §2.1.2, verified per RFC 9162 §2.1.4.2) -----

# transparency-dev/merkle proof/verify_test.go: consistency proofs into the 8-leaf tree.
CONSISTENCY_VECTORS = {
    1: ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
        "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
        "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"],
    4: ["6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"],
    6: ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
        "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"],
}  # fmt: skip


@pytest.mark.parametrize("old", sorted(CONSISTENCY_VECTORS))
def test_consistency_proof_matches_published_vectors(old: int) -> None:
    proof = consistency_proof(old, LEAF_HASHES[:8])
    assert [h.hex() for h in proof] == CONSISTENCY_VECTORS[old]
    assert verify_consistency(old, 8, ROOTS[old - 1], ROOTS[7], proof)


def test_consistency_proofs_verify_between_every_pair_of_small_trees() -> None:
    hashes = [leaf_hash(bytes([i])) for i in range(33)]
    for new in range(34):
        new_root = root_from_leaf_hashes(hashes[:new])
        for old in range(new + 1):
            old_root = root_from_leaf_hashes(hashes[:old])
            proof = consistency_proof(old, hashes[:new])
            assert verify_consistency(old, new, old_root, new_root, proof), (old, new)
            if 0 < old < new:  # any changed hash, or another old tree, fails
                assert not verify_consistency(old, new, SOME_HASH, new_root, proof)
                bent = [SOME_HASH, *proof[1:]]
                assert not verify_consistency(old, new, old_root, new_root, bent)


def test_a_forked_prefix_is_not_consistent() -> None:
    hashes = [leaf_hash(bytes([i])) for i in range(10)]
    forked = [*hashes[:3], leaf_hash(b"other"), *hashes[4:6]]
    proof = consistency_proof(6, hashes)
    assert not verify_consistency(
        6, 10, root_from_leaf_hashes(forked), root_from_leaf_hashes(hashes), proof
    )


def test_verify_consistency_rejects_impossible_sizes_and_bad_elements() -> None:
    root = ROOTS[7]
    assert not verify_consistency(9, 8, root, root, [])
    assert not verify_consistency(8, 8, ROOTS[6], root, [])
    assert not verify_consistency(3, 8, ROOTS[2], root, [])
    assert not verify_consistency(4, 8, ROOTS[3], root, [b"short"])
    assert verify_consistency(0, 8, EMPTY_ROOT, root, [])
    with pytest.raises(ValueError):
        consistency_proof(9, LEAF_HASHES[:8])
