"""The shuffle's second phase: the sequences of one (split, bucket), built from every scatter
folder (balanced, mixed and augmented on the train split), packed or padded into one file."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llm_assets import storage
from llm_assets.constants import TRAINING_BATCHES
from llm_assets.kernels.batching.bucketing import bucket_layout
from llm_assets.kernels.batching.labels import (
    PROMPT_FILLS_SEQUENCE,
    masked_lead,
    prompt_fills_sequence,
)
from llm_assets.kernels.batching.packed import pack_sequences
from llm_assets.kernels.batching.padded import longest_in_batch, pad_sequences
from llm_assets.kernels.batching.sequences import AUGMENTED, BATCH, LENGTH_BUCKET, PackStats
from llm_assets.kernels.batching.shuffle import shuffle_order
from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.mixing.augment import eda_variants
from llm_assets.kernels.mixing.balance import UNDERSAMPLED, LabelQuota, balance_order
from llm_assets.kernels.mixing.mixture import MIXED_OUT, MixtureSpec
from llm_assets.kernels.schema import (
    DOC_ID,
    INPUT_IDS,
    LABEL,
    LEARNED_SPANS,
    PROMPT_TOKENS,
    REASON,
    REJECT_SCHEMA,
    SOURCE_FILE,
    SOURCE_LINE,
    TEXT,
    empty_rejects,
    rejects_table,
)
from llm_assets.stages.shard_io import PartTimes, ShardStats
from llm_assets.stages.training_batches.scatter import (
    ScatterPiece,
    label_counts,
    read_scatter_pieces,
)
from llm_assets.warehouse.shards import (
    INPUT_FINGERPRINT,
    ROWS_IN,
    ROWS_REJECTED,
    STATS,
    AtomicParquetWriter,
)

if TYPE_CHECKING:  # a task with a tokenizer imports it when unpickled: the others never need it
    from llm_assets.kernels.tokenize.spec import TokenizerSpec


@dataclass(frozen=True)
class GatherTask:
    """Build the sequences of one (split, bucket) from every scatter folder."""

    key: str
    split: str
    bucket: int
    pieces: tuple[ScatterPiece, ...]
    """Where the bucket's batch lies in each scatter file that has one (:func:`scatter_pieces`)."""
    output_path: str
    input_fingerprint: str
    spec: BatchSpec
    eos_id: int | None
    """None for a tokenizer without EOS (only layouts that add none: see ``_eos_id``)."""
    pad_id: int
    token_type: str
    metadata: tuple[tuple[str, str], ...] = ()
    compression_level: int | None = None
    rejects_path: str | None = None
    """Where the documents the layout cannot use go (:func:`untrainable_rejects`), if any."""
    balance: tuple[LabelQuota, ...] = ()
    """A train bucket's class quotas (``spec.balance``; :func:`~llm_assets.kernels.batching.
    balance_quotas`); empty: every document once."""
    repeat: int = 1
    """Each document this many times as often (a train bucket's ``augment_copies + 1``)."""
    tokenizer: TokenizerSpec | None = None
    """``augment``, train buckets: the tokenizer of the documents' ids, which encodes the
    variants of their copies (:func:`augmented`)."""


def _sft_eos(table: pa.Table, spec: BatchSpec) -> bool:
    """Whether the layout appends EOS to each document: SFT rows (a prompt before the text) in
    the layouts of one document per sequence, so the model learns where a response ends (packed
    documents are EOS-separated already)."""
    return PROMPT_TOKENS in table.column_names and spec.layout != "packed"


