"""Evening out the classes of labelled documents (``balance``): the quotas of each bucket give
exact totals, the order keeps every document's place and spreads its copies, and a bad setting is
an error naming it."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.mixing.balance import LabelQuota, balance_order, balance_quotas

LABELS = ("a", "b", "c")

# Documents per class in each of up to 5 buckets (a class may be absent from some).
bucket_counts = st.dictionaries(
    st.integers(0, 4),
    st.dictionaries(st.sampled_from(LABELS), st.integers(0, 40), max_size=3),
    min_size=1,
    max_size=5,
)


def _totals(counts: dict[int, dict[str, int]]) -> Counter[str]:
    totals: Counter[str] = Counter()
    for per_label in counts.values():
        totals.update({k: v for k, v in per_label.items() if v})
    return totals


@settings(max_examples=200, deadline=None)
@given(
    bucket_counts,
    st.sampled_from(["none", "oversample", "undersample"]),
    st.none() | st.integers(1, 4),
)
def test_quotas_reach_each_class_target_exactly_and_no_bucket_gives_more_than_it_has(
    counts, balance, max_copies
):
    if balance != "oversample":
        max_copies = None
    totals = _totals(counts)
    quotas = balance_quotas(counts, balance, max_copies)
    if not totals:
        assert quotas == {}
        return
    reached: Counter[str] = Counter()
    for bucket, bucket_quotas in quotas.items():
        assert len({q.label for q in bucket_quotas}) == len(bucket_quotas)
        for q in bucket_quotas:
            n = counts[bucket][q.label]
            assert 0 <= q.extra <= n  # one more copy for at most every document there
            assert q.documents == totals[q.label]
            reached[q.label] += q.copies * n + q.extra
    if balance == "none":
        expected = dict(totals)
    elif balance == "undersample":
        expected = dict.fromkeys(totals, min(totals.values()))
    else:
        largest = max(totals.values())
        expected = {
            k: largest if max_copies is None else min(largest, n * max_copies)
            for k, n in totals.items()
        }
    assert dict(reached) == expected
    assert all(q.target == expected[q.label] for qs in quotas.values() for q in qs)


def test_the_remainder_is_shared_by_the_buckets_in_proportion_to_their_documents():
    """10 of class b against 25 of a: 2 copies each, and 5 more split 3/2 between buckets
    holding 6 and 4 of them (largest remainders: 3.0 and 2.0)."""
    quotas = balance_quotas({0: {"a": 10, "b": 6}, 1: {"a": 15, "b": 4}}, "oversample")
    assert quotas[0] == (LabelQuota("a", 1, 0, 25, 25), LabelQuota("b", 2, 3, 10, 25))
    assert quotas[1] == (LabelQuota("a", 1, 0, 25, 25), LabelQuota("b", 2, 2, 10, 25))
    under = balance_quotas({0: {"a": 10, "b": 6}, 1: {"a": 15, "b": 4}}, "undersample")
    assert under[0] == (LabelQuota("a", 0, 4, 25, 10), LabelQuota("b", 1, 0, 10, 10))
    assert under[1] == (LabelQuota("a", 0, 6, 25, 10), LabelQuota("b", 1, 0, 10, 10))


def _ids(n: int) -> list[str]:
    return [f"doc{i:03d}" for i in range(n)]


def test_oversampled_copies_are_spread_and_every_document_keeps_its_place():
    """Class b (5 documents) brought to 20: each document 4 times. The originals stay in their
    shuffle order; the copies land at seeded places among them, not beside their document."""
    labels = ["a"] * 20 + ["b"] * 5
    order = np.random.default_rng(1).permutation(25)
    quotas = balance_quotas({0: {"a": 20, "b": 5}}, "oversample")[0]
    new, left_out, _ = balance_order(order, labels, quotas, _ids(25), seed=7)
    assert len(left_out) == 0
    assert Counter(labels[i] for i in new) == {"a": 20, "b": 20}
    assert Counter(new.tolist()) == {i: (1 if labels[i] == "a" else 4) for i in range(25)}
    # The documents of class a, not copied, keep their shuffle order.
    assert [i for i in new if labels[i] == "a"] == [i for i in order if labels[i] == "a"]
    b_places = [k for k, i in enumerate(new) if labels[i] == "b"]
    assert max(np.diff(b_places)) > 1  # not all side by side
    same, *_ = balance_order(order, labels, quotas, _ids(25), seed=7)
    other, *_ = balance_order(order, labels, quotas, _ids(25), seed=8)
    assert same.tolist() == new.tolist() and other.tolist() != new.tolist()


def test_the_extra_copy_and_the_documents_kept_are_the_first_in_shuffle_order():
    labels = ["a"] * 6 + ["b"] * 4
    order = np.array([9, 0, 8, 1, 7, 2, 6, 3, 5, 4])
    over = (LabelQuota("a", 1, 0, 6, 6), LabelQuota("b", 1, 2, 4, 6))
    new, left_out, _ = balance_order(order, labels, over, _ids(10), seed=0)
    assert Counter(new.tolist())[9] == Counter(new.tolist())[8] == 2  # first two b's
    assert Counter(new.tolist())[7] == Counter(new.tolist())[6] == 1
    under = (LabelQuota("a", 0, 4, 6, 4), LabelQuota("b", 1, 0, 4, 4))
    new, left_out, _ = balance_order(order, labels, under, _ids(10), seed=0)
    assert new.tolist() == [9, 0, 8, 1, 7, 2, 6, 3]  # the first four a's, in order
    assert left_out.tolist() == [5, 4]


def test_a_label_without_a_quota_is_an_error_not_a_silent_drop():
    with pytest.raises(ValueError, match=r"no balance quota for the label\(s\) \['z'\]"):
        balance_order(np.arange(2), ["a", "z"], (LabelQuota("a", 1, 0, 1, 1),), _ids(2), 0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"balance": "even"}, "balance must be one of"),
        ({"balance": "oversample", "max_copies": 0}, "max_copies must be an int >= 1"),
        ({"balance": "undersample", "max_copies": 3}, "max_copies caps the copies"),
        ({"max_copies": 3}, "max_copies caps the copies"),
    ],
)
def test_bad_balance_settings_are_errors_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        BatchSpec(layout="padded", **kwargs)
