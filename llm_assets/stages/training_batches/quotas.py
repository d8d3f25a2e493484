"""How many copies of each class (``balance``) or source (``mixture``) each train bucket keeps,
planned from the scatter manifests, and logged with a WARNING where it costs much."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from llm_assets.constants import TRAINING_BATCHES
from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.mixing.balance import LabelQuota, balance_quotas, spread_quotas
from llm_assets.kernels.mixing.mixture import MixtureSpec, file_matches, mixture_targets
from llm_assets.stages.engine import StageContext, StageInputError
from llm_assets.stages.training_batches.gather import trainable, trainable_label_counts
from llm_assets.stages.training_batches.scatter import (
    SPLITS,
    read_scatter_pieces,
    scatter_key,
    source_counts,
)


def _per_split(label_counts: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Documents per class label of each split, from counts per (split, bucket) key."""
    totals: dict[str, Counter[str]] = {split: Counter() for split in SPLITS}
    for key, per_label in label_counts.items():
        totals[key.rsplit("-", 1)[0]].update(per_label)
    return {split: dict(sorted(c.items())) for split, c in totals.items()}


BALANCE_COPIES_WARNING = 10
"""Copies of one document above which ``balance: oversample`` logs a WARNING (set
``max_copies``), and the share (1/this) of the train split below which an undersample does."""


