"""Class balance of the train split: how many copies of each class's documents (quotas), and the
shuffled order with the copies placed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from llm_assets.kernels.batching.checks import _is_int
from llm_assets.kernels.batching.shuffle import _keyed_hashes

BALANCES = ("none", "oversample", "undersample")
_COPY_PERSON = b"llm-assets/copy"
"""blake2b personalisation of the hash that places a document's copies in the shuffle."""


UNDERSAMPLED = "undersampled"
"""Reject reason of a train document left out to even out the classes (``balance:
undersample``): its class has more documents than the smallest class."""


@dataclass(frozen=True)
class LabelQuota:
    """What the gather of one train bucket does with the documents of one class ``label``: each
    document ``copies`` times, and the first ``extra`` of them (in shuffle order, so a seeded
    random choice) once more. ``(1, 0)`` keeps them as they are, ``(0, k)`` keeps k of them.

    ``documents`` and ``target`` are the class's train documents in every bucket, before and
    after balancing: what a reject's value and the logs report."""

    label: str
    copies: int
    extra: int
    documents: int
    target: int


def balance_quotas(
    counts: Mapping[int, Mapping[str, int]], balance: str, max_copies: int | None = None
) -> dict[int, tuple[LabelQuota, ...]]:
    """The :class:`LabelQuota` of every class in every bucket of the train split, from the
    documents per class in each bucket (``counts[bucket][label]``).

    ``oversample`` brings every class to the largest class's count (capped at ``max_copies``
    times its own count); ``undersample`` brings every class down to the smallest's. A class of
    ``n`` documents brought to ``t`` gives each document ``t // n`` copies and one more copy to
    ``t % n`` of them, shared between the buckets in proportion to the class's documents there
    (largest remainders; ties to the lower bucket): the totals are exact, and each bucket decides
    alone. ``none``: every document once."""
    if balance not in BALANCES:
        raise ValueError(f"balance must be one of {BALANCES}, got {balance!r}")
    totals = group_totals(counts)
    if not totals:
        return {}
    if balance == "oversample":
        largest = max(totals.values())
        targets = {
            label: largest if max_copies is None else min(largest, n * max_copies)
            for label, n in totals.items()
        }
    elif balance == "undersample":
        smallest = min(totals.values())
        targets = dict.fromkeys(totals, smallest)
    else:
        targets = dict(totals)
    return spread_quotas(counts, targets)


def spread_quotas(
    counts: Mapping[int, Mapping[str, int]], targets: Mapping[str, int]
) -> dict[int, tuple[LabelQuota, ...]]:
    """The :class:`LabelQuota` of every group (a class, or a source of a mixture) in every train
    bucket, bringing the group's documents (``counts[bucket][group]``, summed over the buckets)
    to ``targets[group]`` in all. A group of ``n`` documents brought to ``t`` gives each document
    ``t // n`` copies and one more copy to ``t % n`` of them, shared between the buckets in
    proportion to the group's documents there (largest remainders; ties to the lower bucket): the
    totals are exact, and each bucket decides alone. Groups without documents are left out."""
    totals = group_totals(counts)
    quotas: dict[int, list[LabelQuota]] = {bucket: [] for bucket in sorted(counts)}
    for label in sorted(totals):
        n, target = totals[label], int(targets[label])
        copies, rest = divmod(target, n)
        buckets = sorted(b for b in counts if counts[b].get(label, 0) > 0)
        shares = {b: rest * int(counts[b][label]) for b in buckets}
        extra = {b: share // n for b, share in shares.items()}
        left = rest - sum(extra.values())
        for b in sorted(buckets, key=lambda b: (-(shares[b] % n), b))[:left]:
            extra[b] += 1
        for b in buckets:
            quotas[b].append(LabelQuota(label, copies, extra[b], n, target))
    return {bucket: tuple(q) for bucket, q in quotas.items() if q}


def group_totals(counts: Mapping[int, Mapping[str, int]]) -> dict[str, int]:
    """Each group's documents summed over the buckets (``counts[bucket][group]``), the groups
    with none left out."""
    totals: dict[str, int] = {}
    for per_group in counts.values():
        for group, n in per_group.items():
            totals[group] = totals.get(group, 0) + int(n)
    return {group: n for group, n in totals.items() if n > 0}


class BalancedOrder(NamedTuple):
    """:func:`balance_order`'s result."""

    order: np.ndarray
    """Indices of the documents in the new order; a repeated document appears several times."""
    left_out: np.ndarray
    """Indices of the documents left out (undersampled), in shuffle order."""
    copy: np.ndarray
    """Per place of ``order``: 0 for the document itself, ``j`` for its ``j``-th copy."""


def balance_order(
    order: np.ndarray,
    labels: Sequence[str] | None,
    quotas: Sequence[LabelQuota],
    doc_ids: Sequence[str],
    seed: int,
    repeat: int = 1,
) -> BalancedOrder:
    """Shuffle ``order`` (indices into ``labels`` and ``doc_ids``) with the classes evened out
    by ``quotas`` (:func:`balance_quotas`; none: every document once, ``labels`` unused), and
    every document kept ``repeat`` times as often (``augment_copies + 1``).

    Each document keeps its place; its copies are spread through the sequence at seeded random
    places, as a document of their own would be (copy ``j`` of a document is placed by a keyed
    hash of its ``doc_id`` and ``j``): two copies of a document seldom meet in a batch. Depends
    only on the seed, the ids, the quotas and ``repeat``, like every decision of the shuffle."""
    order = np.asarray(order, dtype=np.int64)
    if not _is_int(repeat) or repeat < 1:
        raise ValueError(f"repeat must be an int >= 1, got {repeat!r}")
    times = np.ones(len(order), np.int64)
    if quotas:
        if labels is None:
            raise ValueError("balance quotas need the documents' labels")
        by_label = {q.label: q for q in quotas}
        ordered_labels = [labels[i] for i in order]
        missing = sorted(set(ordered_labels) - set(by_label), key=str)
        if missing:
            raise ValueError(f"no balance quota for the label(s) {missing}")
        ordered = np.array(ordered_labels, dtype=object)
        for label, quota in by_label.items():
            where = np.flatnonzero(ordered == label)
            times[where] = quota.copies
            times[where[: quota.extra]] += 1
    kept = order[times > 0]
    left_out = order[times == 0]
    times = times[times > 0] * repeat
    repeats = times - 1
    if not repeats.any():
        return BalancedOrder(kept, left_out, np.zeros(len(kept), np.int64))
    copied = np.repeat(np.arange(len(kept)), repeats)
    # The copy number of each copy: 1..times-1 within its document.
    starts = np.cumsum(repeats) - repeats
    number = np.arange(len(copied)) - np.repeat(starts, repeats) + 1
    pairs = zip(kept[copied].tolist(), number.tolist(), strict=True)
    copy_ids = [f"{doc_ids[i]}\0{j}" for i, j in pairs]
    hashes = _keyed_hashes(copy_ids, seed, _COPY_PERSON)
    places = np.concatenate([np.arange(len(kept), dtype=np.uint64), hashes % np.uint64(len(kept))])
    is_copy = np.concatenate([np.zeros(len(kept), np.uint8), np.ones(len(copied), np.uint8)])
    tie = np.concatenate([np.zeros(len(kept), np.uint64), hashes])
    items = np.concatenate([kept, kept[copied]])
    numbers = np.concatenate([np.zeros(len(kept), np.int64), number])
    placed = np.lexsort((tie, is_copy, places))
    return BalancedOrder(items[placed], left_out, numbers[placed])
