"""RFC 9162 tree, proofs and verification: the transparency-dev published vectors, then every size 1..64 against a
naive recomputation straight from the RFC's recursive definitions."""

import hashlib

import pytest

from leroy_verify.merkle import (
    EMPTY_ROOT,
    ProofError,
    Tree,
    frontier_append,
    frontier_root,
    leaf_hash,
    node_hash,
    root_from_inclusion_proof,
    verify_consistency,
    verify_inclusion,
)

# transparency-dev/merkle proof/verify_test.go (the RFC 6962 / 9162 reference leaves and roots).
LEAVES = [bytes.fromhex(h) for h in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657",
                                     "606162636465666768696a6b6c6d6e6f")]  # fmt: skip
ROOTS = [bytes.fromhex(h) for h in (
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
)]  # fmt: skip
INCLUSION = [  # (leaf index, tree size, audit path)
    (0, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (5, 8, ["bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (1, 5, ["6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
]  # fmt: skip
CONSISTENCY = [  # (first, second, proof)
    (1, 8, ["96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"]),
    (6, 8, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
    (2, 5, ["5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"]),
    (6, 7, ["0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"]),
]  # fmt: skip
TREE = Tree([leaf_hash(leaf) for leaf in LEAVES])


def test_roots_match_the_published_vectors():
    assert [TREE.root(size) for size in range(1, 9)] == ROOTS
    assert TREE.root(0) == EMPTY_ROOT == hashlib.sha256(b"").digest()


@pytest.mark.parametrize(("index", "size", "path"), INCLUSION)
def test_inclusion_proofs_match_and_verify_against_the_published_vectors(index, size, path):
    proof = [bytes.fromhex(h) for h in path]

    assert TREE.inclusion_proof(index, size) == proof
    verify_inclusion(index, size, TREE.leaves[index], proof, ROOTS[size - 1])


@pytest.mark.parametrize(("first", "second", "path"), CONSISTENCY)
def test_consistency_proofs_match_and_verify_against_the_published_vectors(first, second, path):
    proof = [bytes.fromhex(h) for h in path]

    assert TREE.consistency_proof(first, second) == proof
    verify_consistency(first, second, ROOTS[first - 1], ROOTS[second - 1], proof)


@pytest.mark.parametrize(("index", "size", "path"), INCLUSION)
def test_corrupted_inclusion_proofs_are_refused(index, size, path):
    proof, root, leaf = [bytes.fromhex(h) for h in path], ROOTS[size - 1], TREE.leaves[index]
    flipped = [[bytes([p[0] ^ 8]) + p[1:] if i == j else p for j, p in enumerate(proof)] for i in range(len(proof))]
    probes = [
        (index + 1, size, leaf, proof, root), (index, size * 2, leaf, proof, root),
        (index, size, b"x" * 32, proof, root),
        (index, size, leaf, proof, EMPTY_ROOT), (index, size, leaf, [*proof, root], root),
        (index, size, leaf, [root, *proof], root), (index, size, leaf, proof[:-1], root),
        (index, size, leaf, [*proof, b""], root), *((index, size, leaf, f, root) for f in flipped),
    ]  # fmt: skip
    for probe in probes:
        with pytest.raises(ProofError):
            verify_inclusion(*probe)


@pytest.mark.parametrize(("first", "second", "path"), CONSISTENCY)
def test_corrupted_consistency_proofs_are_refused(first, second, path):
    proof, r1, r2 = [bytes.fromhex(h) for h in path], ROOTS[first - 1], ROOTS[second - 1]
    flipped = [[bytes([p[0] ^ 16]) + p[1:] if i == j else p for j, p in enumerate(proof)] for i in range(len(proof))]
    probes = [
        (first - 1, second, r1, r2, proof), (first + 1, second, r1, r2, proof), (first, second * 2, r1, r2, proof),
        (first, second, r2, r1, proof), (first, second, r1, r2, []), (first, second, r1, r2, proof[:-1]),
        (first, second, r1, r2, [*proof, r1]), (first, second, r1, r2, [proof[0], *proof]),
        *((first, second, r1, r2, f) for f in flipped),
    ]  # fmt: skip
    for probe in probes:
        with pytest.raises(ProofError):
            verify_consistency(*probe)


def test_trivial_consistency_needs_an_empty_proof_and_equal_roots():
    verify_consistency(0, 5, EMPTY_ROOT, ROOTS[4], [])
    verify_consistency(3, 3, ROOTS[2], ROOTS[2], [])
    bad = [(3, 3, ROOTS[2], ROOTS[3], []), (3, 3, ROOTS[2], ROOTS[2], [ROOTS[0]]), (4, 3, ROOTS[3], ROOTS[2], [])]
    for probe in bad:
        with pytest.raises(ProofError):
            verify_consistency(*probe)


def naive_root(leaves: list[bytes]) -> bytes:
    """MTH straight from RFC 9162 §2.1.1."""
    if not leaves:
        return EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return node_hash(naive_root(leaves[:k]), naive_root(leaves[k:]))


def naive_path(m: int, leaves: list[bytes]) -> list[bytes]:
    """PATH(m, D[n]) straight from §2.1.3.1."""
    if len(leaves) == 1:
        return []
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    if m < k:
        return [*naive_path(m, leaves[:k]), naive_root(leaves[k:])]
    return [*naive_path(m - k, leaves[k:]), naive_root(leaves[:k])]


def naive_subproof(m: int, leaves: list[bytes], whole: bool) -> list[bytes]:
    """SUBPROOF(m, D[n], b) straight from §2.1.4.1."""
    if m == len(leaves):
        return [] if whole else [naive_root(leaves)]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    if m <= k:
        return [*naive_subproof(m, leaves[:k], whole), naive_root(leaves[k:])]
    return [*naive_subproof(m - k, leaves[k:], False), naive_root(leaves[:k])]


def test_every_tree_size_to_64_agrees_with_the_naive_definitions_and_verifies():
    leaves = [leaf_hash(i.to_bytes(2, "big")) for i in range(64)]
    tree = Tree(leaves)
    for n in range(1, 65):
        root = naive_root(leaves[:n])
        assert tree.root(n) == root
        for m in range(n):
            path = tree.inclusion_proof(m, n)
            assert path == naive_path(m, leaves[:n])
            assert root_from_inclusion_proof(m, n, leaves[m], path) == root
        for m in range(1, n + 1):
            proof = tree.consistency_proof(m, n)
            assert proof == (naive_subproof(m, leaves[:n], True) if m < n else [])
            verify_consistency(m, n, naive_root(leaves[:m]), root, proof)
            if m < n:  # a proof against a forked earlier tree fails
                with pytest.raises(ProofError):
                    verify_consistency(m, n, naive_root([*leaves[: m - 1], leaf_hash(b"fork")]), root, proof)


def test_the_right_edge_gives_every_root_without_the_earlier_leaves():
    leaves = [leaf_hash(i.to_bytes(2, "big")) for i in range(64)]
    edge: list[bytes] = []
    assert frontier_root(edge) == EMPTY_ROOT
    for n, leaf in enumerate(leaves):
        edge = frontier_append(edge, n, leaf)
        assert frontier_root(edge) == naive_root(leaves[: n + 1])
        assert len(edge) == (n + 1).bit_count()