def _balance_quotas(
    ctx: StageContext,
    spec: BatchSpec,
    label_counts: Mapping[str, Mapping[str, int]],
    n_buckets: int,
    pieces: Mapping[str, Sequence[Any]],
    prompted: bool,
) -> dict[int, tuple[LabelQuota, ...]]:
    """The class quotas of each train bucket (``spec.balance``), logged per class, with a WARNING
    for what it cannot even out or evens out at a cost: one class, classes only in validation,
    more than :data:`BALANCE_COPIES_WARNING` copies of a document, an undersample keeping less
    than a tenth of the split.

    The classes counted are those of the documents the layout uses: with prompts (SFT and chat
    rows), each train bucket is read once more to leave out its ``prompt_fills_sequence``
    rejects (:func:`~llm_assets.stages.training_batches.gather.trainable_label_counts`), else the
    scatter's counts are those."""
    if spec.balance == "none":
        return {}
    train: dict[int, Mapping[str, int]] = {}
    for bucket in range(n_buckets):
        key = scatter_key("train", bucket)
        if prompted and key in pieces:
            table = read_scatter_pieces(pieces[key])
            train[bucket] = {} if table is None else trainable_label_counts(table, spec)
        else:
            train[bucket] = label_counts.get(key, {})
    quotas = balance_quotas(train, spec.balance, spec.max_copies)
    classes = {q.label: q for bucket in quotas.values() for q in bucket}
    given = _per_split(label_counts)
    asset = TRAINING_BATCHES
    ctx.log.info(
        f"{asset}: balance {spec.balance}: train documents per class "
        + ", ".join(
            f"{label!r} {classes[label].documents:,} -> {classes[label].target:,}"
            for label in sorted(classes)
        )
        + (
            " (the documents the layout uses: prompt_fills_sequence rejects left out)"
            if prompted
            else ""
        )
    )
    if len(classes) < 2:
        ctx.log.warning(
            f"{asset}: balance {spec.balance}: the train split has "
            f"{len(classes)} class(es) ({', '.join(map(repr, sorted(classes)))}): nothing to "
            "even out"
        )
    if only := sorted(set(given["validation"]) - set(classes)):
        ctx.log.warning(
            f"{asset}: class(es) {', '.join(map(repr, only))} only in validation: no train "
            "document to balance"
        )
    most = {label: -(-q.target // q.documents) for label, q in classes.items() if q.documents}
    if spec.balance == "oversample" and most and max(most.values()) > BALANCE_COPIES_WARNING:
        heavy = sorted((label for label, n in most.items() if n > BALANCE_COPIES_WARNING))
        ctx.log.warning(
            f"{asset}: balance oversample repeats each train document of "
            + ", ".join(
                f"{label!r} up to {most[label]} times ({classes[label].documents:,} documents)"
                for label in heavy
            )
            + ": the model would fit those few examples; set max_copies to cap it"
        )
    documents = sum(q.documents for q in classes.values())
    kept = sum(q.target for q in classes.values())
    if spec.balance == "undersample" and kept * BALANCE_COPIES_WARNING < documents:
        ctx.log.warning(
            f"{asset}: balance undersample keeps {kept:,} of {documents:,} train documents: "
            "the smallest class decides; oversample (with max_copies) keeps them all"
        )
    return quotas


def _mixture_quotas(
    ctx: StageContext,
    mixture: MixtureSpec,
    spec: BatchSpec,
    file_counts: Mapping[str, Mapping[str, Sequence[int]]],
    n_buckets: int,
    pieces: Mapping[str, Sequence[Any]],
    prompted: bool,
) -> tuple[dict[int, tuple[LabelQuota, ...]], dict[str, dict[str, Any]]]:
    """The quotas of each source of the mixture in each train bucket, and what they plan per
    source (its weight and share, its train documents and tokens, the documents it keeps and
    the tokens they are expected to hold), logged, with a WARNING where the mixture costs much:
    more than :data:`BALANCE_COPIES_WARNING` copies of a document, an undersample keeping less
    than a tenth of the split, a source left with no document, or ``max_copies`` keeping a source
    below its share.

    Every input file of the batches' documents must belong to a source, and every source must
    have train documents: else a :class:`StageInputError` names the files or the source. With
    prompts (SFT and chat rows), each train bucket is read once more to count only the documents
    the layout uses (:func:`~llm_assets.stages.training_batches.gather.trainable`), as the balance
    of the classes does."""
    asset = TRAINING_BATCHES
    files, source_of = _sources_of_files(mixture, file_counts)
    train, tokens = _train_by_source(spec, file_counts, n_buckets, pieces, prompted, source_of)
    documents = {s.name: sum(b.get(s.name, 0) for b in train.values()) for s in mixture.sources}
    _refuse_sources_without_documents(mixture, documents, files, source_of, prompted)
    amounts = {
        name: tokens.get(name, 0) if mixture.by == "tokens" else n for name, n in documents.items()
    }
    if mixture.by == "tokens" and (empty := [n for n, a in amounts.items() if not a]):
        raise StageInputError(
            f"{asset}.config.mixture: source(s) {empty} have train documents but no token: "
            "weigh by documents (mixture.by: documents)"
        )
    targets = mixture_targets(documents, amounts, mixture)
    quotas = spread_quotas(train, targets)
    planned = _mixture_plan(mixture, documents, tokens, amounts, targets)
    _log_mixture_plan(ctx, mixture, spec, planned, prompted)
    _warn_mixture_costs(ctx, mixture, documents, targets, planned)
    return quotas, planned


def _sources_of_files(
    mixture: MixtureSpec, file_counts: Mapping[str, Mapping[str, Sequence[int]]]
) -> tuple[dict[str, int], dict[str, str | None]]:
    """The documents of each input file, and the source each belongs to; a
    :class:`StageInputError` naming the files that belong to none."""
    files: dict[str, int] = {}
    for per_file in file_counts.values():
        for name, (docs, _) in per_file.items():
            files[name] = files.get(name, 0) + int(docs)
    source_of = {name: mixture.source_of(name) for name in sorted(files)}
    if unmatched := [name for name, source in source_of.items() if source is None]:
        shown = ", ".join(repr(name) for name in unmatched[:5])
        more = f" and {len(unmatched) - 5} more" if len(unmatched) > 5 else ""
        raise StageInputError(
            f"{TRAINING_BATCHES}.config.mixture: {sum(files[n] for n in unmatched):,} document(s) "
            f"of {len(unmatched)} input file(s) belong to no source: {shown}{more}. Every input "
            "file must belong to one: add it to a source's files (paths and patterns relative "
            "to the input folder; a last source with files: ['*'] holds every file left)"
        )
    return files, source_of


def _train_by_source(
    spec: BatchSpec,
    file_counts: Mapping[str, Mapping[str, Sequence[int]]],
    n_buckets: int,
    pieces: Mapping[str, Sequence[Any]],
    prompted: bool,
    source_of: Mapping[str, str | None],
) -> tuple[dict[int, dict[str, int]], dict[str, int]]:
    """The train documents of each source per bucket, and the train tokens of each source."""
    train: dict[int, dict[str, int]] = {}
    tokens: dict[str, int] = {}
    for bucket in range(n_buckets):
        key = scatter_key("train", bucket)
        if prompted and key in pieces:
            table = read_scatter_pieces(pieces[key])
            per_file = {} if table is None else source_counts(trainable(table, spec))
        else:
            per_file = file_counts.get(key, {})
        held: dict[str, int] = {}
        for name, (docs, n_tokens) in per_file.items():
            source = source_of[name]
            assert source is not None
            held[source] = held.get(source, 0) + int(docs)
            tokens[source] = tokens.get(source, 0) + int(n_tokens)
        train[bucket] = held
    return train, tokens


def _refuse_sources_without_documents(
    mixture: MixtureSpec,
    documents: Mapping[str, int],
    files: Mapping[str, int],
    source_of: Mapping[str, str | None],
    prompted: bool,
) -> None:
    """A :class:`StageInputError` for the first source without a train document, saying why."""
    for source in mixture.sources:
        if documents[source.name]:
            continue
        given = [name for name, held_by in source_of.items() if held_by == source.name]
        named = [
            name
            for name in source_of
            if any(file_matches(pattern, name) for pattern in source.files)
        ]
        if not given and named:
            earlier = sorted({str(source_of[name]) for name in named})
            why = (
                f"its files ({', '.join(repr(n) for n in named[:5])}"
                f"{', ...' if len(named) > 5 else ''}) belong to the earlier source(s) "
                f"{earlier}, which name them too: a file belongs to the first source that names "
                f"it, so put {source.name!r} before them (a catch-all such as '*' goes last)"
            )
        elif given:
            why = (
                f"its {sum(files[n] for n in given):,} document(s) (in {len(given)} file(s)) are "
                "all in the validation split"
                + (" or fill their sequence with the prompt" if prompted else "")
            )
        else:
            known = ", ".join(repr(n) for n in sorted(files)[:5])
            why = (
                f"its files match none of the {len(files)} input file(s) the filtered documents "
                f"come from ({known}{', ...' if len(files) > 5 else ''}): check its files, and "
                "whether the filters rejected all of its documents (SELECT reason, count(*) FROM "
                "rejects WHERE source_file LIKE '<pattern>' GROUP BY ALL)"
            )
        raise StageInputError(
            f"{TRAINING_BATCHES}.config.mixture: source {source.name!r} (files "
            f"{list(source.files)}) has no train document: {why}"
        )


def _mixture_plan(
    mixture: MixtureSpec,
    documents: Mapping[str, int],
    tokens: Mapping[str, int],
    amounts: Mapping[str, int],
    targets: Mapping[str, int],
) -> dict[str, dict[str, Any]]:
    """What the quotas plan per source: its weight and share, its train documents and tokens,
    its share of the amounts before, the documents it keeps and the share they are expected to
    hold."""
    shares = mixture.shares
    amount_total = sum(amounts.values())
    expected = {name: amounts[name] * targets[name] / documents[name] for name in documents}
    expected_total = sum(expected.values()) or 1
    return {
        source.name: {
            "weight": source.weight,
            "share": round(shares[source.name], 6),
            "train_documents": documents[source.name],
            "train_tokens": tokens.get(source.name, 0),
            "share_before": round(amounts[source.name] / amount_total, 6),
            "documents": targets[source.name],
            "expected_share": round(expected[source.name] / expected_total, 6),
        }
        for source in mixture.sources
    }


def _log_mixture_plan(
    ctx: StageContext,
    mixture: MixtureSpec,
    spec: BatchSpec,
    planned: Mapping[str, Mapping[str, Any]],
    prompted: bool,
) -> None:
    unit = "tokens" if mixture.by == "tokens" else "documents"
    ctx.log.info(
        f"{TRAINING_BATCHES}: mixture {mixture.mode} by {mixture.by}: train "
        + ", ".join(
            f"{name!r} {p['train_documents']:,} documents ({p['share_before']:.1%} of the "
            f"{unit}) -> {p['documents']:,} ({p['expected_share']:.1%}, share {p['share']:.1%})"
            for name, p in planned.items()
        )
        + (
            " (the documents the layout uses: prompt_fills_sequence rejects left out)"
            if prompted
            else ""
        )
        + (
            f"; then every train document {spec.augment_copies + 1} times (augment_copies "
            f"{spec.augment_copies}: the shares stay)"
            if spec.augment_copies
            else ""
        )
    )


def _warn_mixture_costs(
    ctx: StageContext,
    mixture: MixtureSpec,
    documents: Mapping[str, int],
    targets: Mapping[str, int],
    planned: Mapping[str, Mapping[str, Any]],
) -> None:
    """A WARNING where the mixture costs much (see :func:`_mixture_quotas`)."""
    asset = TRAINING_BATCHES
    unit = "tokens" if mixture.by == "tokens" else "documents"
    most = {name: -(-targets[name] // documents[name]) for name in documents}
    if mixture.mode == "oversample" and max(most.values()) > BALANCE_COPIES_WARNING:
        heavy = sorted(name for name, n in most.items() if n > BALANCE_COPIES_WARNING)
        ctx.log.warning(
            f"{asset}: mixture oversample repeats each train document of "
            + ", ".join(
                f"{name!r} up to {most[name]} times ({documents[name]:,} documents)"
                for name in heavy
            )
            + ": the model would fit those few examples; set mixture.max_copies to cap it"
        )
    if mixture.max_copies is not None:
        capped = [n for n, p in planned.items() if p["expected_share"] < p["share"] - 0.005]
        if capped:
            ctx.log.warning(
                f"{asset}: mixture max_copies {mixture.max_copies} keeps "
                + ", ".join(
                    f"{n!r} at {planned[n]['expected_share']:.1%} (share {planned[n]['share']:.1%})"
                    for n in capped
                )
                + f" of the {unit}: more copies would be needed to reach the weights"
            )
    kept, given_total = sum(targets.values()), sum(documents.values())
    if mixture.mode == "undersample" and kept * BALANCE_COPIES_WARNING < given_total:
        ctx.log.warning(
            f"{asset}: mixture undersample keeps {kept:,} of {given_total:,} train documents: "
            "the source shortest of its share decides; mode: oversample (with max_copies) keeps "
            "them all"
        )
    if gone := [name for name, n in targets.items() if not n]:
        ctx.log.warning(
            f"{asset}: mixture leaves source(s) {gone} without a train document: their share "
            "is less than one document"
        )