def untrainable_rejects(
    table: pa.Table, order: np.ndarray, spec: BatchSpec
) -> tuple[np.ndarray, pa.Table]:
    """Split shuffle ``order`` into the documents the layout uses and the rejects of those it
    cannot: SFT documents left with no response token once cut to fit (padded and bucketed
    layouts, and packed with ``overflow="truncate"``;
    :func:`~llm_assets.kernels.batching.prompt_fills_sequence`). Every other document is used."""
    checked = _untrainable(table, spec)
    if checked is None:
        return order, empty_rejects()
    bad_rows, lengths, prompts, limit = checked
    bad = bad_rows[order]
    if not bad.any():
        return order, empty_rejects()
    dropped = pa.array(order[bad])
    whole = table[PROMPT_TOKENS].to_numpy()[order][bad]
    leads = prompts[order][bad]
    kept_tokens = np.minimum(lengths[order][bad], limit)
    rejects = rejects_table(
        doc_ids=table[DOC_ID].take(dropped).to_pylist(),
        source_files=table[SOURCE_FILE].take(dropped).to_pylist(),
        source_lines=table[SOURCE_LINE].take(dropped).to_pylist(),
        stage=TRAINING_BATCHES,
        reasons=[PROMPT_FILLS_SEQUENCE] * int(bad.sum()),
        values=[
            f"prompt {p} of {n} tokens kept (seq_len {spec.seq_len})"
            if p == w
            else f"first answer at token {p}, {n} tokens kept (seq_len {spec.seq_len})"
            for p, w, n in zip(leads.tolist(), whole.tolist(), kept_tokens.tolist(), strict=True)
        ],
    )
    return order[~bad], rejects


