"""Checks of the numeric settings that the spec and the kernels of the batches share."""

from __future__ import annotations

import numpy as np

_SEED_BYTES = 8
_MAX_BUCKETS = 2**31 - 1


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


MAX_SEQ_LEN = 2**24
"""Longest sequence accepted (16,777,216 tokens, far past any context in use): a typo such as
10**12 fails at once instead of as a MemoryError deep in the gather."""


def _check_seq_len(seq_len: int) -> None:
    if not _is_int(seq_len) or not 2 <= seq_len <= MAX_SEQ_LEN:
        raise ValueError(f"seq_len must be an int in [2, {MAX_SEQ_LEN}], got {seq_len!r}")


def _check_seed(seed: int) -> None:
    if not _is_int(seed) or not 0 <= seed < 2 ** (8 * _SEED_BYTES):
        raise ValueError(f"seed must be an int in [0, 2**64), got {seed!r}")


def _check_buckets(n_buckets: int, name: str) -> None:
    if not _is_int(n_buckets) or not 1 <= n_buckets <= _MAX_BUCKETS:
        raise ValueError(f"{name} must be an int in [1, {_MAX_BUCKETS}], got {n_buckets!r}")


def _check_fraction(fraction: float) -> None:
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, (int, float))
        or not 0 <= fraction < 1
    ):
        raise ValueError(f"validation_fraction must be in [0, 1), got {fraction!r}")
