"""RFC 9162 §2.1 Merkle tree: tree hash, inclusion and consistency proofs, and their verification.

Standard library only. The server (`evidence.publication`) builds its proofs with this module and the offline
verifier checks them with it; the verifier never imports the server, the server may import this.
"""

import hashlib
from collections.abc import Sequence

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()


class ProofError(ValueError):
    """A proof did not verify (or was malformed)."""


def leaf_hash(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


class Tree:
    """The tree over `leaves` (leaf hashes, not entries). Subtree hashes are memoised: in an append-only log a
    subtree's hash never changes, so repeated proofs over the same prefix cost O(log n) hashes each."""

    def __init__(self, leaves: Sequence[bytes]) -> None:
        self.leaves = leaves
        self._memo: dict[tuple[int, int], bytes] = {}

    def hash(self, start: int, end: int) -> bytes:
        """MTH(D[start:end])."""
        if end - start == 0:
            return EMPTY_ROOT
        if end - start == 1:
            return self.leaves[start]
        found = self._memo.get((start, end))
        if found is None:
            k = _split(end - start)
            found = self._memo[(start, end)] = node_hash(self.hash(start, start + k), self.hash(start + k, end))
        return found

    def root(self, size: int) -> bytes:
        if not 0 <= size <= len(self.leaves):
            raise ValueError(f"tree size {size} is outside 0..{len(self.leaves)}")
        return self.hash(0, size)

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        """PATH(index, D[0:size]) of §2.1.3.1, leaf to root."""
        if not 0 <= index < size <= len(self.leaves):
            raise ValueError(f"index {index} is not in a tree of size {size} (log size {len(self.leaves)})")
        path, start, end = [], 0, size
        while end - start > 1:
            k = _split(end - start)
            if index < start + k:
                path.append(self.hash(start + k, end))
                end = start + k
            else:
                path.append(self.hash(start, start + k))
                start += k
        return path[::-1]

    def consistency_proof(self, first: int, second: int) -> list[bytes]:
        """PROOF(first, D[0:second]) of §2.1.4.1 (empty when first is 0 or equals second)."""
        if not 0 <= first <= second <= len(self.leaves):
            raise ValueError(f"sizes {first} and {second} are not 0 <= first <= second <= {len(self.leaves)}")
        if first in (0, second):
            return []
        path, start, end, m, whole = [], 0, second, first, True
        while m != end - start:
            k = _split(end - start)
            if m <= k:
                path.append(self.hash(start + k, end))
                end = start + k
            else:
                path.append(self.hash(start, start + k))
                start, m, whole = start + k, m - k, False
        if not whole:
            path.append(self.hash(start, end))
        return path[::-1]


def frontier_append(frontier: Sequence[bytes], size: int, leaf: bytes) -> list[bytes]:
    """The right edge of the tree (roots of its perfect subtrees, largest first) after appending `leaf` to a tree
    of `size` leaves whose edge is `frontier`: O(log n), without the earlier leaves."""
    edge, h = list(frontier), leaf
    while size & 1:
        h, size = node_hash(edge.pop(), h), size >> 1
    edge.append(h)
    return edge


def frontier_root(frontier: Sequence[bytes]) -> bytes:
    if not frontier:
        return EMPTY_ROOT
    root = frontier[-1]
    for h in reversed(frontier[:-1]):
        root = node_hash(h, root)
    return root


def _check_hashes(proof: Sequence[bytes]) -> None:
    if any(len(h) != HASH_SIZE for h in proof):
        raise ProofError("a proof hash is not 32 bytes")


def root_from_inclusion_proof(index: int, size: int, leaf: bytes, proof: Sequence[bytes]) -> bytes:
    """The root that `proof` binds leaf `index` to, by the §2.1.3.2 algorithm."""
    if not 0 <= index < size:
        raise ProofError(f"index {index} is not in a tree of size {size}")
    _check_hashes(proof)
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ProofError("inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("inclusion proof is too short")
    return r


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> None:
    if root_from_inclusion_proof(index, size, leaf, proof) != root:
        raise ProofError(f"leaf {index} is not in the tree of size {size} with that root")


def verify_consistency(first: int, second: int, first_root: bytes, second_root: bytes, proof: Sequence[bytes]) -> None:
    """§2.1.4.2: the tree of size `first` is a prefix of the tree of size `second`."""
    if not 0 <= first <= second:
        raise ProofError(f"sizes {first} and {second} go backwards")
    _check_hashes(proof)
    if first == second or first == 0:
        if proof:
            raise ProofError("a proof between these sizes must be empty")
        if first == second and first_root != second_root:
            raise ProofError(f"two different roots for the same size {first}")
        return
    if not proof:
        raise ProofError("consistency proof is empty")
    path = [first_root, *proof] if first & (first - 1) == 0 else list(proof)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise ProofError("consistency proof is too long")
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            while fn and not fn & 1:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise ProofError("consistency proof is too short")
    if fr != first_root or sr != second_root:
        raise ProofError(f"the tree of size {first} is not a prefix of the tree of size {second}")