def _untrainable(
    table: pa.Table, spec: BatchSpec
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
    """Per row of ``table`` (in its own order): whether the layout cannot use it
    (:func:`untrainable_rejects`), with the lengths, masked leads and limit that decided; None
    when no row can be such (no prompts, or a layout that cuts no document)."""
    truncating = spec.layout != "packed" or spec.overflow == "truncate"
    if PROMPT_TOKENS not in table.column_names or not truncating:
        return None
    lengths = pc.list_value_length(table[INPUT_IDS]).to_numpy(zero_copy_only=False)
    lengths = lengths + 1 if _sft_eos(table, spec) else lengths
    limit = spec.seq_len if spec.layout != "packed" else spec.seq_len - 1
    prompts = masked_lead(table[PROMPT_TOKENS].to_numpy(), _learned_spans(table))
    return prompt_fills_sequence(lengths, prompts, limit), lengths, prompts, limit


def trainable(table: pa.Table, spec: BatchSpec) -> pa.Table:
    """The documents of ``table`` that the layout of ``spec`` uses: those that are not
    :func:`untrainable_rejects`. What ``balance`` and ``mixture`` count, so that the classes are
    even, and the sources in proportion, in the batches, not before the rejects."""
    checked = _untrainable(table, spec)
    return table if checked is None else table.filter(pa.array(~checked[0]))


def trainable_label_counts(table: pa.Table, spec: BatchSpec) -> dict[str, int]:
    """Documents per class label of ``table`` that the layout of ``spec`` uses
    (:func:`trainable`)."""
    return label_counts(trainable(table, spec)[LABEL])


def balanced(
    table: pa.Table, order: np.ndarray, task: GatherTask
) -> tuple[np.ndarray, np.ndarray, pa.Table]:
    """Shuffle ``order`` with the classes evened out by ``task.balance`` and every document
    ``task.repeat`` times (:func:`~llm_assets.kernels.batching.balance_order`): the new order, the
    copy number of each of its places (0: the document itself), and the rejects of the
    documents left out (:data:`~llm_assets.kernels.batching.UNDERSAMPLED`), valued with their
    class's count."""
    mixture = task.spec.mixture
    if not task.balance:
        labels = None
    elif mixture is not None:
        labels = mixture.sources_of(table[SOURCE_FILE].to_pylist())
    else:
        labels = table[LABEL].to_pylist()
    order, left_out, copies = balance_order(
        order, labels, task.balance, table[DOC_ID].to_pylist(), task.spec.seed, task.repeat
    )
    if not len(left_out):
        return order, copies, empty_rejects()
    quotas = {q.label: q for q in task.balance}
    dropped = pa.array(left_out)
    if mixture is not None:
        shares = mixture.shares
        reason = MIXED_OUT
        values = [
            f"source {label!r}: {quotas[label].target:,} of its {quotas[label].documents:,} "
            f"train documents kept (mixture: undersample by {mixture.by}, share "
            f"{shares[label]:.1%})"
            for label in (labels[i] for i in left_out.tolist())
        ]
    else:
        reason = UNDERSAMPLED
        values = [
            f"class {label!r}: {quotas[label].target:,} of its "
            f"{quotas[label].documents:,} train documents kept (balance: undersample)"
            for label in (labels[i] for i in left_out.tolist())
        ]
    return (
        order,
        copies,
        rejects_table(
            doc_ids=table[DOC_ID].take(dropped).to_pylist(),
            source_files=table[SOURCE_FILE].take(dropped).to_pylist(),
            source_lines=table[SOURCE_LINE].take(dropped).to_pylist(),
            stage=TRAINING_BATCHES,
            reasons=[reason] * len(left_out),
            values=values,
        ),
    )


MIXTURE_DOCUMENTS = "mixture_documents:"
"""Prefix of a train batch file's statistic: the documents (copies counted) of one source of the
mixture it holds (``mixture_documents:<source>``); ``mixture_tokens:`` their tokens."""


MIXTURE_TOKENS = "mixture_tokens:"


def mixture_stats(table: pa.Table, order: np.ndarray, mixture: MixtureSpec) -> dict[str, int]:
    """The documents and tokens of each source of ``mixture`` that ``order`` (indices into
    ``table``, a document as often as it is held) gives the layout: what the batches hold of
    each source, before the layout cuts or pads anything."""
    taken = pa.array(order, pa.int64())
    names = mixture.sources_of(table[SOURCE_FILE].take(taken).to_pylist())
    lengths = pc.list_value_length(table[INPUT_IDS].take(taken)).to_numpy(zero_copy_only=False)
    documents: Counter[str] = Counter()
    tokens: Counter[str] = Counter()
    for name, n in zip(names, lengths.tolist(), strict=True):
        documents[str(name)] += 1
        tokens[str(name)] += int(n)
    stats = {f"{MIXTURE_DOCUMENTS}{name}": documents[name] for name in sorted(documents)}
    stats.update({f"{MIXTURE_TOKENS}{name}": tokens[name] for name in sorted(tokens)})
    return stats


def augmented(
    table: pa.Table, order: np.ndarray, copies: np.ndarray, task: GatherTask
) -> tuple[pa.Table, np.ndarray, dict[str, int]]:
    """``spec.augment``: the copies in ``order`` (``copies`` > 0) made variants of their
    documents (:func:`~llm_assets.kernels.augment.eda_variants`, encoded by ``task.tokenizer``), as
    rows appended to ``table`` that ``order`` now points to, and how many variants each edit
    made (``augmented``, ``augmented_<edit>``; ``augmented_unchanged``: a document too short for
    its edit, left as it is). Every row gets the :data:`~llm_assets.kernels.batching.AUGMENTED`
    flag, so each batch file of the folder has the column."""
    n = table.num_rows
    flagged = table.append_column(AUGMENTED, pa.array(np.zeros(n, bool)))
    at = np.flatnonzero(copies > 0)
    if task.tokenizer is None or not len(at):
        return flagged, order, {}
    sources = pa.array(order[at])
    copied = table.take(sources)
    variants = eda_variants(
        copied[TEXT].to_pylist(),
        copied[DOC_ID].to_pylist(),
        copies[at].tolist(),
        task.spec.seed,
        task.spec.augment_rate,
    )
    texts = pa.array([v.text for v in variants], pa.string())
    ids, _ = task.tokenizer.build().encode_arrow(texts)
    ids_field = table.schema.field(INPUT_IDS)
    copied = copied.set_column(
        copied.schema.get_field_index(INPUT_IDS), ids_field, ids.cast(ids_field.type)
    )
    copied = copied.set_column(copied.schema.get_field_index(TEXT), table.schema.field(TEXT), texts)
    copied = copied.append_column(AUGMENTED, pa.array(np.ones(len(at), bool)))
    order = order.copy()
    order[at] = n + np.arange(len(at))
    edits = Counter(v.edit or "unchanged" for v in variants)
    stats = {"augmented": len(at), **{f"augmented_{e}": k for e, k in sorted(edits.items())}}
    return pa.concat_tables([flagged, copied]), order, stats


def build_sequences(
    table: pa.Table, order: np.ndarray, task: GatherTask, token_type: pa.DataType
) -> tuple[pa.Table, PackStats]:
    """The layout of ``task.spec`` applied to one bucket's documents, in shuffle ``order``."""
    spec = task.spec
    ids = table[INPUT_IDS].combine_chunks()
    values = ids.values.to_numpy(zero_copy_only=False)
    offsets = ids.offsets.to_numpy()
    lengths = (offsets[1:] - offsets[:-1])[order]
    prompts = (
        table[PROMPT_TOKENS].to_numpy()[order] if PROMPT_TOKENS in table.column_names else None
    )
    spans = _learned_spans(table)
    spans = None if spans is None else spans.take(pa.array(order))
    labels = table[LABEL].take(pa.array(order)) if LABEL in table.column_names else None
    flags = table[AUGMENTED].take(pa.array(order)) if AUGMENTED in table.column_names else None
    ordered_ids = table[DOC_ID].take(pa.array(order))
    if spec.layout == "packed":
        if task.eos_id is None:
            raise ValueError("the packed layout needs an EOS id")
        token_lists = [values[offsets[i] : offsets[i + 1]] for i in order]
        return pack_sequences(
            token_lists,
            spec.seq_len,
            task.eos_id,
            task.pad_id,
            spec.drop_remainder,
            token_type,
            truncate=spec.overflow == "truncate",
            prompt_tokens=prompts,
            doc_ids=ordered_ids,
            learned_spans=spans,
        )
    doc_ids = ordered_ids.to_pylist()
    eos_id = task.eos_id if _sft_eos(table, spec) else None
    if _sft_eos(table, spec):
        if eos_id is None:
            raise ValueError("SFT rows in the padded layouts need an EOS id")
        lengths = lengths + 1
    extra: dict[str, pa.Array] = {}
    if spec.layout == "bucketed":
        boundaries = spec.bucket_boundaries or (spec.seq_len,)
        within, targets, buckets, batches = bucket_layout(
            lengths,
            boundaries,
            spec.seq_len,
            spec.batch_size,
            spec.seed,
            f"{task.split}:{task.bucket}",
        )
        order = order[within]
        doc_ids = [doc_ids[i] for i in within]
        prompts = None if prompts is None else prompts[within]
        spans = None if spans is None else spans.take(pa.array(within))
        labels = None if labels is None else labels.take(pa.array(within))
        flags = None if flags is None else flags.take(pa.array(within))
        extra[LENGTH_BUCKET] = pa.array(buckets, pa.int32())
        extra[BATCH] = pa.array(batches, pa.int32())
    elif spec.pad_to == "longest":
        targets = longest_in_batch(lengths, spec.seq_len, spec.batch_size)
        extra[BATCH] = pa.array(np.arange(len(order)) // spec.batch_size, pa.int32())
    else:
        targets = None
    if flags is not None:
        extra = {AUGMENTED: flags.combine_chunks(), **extra}
    if labels is not None:
        extra = {LABEL: labels.combine_chunks(), **extra}
    token_lists = [values[offsets[i] : offsets[i + 1]] for i in order]
    return pad_sequences(
        token_lists,
        doc_ids,
        spec.seq_len,
        task.pad_id,
        token_type,
        targets=targets,
        prompt_tokens=prompts,
        extra_columns=extra,
        eos_id=eos_id,
        learned_spans=spans,
    )


def _learned_spans(table: pa.Table) -> pa.Array | None:
    """The chat rows' :data:`~llm_assets.kernels.schema.LEARNED_SPANS`, None for other rows."""
    if LEARNED_SPANS not in table.column_names:
        return None
    return table[LEARNED_SPANS].combine_chunks()


def run_gather(task: GatherTask) -> ShardStats:
    """Worker side of the second batching phase: order by shuffle key, then pack or pad."""
    started = time.perf_counter()
    parts = PartTimes()
    with parts.part("read"):
        table = read_scatter_pieces(task.pieces)
    token_type = getattr(pa, task.token_type)()
    if table is None:
        table = pa.table(
            {
                DOC_ID: pa.array([], pa.string()),
                INPUT_IDS: pa.array([], pa.list_(token_type)),
                "shuffle_key": pa.array([], pa.uint64()),
            }
        )
    with parts.part("compute"):
        doc_ids = table[DOC_ID].to_pylist()
        order = shuffle_order(table["shuffle_key"].to_numpy(), doc_ids)
        order, rejected = untrainable_rejects(table, order, task.spec)
        copies = np.zeros(len(order), np.int64)
        if task.balance or task.repeat > 1:
            order, copies, undersampled = balanced(table, order, task)
            rejected = pa.concat_tables([rejected, undersampled])
        augment_stats: dict[str, int] = {}
        if task.spec.augment != "none":
            table, order, augment_stats = augmented(table, order, copies, task)
        if task.spec.mixture is not None and task.split == "train":
            augment_stats.update(mixture_stats(table, order, task.spec.mixture))
        sequences, stats = build_sequences(table, order, task, token_type)
    if rejected.num_rows and task.rejects_path is None:
        raise ValueError(f"{task.key}: {rejected.num_rows} rejects but no rejects_path")
    with parts.part("write"):
        writer = AtomicParquetWriter(
            task.output_path,
            sequences.schema,
            metadata=dict(task.metadata),
            compression_level=task.compression_level,
            row_group_rows=1024,
        )
    rejects: AtomicParquetWriter | None = None
    try:
        with parts.part("write"):
            writer.write(sequences)
            if rejected.num_rows:
                rejects = AtomicParquetWriter(str(task.rejects_path), REJECT_SCHEMA)
                rejects.write(rejected)
        with parts.part("commit"):
            # Rejects first, as in every stage: the batch file's existence marks the task done.
            if rejects is not None:
                written_rejects: str | None = rejects.commit().path
            else:
                written_rejects = None
                if task.rejects_path is not None and not storage.is_remote(task.rejects_path):
                    # Left by an earlier, killed attempt (in a bucket, unrecorded: never read).
                    storage.remove(task.rejects_path)
            written = writer.commit(
                {
                    INPUT_FINGERPRINT: task.input_fingerprint,
                    ROWS_IN: str(len(doc_ids)),
                    ROWS_REJECTED: str(rejected.num_rows),
                    STATS: json.dumps({**stats.as_dict(), **augment_stats}, sort_keys=True),
                }
            )
    except BaseException:
        if rejects is not None:
            rejects.abort()
        writer.abort()
        raise
    return ShardStats(
        shard=task.key,
        path=written.path,
        rejects_path=written_rejects,
        rows_in=len(doc_ids),
        rows_out=sequences.num_rows,
        rows_rejected=rejected.num_rows,
        bytes=written.bytes,
        checksum=written.checksum,
        seconds=time.perf_counter() - started,
        reject_reasons=dict(Counter(rejected[REASON].to_pylist())),
        extra={**stats.as_dict(), **augment_stats},
        parts=parts.as_dict(),
    )
