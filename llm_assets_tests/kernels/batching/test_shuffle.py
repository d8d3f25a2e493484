"""The seeded shuffle: keys, splits and buckets depend only on (seed, doc_id)."""

from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.kernels.batching.shuffle import (
    assign_buckets,
    assign_splits,
    shuffle_keys,
    shuffle_order,
)
from llm_assets_tests.kernels.batching.test_packed import _ids, no_deadline

doc_id_sets = st.sets(st.text(min_size=1, max_size=12), min_size=1, max_size=60)


def test_shuffle_keys_are_the_documented_keyed_hash():
    expected = hashlib.blake2b(
        b"doc-1", digest_size=8, key=(7).to_bytes(8, "little"), person=b"llm-assets/shuf"
    ).digest()
    keys = shuffle_keys(["doc-1"], 7)
    assert keys.dtype == np.uint64
    assert int(keys[0]) == int.from_bytes(expected, "little")
    # Many documents (the hasher is copied per document: no state carries over between them).
    ids = ["doc-1", "", "doc-1", "é-unicode", "x" * 300]
    fresh = [
        hashlib.blake2b(
            i.encode(), digest_size=8, key=(7).to_bytes(8, "little"), person=b"llm-assets/shuf"
        ).digest()
        for i in ids
    ]
    assert shuffle_keys(ids, 7).tolist() == [int.from_bytes(d, "little") for d in fresh]


def test_shuffle_is_deterministic_per_seed_and_differs_between_seeds():
    ids = _ids(1000)
    a = shuffle_order(shuffle_keys(ids, 1), ids)
    assert np.array_equal(a, shuffle_order(shuffle_keys(pa.array(ids), 1), ids))
    assert not np.array_equal(a, shuffle_order(shuffle_keys(ids, 2), ids))
    assert sorted(a.tolist()) == list(range(1000))


@no_deadline
@given(ids=doc_id_sets, seed=st.integers(0, 2**64 - 1), data=st.data())
def test_shuffle_order_does_not_depend_on_input_order(ids, seed, data):
    ids = sorted(ids)
    permuted = data.draw(st.permutations(ids))
    ordered = [ids[i] for i in shuffle_order(shuffle_keys(ids, seed), ids)]
    assert [permuted[i] for i in shuffle_order(shuffle_keys(permuted, seed), permuted)] == ordered


def test_equal_keys_are_ordered_by_doc_id_whatever_the_input_order():
    keys = np.array([5, 3, 5, 3, 5], dtype=np.uint64)
    ids = ["e", "b", "a", "c", "d"]
    assert [ids[i] for i in shuffle_order(keys, ids)] == ["b", "c", "a", "d", "e"]
    back = ids[::-1]
    assert [back[i] for i in shuffle_order(keys[::-1], back)] == ["b", "c", "a", "d", "e"]


def _scatter_gather(shards: list[list[str]], seed: int, fraction: float, n_buckets: int):
    """The pipeline's protocol: scatter every shard to (split, bucket), then sort each bucket."""
    buckets: dict[tuple[bool, int], list[tuple[int, str]]] = {}
    for shard in shards:
        keys = shuffle_keys(shard, seed)
        validation = assign_splits(shard, seed, fraction)
        for key, split, bucket, doc in zip(
            keys, validation, assign_buckets(keys, n_buckets), shard, strict=True
        ):
            buckets.setdefault((bool(split), int(bucket)), []).append((int(key), doc))
    result = {}
    for split in (False, True):
        ordered = []
        for bucket in range(n_buckets):
            rows = buckets.get((split, bucket), [])
            keys = np.array([k for k, _ in rows], dtype=np.uint64)
            docs = [d for _, d in rows]
            ordered += [docs[i] for i in shuffle_order(keys, docs)]
        result[split] = ordered
    return result


@settings(max_examples=50, deadline=None)
@given(
    ids=doc_id_sets,
    seed=st.integers(0, 1000),
    fraction=st.sampled_from([0.0, 0.2, 0.5]),
    n_buckets=st.integers(1, 5),
    data=st.data(),
)
def test_scatter_gather_is_independent_of_sharding(ids, seed, fraction, n_buckets, data):
    ids = sorted(ids)
    reference = _scatter_gather([ids], seed, fraction, n_buckets)
    permuted = data.draw(st.permutations(ids))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(ids)), max_size=4)))
    bounds = [0, *cuts, len(ids)]
    shards = [permuted[a:b] for a, b in itertools.pairwise(bounds)]
    assert _scatter_gather(shards, seed, fraction, n_buckets) == reference
    # the buckets in order are the global sort by key: one bucket or many give the same order
    assert _scatter_gather(shards, seed, fraction, 1) == reference


def test_splits_are_per_document_and_respect_the_fraction():
    ids = _ids(10_000)
    validation = assign_splits(ids, 3, 0.05)
    assert validation.dtype == np.bool_
    assert 0.04 < validation.mean() < 0.06
    # a document's split is the same in any shard, next to any neighbours
    assert [bool(assign_splits([i], 3, 0.05)[0]) for i in ids[:200]] == validation[:200].tolist()
    assert np.array_equal(assign_splits(ids[::-1], 3, 0.05), validation[::-1])
    assert not assign_splits(ids, 3, 0.0).any()
    assert not np.array_equal(assign_splits(ids, 4, 0.05), validation)


def test_split_is_independent_of_the_shuffle_key():
    ids = _ids(10_000)
    validation = assign_splits(ids, 0, 0.5)
    low_keys = shuffle_keys(ids, 0) < np.uint64(2**63)
    # were the split a function of the key, these would agree far from half the time
    assert 0.47 < (validation == low_keys).mean() < 0.53


def test_buckets_are_in_range_roughly_uniform_and_contiguous_in_key_order():
    keys = shuffle_keys(_ids(10_000), 0)
    buckets = assign_buckets(keys, 8)
    assert buckets.dtype == np.int32
    counts = np.bincount(buckets, minlength=8)
    assert len(counts) == 8 and counts.min() > 1100 and counts.max() < 1400
    assert np.all(np.diff(buckets[np.argsort(keys)]) >= 0)


@no_deadline
@given(
    keys=st.lists(st.integers(0, 2**64 - 1), max_size=50).map(lambda k: [0, 2**64 - 1, *k]),
    n_buckets=st.integers(1, 2**31 - 1),
)
def test_bucket_is_the_exact_high_bits_of_key_times_n(keys, n_buckets):
    buckets = assign_buckets(np.array(keys, dtype=np.uint64), n_buckets)
    assert buckets.tolist() == [k * n_buckets >> 64 for k in keys]


def test_key_and_split_functions_refuse_bad_arguments():
    with pytest.raises(ValueError, match="seed"):
        shuffle_keys(["a"], -1)
    with pytest.raises(ValueError, match="doc_ids"):
        shuffle_keys(pa.array(["a", None]), 0)
    with pytest.raises(ValueError, match="validation_fraction"):
        assign_splits(["a"], 0, 1.0)
    with pytest.raises(ValueError, match="n_buckets"):
        assign_buckets(np.array([1], dtype=np.uint64), 0)
