"""The ``bucketed`` layout's length buckets: their boundaries, and the order and pad lengths
of its batches."""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Sequence

import numpy as np

from llm_assets.kernels.batching.checks import _SEED_BYTES, _is_int

_BATCH_PERSON = b"llm-assets/batch"


def check_boundaries(boundaries: Sequence[int], seq_len: int) -> None:
    """Length-bucket bounds must be strictly increasing positive ints no larger than seq_len."""
    values = list(boundaries)
    if not values or any(not _is_int(b) or b < 1 or b > seq_len for b in values):
        raise ValueError(
            f"bucket_boundaries must be ints in [1, seq_len={seq_len}], got {tuple(values)!r}"
        )
    if any(b <= a for a, b in itertools.pairwise(values)):
        raise ValueError(f"bucket_boundaries must be strictly increasing, got {tuple(values)!r}")


def derive_boundaries(quantile_lengths: Sequence[float], seq_len: int, multiple: int = 8) -> tuple:
    """Bucket bounds from the length distribution: the given quantiles of document length,
    rounded up to a multiple of ``multiple`` (friendly to kernels), capped at and closed by
    ``seq_len``, duplicates removed."""
    bounds = sorted(
        {
            min(seq_len, max(multiple, -(-math.ceil(q) // multiple) * multiple))
            for q in quantile_lengths
        }
        | {seq_len}
    )
    return tuple(bounds)


def bucket_layout(
    lengths: np.ndarray,
    boundaries: Sequence[int],
    seq_len: int,
    batch_size: int,
    seed: int,
    salt: str = "",
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Order and pad lengths of the ``bucketed`` layout, for rows given in shuffle order.

    Each row goes to the first bucket whose bound holds its (truncated) length; inside a bucket,
    rows keep their shuffle order and are cut into batches of ``batch_size``; each batch is padded
    to its longest row; the batches are ordered by a seeded hash of (``salt``, bucket, batch
    number), so a trainer reading in order sees lengths mixed across batches but uniform inside
    one. Each file's ``salt`` (its split and shuffle bucket) gives it its own order of lengths:
    without it every file would repeat the first one's sequence of length buckets.
    Returns ``(order, targets, bucket_of_row, batch_of_row)``, the last three in output order;
    ``batch_of_row`` numbers the batches from 0 in output order (consecutive rows with one number
    are one batch, padded to one length), so a reader can take them back whole.
    """
    bounds = np.asarray(sorted(set(boundaries) | {seq_len}), dtype=np.int64)
    kept = np.minimum(np.asarray(lengths, dtype=np.int64), seq_len)
    bucket = np.searchsorted(bounds, kept, side="left").astype(np.int32)
    batches: list[tuple[bytes, np.ndarray]] = []
    key = int(seed).to_bytes(_SEED_BYTES, "little")
    for b in np.unique(bucket):
        rows = np.flatnonzero(bucket == b)
        for number, start in enumerate(range(0, len(rows), batch_size)):
            tag = hashlib.blake2b(
                f"{salt}:{b}:{number}".encode(), digest_size=8, key=key, person=_BATCH_PERSON
            ).digest()
            batches.append((tag, rows[start : start + batch_size]))
    batches.sort(key=lambda item: item[0])
    if not batches:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty.astype(np.int32), empty.astype(np.int32)
    order = np.concatenate([rows for _, rows in batches])
    targets = np.concatenate([np.full(len(rows), max(kept[rows].max(), 1)) for _, rows in batches])
    numbers = np.repeat(np.arange(len(batches), dtype=np.int32), [len(rows) for _, rows in batches])
    return order, targets, bucket[order], numbers
