"""The seeded shuffle: each document's shuffle key, split and shuffle bucket, and the order of a
bucket's documents."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from llm_assets.kernels.batching.checks import (
    _SEED_BYTES,
    _check_buckets,
    _check_fraction,
    _check_seed,
)

_SHUFFLE_PERSON = b"llm-assets/shuf"
_SPLIT_PERSON = b"llm-assets/split"
"""blake2b personalisations: the shuffle key and the split draw are independent hashes of the
same (seed, doc_id), so a document's split says nothing about its place in the shuffle."""


def shuffle_keys(doc_ids: pa.Array | pa.ChunkedArray | Sequence[str], seed: int) -> np.ndarray:
    """The uint64 shuffle key of each document: keyed blake2b of its ``doc_id`` (seed as key),
    first 8 bytes little endian. Depends on nothing but (seed, doc_id)."""
    return _keyed_hashes(doc_ids, seed, _SHUFFLE_PERSON)


def assign_splits(
    doc_ids: pa.Array | pa.ChunkedArray | Sequence[str], seed: int, validation_fraction: float
) -> np.ndarray:
    """True where a document goes to validation: ``h / 2**64 < validation_fraction`` for an
    independent keyed hash ``h`` of (seed, doc_id), so the same document always lands in the same
    split, whatever shard it is in."""
    _check_fraction(validation_fraction)
    # fraction * 2**64 is exact in floating point; as an int the comparison is exact too.
    threshold = int(validation_fraction * 2.0**64)
    return _keyed_hashes(doc_ids, seed, _SPLIT_PERSON) < np.uint64(threshold)


def assign_buckets(keys: np.ndarray, n_buckets: int) -> np.ndarray:
    """The int32 bucket of each key: ``floor(key * n_buckets / 2**64)``, from the key's high bits.

    Each bucket is a contiguous range of the key space, so keys stay uniform inside a bucket and
    the buckets in order, each sorted, are all keys sorted. Computed exactly in 64-bit halves:
    with ``key = hi * 2**32 + lo``, ``key * n >> 64 == (hi * n + (lo * n >> 32)) >> 32``, and
    neither term overflows for ``n < 2**32``.
    """
    _check_buckets(n_buckets, "n_buckets")
    keys = np.asarray(keys, dtype=np.uint64)
    n = np.uint64(n_buckets)
    hi = keys >> np.uint64(32)
    lo = keys & np.uint64(0xFFFFFFFF)
    return ((hi * n + ((lo * n) >> np.uint64(32))) >> np.uint64(32)).astype(np.int32)


def shuffle_order(keys: np.ndarray, doc_ids: Sequence[str]) -> np.ndarray:
    """The permutation that sorts documents by (shuffle key, doc_id).

    Equal keys (64-bit collisions, vanishingly rare) are ordered by ``doc_id`` so the result does
    not depend on input order. Only documents with the same key *and* the same ``doc_id`` keep
    their input order: ids are unique upstream.
    """
    keys = np.asarray(keys, dtype=np.uint64)
    if len(doc_ids) != len(keys):
        raise ValueError(f"{len(keys)} keys but {len(doc_ids)} doc_ids")
    order = np.argsort(keys, kind="stable")
    ranked = keys[order]
    for key in np.unique(ranked[1:][ranked[1:] == ranked[:-1]]):
        lo, hi = np.searchsorted(ranked, key, "left"), np.searchsorted(ranked, key, "right")
        order[lo:hi] = sorted(order[lo:hi], key=lambda i: doc_ids[i])
    return order


def _keyed_hashes(
    doc_ids: pa.Array | pa.ChunkedArray | Sequence[str], seed: int, person: bytes
) -> np.ndarray:
    """uint64 from the first 8 bytes (little endian) of blake2b(doc_id, key=seed, person)."""
    _check_seed(seed)
    ids = doc_ids.to_pylist() if isinstance(doc_ids, (pa.Array, pa.ChunkedArray)) else doc_ids
    if any(not isinstance(i, str) for i in ids):
        raise ValueError("doc_ids must all be strings (no nulls)")
    key = int(seed).to_bytes(_SEED_BYTES, "little")
    # A keyed blake2b compresses the key block when it is made: copy one made once (same digest,
    # ~40 % less time than a new keyed hash per document).
    keyed = hashlib.blake2b(digest_size=8, key=key, person=person)

    def digest(doc_id: str) -> bytes:
        h = keyed.copy()
        h.update(doc_id.encode())
        return h.digest()

    digests = b"".join(map(digest, ids))
    return np.frombuffer(digests, dtype="<u8").astype(np.uint64)
