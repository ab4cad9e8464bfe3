"""Publication log: append rate and proof generation time at 10^5 entries, against hashing the same entries.

Runs in a throwaway database (`test_<name>` of DATABASE_URL, created and dropped here; PostgreSQL or SQLite).
Fills the log with N entries in batches of 1,000, then times single-entry appends (each its own transaction,
serialised by the append lock, with a signed checkpoint), the first inclusion proof (reads every leaf hash and
builds the tree) and later inclusion / consistency proofs (the process keeps its tree and reads only newer
leaves). The baseline, measured in the same run, is computing the RFC 9162 leaf hashes of the same entries'
stored bytes in memory. Every timed proof is verified against roots the bench computes itself from the stored
entries (and the signed checkpoint's root with them); prints one line, exits 1 when one fails.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/leroy_bench .venv/bin/python bench/log_append.py [--entries 100000]
"""

import argparse
import base64
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from cleanup import check_tree, exit_on_signals, throwaway_database  # bench/ is the script's directory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "leroy.settings")
os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-" + "x" * 40)
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/leroy_bench")
os.environ.setdefault(
    "LEROY_LOG_SIGNING_KEY", "PRIVATE+KEY+test.leroy.invalid/log+775b8874+AYXDLWSYFsW2zIEwh4kXC7hOuq9iwYaHJCc7hfJj25pG"
)
os.environ.setdefault("LEROY_LOG_ORIGIN", "test.leroy.invalid/log")  # the key signs only under its own name

import django

django.setup()

from django.db import connection  # noqa: E402

from evidence.models import LogEntry  # noqa: E402
from evidence.publication import selectors, services  # noqa: E402
from leroy_verify.merkle import (  # noqa: E402
    ProofError,
    frontier_append,
    frontier_root,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)

BATCH = 1000


def entry(n: int) -> dict[str, Any]:
    return {"kind": "eod_snapshot", "session": f"s{n:07d}", "snapshot_sha256": f"{n:064x}", "row_count": n}


def main() -> int:
    check_tree()
    exit_on_signals()
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--appends", type=int, default=300, help="single-entry appends timed at the full size")
    parser.add_argument("--proofs", type=int, default=5, help="proofs of each kind timed at the full size")
    options = parser.parse_args()
    with throwaway_database():
        started = time.perf_counter()
        for start in range(0, options.entries, BATCH):
            services.entries_append([entry(n) for n in range(start, min(start + BATCH, options.entries))])
        fill_seconds = time.perf_counter() - started

        started = time.perf_counter()
        for n in range(options.appends):
            services.entry_append(entry(options.entries + n))
        append_seconds = time.perf_counter() - started
        size = options.entries + options.appends

        ok = list(LogEntry.objects.order_by("-index").values_list("index", flat=True)[:1]) == [size - 1]
        rng = random.Random(7)
        checkpoint = selectors.checkpoint()
        root = base64.b64decode(checkpoint.root_hash)
        indices = [rng.randrange(size) for _ in range(options.proofs + 1)]
        started = time.perf_counter()  # cold: this process has read no leaf yet
        inclusions = [selectors.inclusion_proof(index=indices[0], tree_size=size)]
        cold_seconds = time.perf_counter() - started
        started = time.perf_counter()
        inclusions += [selectors.inclusion_proof(index=index, tree_size=size) for index in indices[1:]]
        inclusion_seconds = (time.perf_counter() - started) / options.proofs
        started = time.perf_counter()
        firsts = [rng.randrange(1, size) for _ in range(options.proofs)]
        consistencies = [selectors.consistency_proof(first=first, second=size) for first in firsts]
        consistency_seconds = (time.perf_counter() - started) / options.proofs

        bodies = [body.encode() for body in LogEntry.objects.order_by("index").values_list("body", flat=True)]
        started = time.perf_counter()
        hashed = [leaf_hash(body) for body in bodies]
        hash_seconds = time.perf_counter() - started
        ok = ok and len(hashed) == size

        # Verified against what this bench computes itself from the stored entries (leaf hashes, and each tree
        # size's root from them), not against the server's tree that made the proofs: the signed checkpoint's root
        # must be the root of every entry, and each proof must lead to it.
        roots, frontier = {}, []
        for n, leaf in enumerate(hashed, start=1):
            frontier = frontier_append(frontier, n - 1, leaf)
            if n in firsts or n == size:
                roots[n] = frontier_root(frontier)
        ok = ok and roots[size] == root
        try:
            for proof in inclusions:
                verify_inclusion(
                    proof.index, size, hashed[proof.index], [base64.b64decode(h) for h in proof.hashes], root
                )
            for proof in consistencies:
                verify_consistency(
                    proof.first, size, roots[proof.first], root, [base64.b64decode(h) for h in proof.hashes]
                )
        except ProofError:
            ok = False
        print(
            f"log_append ({connection.vendor}): {size} entries; single appends "
            f"{options.appends / append_seconds:.0f}/s (each a transaction + signed checkpoint); batched fill "
            f"{options.entries / fill_seconds:.0f} entries/s; proofs at {size} entries: first inclusion "
            f"{cold_seconds * 1000:.0f} ms (reads every leaf, builds the tree), then inclusion "
            f"{inclusion_seconds * 1000:.2f} ms, consistency {consistency_seconds * 1000:.2f} ms; baseline: hashing "
            f"the same {size} entries {hash_seconds * 1000:.0f} ms ({size / hash_seconds:.0f}/s); proofs verified; "
            f"{'OK' if ok else 'FAILED'}"
        )
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
