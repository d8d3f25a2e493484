"""The ``bucketed`` layout: a permutation in uniform batches, ordered per file."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.kernels.batching.bucketing import bucket_layout, derive_boundaries


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 300), min_size=0, max_size=200),
    st.integers(1, 16),
    st.integers(0, 2**32),
)
def test_bucketed_layout_is_a_permutation_with_uniform_batches(lengths, batch_size, seed):
    seq_len = 256
    boundaries = (16, 64, 128)
    lengths = np.array(lengths, dtype=np.int64)
    order, targets, buckets, batches = bucket_layout(lengths, boundaries, seq_len, batch_size, seed)
    assert sorted(order.tolist()) == list(range(len(lengths)))
    # Batches are numbered 0, 1, ... in output order, each at most batch_size rows of one bucket
    # padded to one length: what a reader takes back whole.
    assert list(np.unique(batches)) == list(range(len(np.unique(batches))))
    assert (np.diff(batches) >= 0).all()
    for number in np.unique(batches):
        rows = batches == number
        assert rows.sum() <= batch_size
        assert len(set(targets[rows])) == 1 and len(set(buckets[rows])) == 1
    kept = np.minimum(lengths[order], seq_len)
    assert (targets >= np.maximum(kept, 1)).all()
    bounds = np.array([*boundaries, seq_len])
    assert (kept <= bounds[buckets]).all()
    assert (buckets == 0).all() or (kept[buckets > 0] > bounds[buckets[buckets > 0] - 1]).all()
    again = bucket_layout(lengths, boundaries, seq_len, batch_size, seed)
    assert np.array_equal(order, again[0])


def test_bucketed_batch_order_differs_from_file_to_file():
    """Each shuffle-bucket file orders its length buckets its own way (order tags of the bucket
    and batch number only would give similar files one sequence of lengths, e.g. always long
    batches first); the same salt gives the same order."""
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 256, 400)

    def lengths_order(salt: str) -> list[int]:
        _, _, buckets, batches = bucket_layout(lengths, (32, 64, 128), 256, 8, 7, salt)
        return buckets[np.r_[0, np.flatnonzero(np.diff(batches)) + 1]].tolist()

    first, second = lengths_order("train:0"), lengths_order("train:1")
    assert sorted(first) == sorted(second) and first != second
    assert lengths_order("train:0") == first


def test_bucketed_padding_is_far_below_fixed_padding():
    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.lognormal(4.5, 0.8, 5000).astype(int) + 1, 1024)
    quantiles = np.quantile(lengths, np.linspace(0, 1, 17)[1:-1])
    boundaries = derive_boundaries(quantiles, 1024)
    assert boundaries[-1] == 1024 and list(boundaries) == sorted(set(boundaries))
    _order, targets, _, _ = bucket_layout(lengths, boundaries, 1024, 8, 0)
    bucketed_padding = 1 - lengths.sum() / targets.sum()
    fixed_padding = 1 - lengths.sum() / (len(lengths) * 1024)
    assert bucketed_padding < 0.2 < 0.75 < fixed_padding
