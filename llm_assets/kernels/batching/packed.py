"""The ``packed`` layout: documents joined with EOS into blocks of exactly ``seq_len`` tokens."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from llm_assets.kernels.batching.checks import _check_seq_len
from llm_assets.kernels.batching.labels import _span_positions
from llm_assets.kernels.batching.sequences import (
    ATTENTION_MASK,
    DOC_IDS,
    IGNORE_INDEX,
    LABELS,
    POSITION_IDS,
    PackStats,
    _list_column,
    _ranges,
    _token_dtype,
)
from llm_assets.kernels.schema import INPUT_IDS


def pack_sequences(
    token_lists: Sequence[np.ndarray],
    seq_len: int,
    eos_id: int,
    pad_id: int,
    drop_remainder: bool,
    token_type: pa.DataType,
    *,
    truncate: bool = False,
    prompt_tokens: Sequence[int] | np.ndarray | None = None,
    doc_ids: pa.Array | pa.ChunkedArray | Sequence[str] | None = None,
    learned_spans: pa.Array | pa.ChunkedArray | None = None,
) -> tuple[pa.Table, PackStats]:
    """Concatenate documents in the given order, each followed by ``eos_id``, and cut the stream
    into blocks of exactly ``seq_len`` tokens (documents may span blocks).

    The final partial block is padded with ``pad_id`` (attention mask 0), or dropped with
    ``drop_remainder`` (its tokens counted in ``dropped_tokens``). ``position_ids`` restart at 0 at
    every document start and at every block start (a document continued from the previous block
    restarts there); the padding run counts from 0 as a segment of its own, so tools that derive
    segments from ``position_ids == 0`` never join padding to the last document.

    With ``truncate`` every document is first cut to ``seq_len - 1`` tokens (``truncated_tokens``
    counts the cut; the EOS after a cut SFT document is not learned). With ``prompt_tokens`` (SFT
    rows) a ``labels`` column is added: the input ids, with -100 on each document's leading prompt
    tokens and on padding, so the loss covers responses and separators only; ``learned_spans`` (one
    list per document, :data:`~llm_assets.kernels.schema.LEARNED_SPANS`) are learned even inside the
    prompt (a chat's earlier answers). With ``doc_ids`` (one per document, in the given order) a
    :data:`DOC_IDS` column lists each block's documents.

    Token arrays must cast safely to ``token_type`` (e.g. uint16 or uint32 into uint32); the whole
    build is numpy over one flat buffer.
    """
    _check_seq_len(seq_len)
    dtype = _token_dtype(token_type, eos_id=eos_id, pad_id=pad_id)
    position_type = pa.uint16() if seq_len <= 0xFFFF else pa.uint32()
    schema = _packed_schema(
        token_type, position_type, labels=prompt_tokens is not None, doc_ids=doc_ids is not None
    )
    n_docs = len(token_lists)
    if doc_ids is not None and len(doc_ids) != n_docs:
        raise ValueError(f"{len(doc_ids)} doc_ids for {n_docs} documents")
    if n_docs == 0:
        return schema.empty_table(), PackStats()

    truncated = 0
    was_cut = np.zeros(n_docs, dtype=bool)
    if truncate:
        cut = [t[: seq_len - 1] for t in token_lists]
        was_cut = np.fromiter((len(t) >= seq_len for t in token_lists), dtype=bool, count=n_docs)
        truncated = sum(map(len, token_lists)) - sum(map(len, cut))
        token_lists = cut
    lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=n_docs)
    doc_starts = np.cumsum(lengths + 1) - (lengths + 1)
    total = int(lengths.sum()) + n_docs
    n_full, remainder = divmod(total, seq_len)
    if remainder and drop_remainder:
        n_seq, padding, dropped = n_full, 0, remainder
    else:
        n_seq, padding, dropped = n_full + (remainder > 0), (seq_len - remainder) % seq_len, 0
    size = n_seq * seq_len

    stream = np.empty(total + padding, dtype=dtype)
    parts: list[np.ndarray] = [np.array([eos_id], dtype=dtype)] * (2 * n_docs)
    parts[0::2] = token_lists
    try:
        np.concatenate(parts, out=stream[:total], casting="safe")
    except TypeError as err:
        raise ValueError(f"token arrays must cast safely to {token_type}: {err}") from None
    stream[total:] = pad_id
    input_ids = stream[:size]

    attention = np.ones(size, dtype=np.uint8)
    attention[total:] = 0

    positions = _block_positions(doc_starts, total, padding, n_seq, seq_len, position_type)

    columns = [
        _list_column(input_ids, seq_len, token_type),
        _list_column(attention, seq_len, pa.uint8()),
        _list_column(positions, seq_len, position_type),
    ]
    if prompt_tokens is not None:
        labels = _packed_labels(
            input_ids, total, prompt_tokens, doc_starts, lengths, was_cut, learned_spans
        )
        columns.append(_list_column(labels, seq_len, pa.int32()))
    if doc_ids is not None:
        columns.append(_block_documents(doc_ids, doc_starts, lengths + 1, n_seq, seq_len))
    table = pa.Table.from_arrays(columns, schema=schema)
    stats = PackStats(
        documents=n_docs,
        sequences=n_seq,
        tokens=total - dropped,
        padding_tokens=padding,
        truncated_tokens=truncated,
        dropped_tokens=dropped,
    )
    return table, stats


def _packed_schema(
    token_type: pa.DataType, position_type: pa.DataType, *, labels: bool, doc_ids: bool
) -> pa.Schema:
    """The columns of the ``packed`` layout: ``labels`` for SFT rows, :data:`DOC_IDS` when the
    documents' ids are given."""
    fields_ = [
        pa.field(INPUT_IDS, pa.list_(token_type), nullable=False),
        pa.field(ATTENTION_MASK, pa.list_(pa.uint8()), nullable=False),
        pa.field(POSITION_IDS, pa.list_(position_type), nullable=False),
    ]
    if labels:
        fields_.append(pa.field(LABELS, pa.list_(pa.int32()), nullable=False))
    if doc_ids:
        fields_.append(pa.field(DOC_IDS, pa.list_(pa.string()), nullable=False))
    return pa.schema(fields_)


def _block_positions(
    doc_starts: np.ndarray,
    total: int,
    padding: int,
    n_seq: int,
    seq_len: int,
    position_type: pa.DataType,
) -> np.ndarray:
    """The flat ``position_ids`` of ``n_seq`` blocks: 0 at every document start, block start and
    padding start, counting up from there."""
    size = n_seq * seq_len
    # Positions: column index in the block minus the column of the last segment start at or before
    # it. Mark each segment start with its column, then a running max per block row finds it.
    np_position = position_type.to_pandas_dtype()
    positions = np.zeros(size, dtype=np_position)
    segment_starts = doc_starts[doc_starts < size]
    if padding:
        segment_starts = np.append(segment_starts, total)
    positions[segment_starts] = segment_starts % seq_len
    grid = positions.reshape(n_seq, seq_len)
    np.maximum.accumulate(grid, axis=1, out=grid)
    np.subtract(np.arange(seq_len, dtype=np_position), grid, out=grid)
    return positions


def _packed_labels(
    input_ids: np.ndarray,
    total: int,
    prompt_tokens: Sequence[int] | np.ndarray,
    doc_starts: np.ndarray,
    lengths: np.ndarray,
    was_cut: np.ndarray,
    learned_spans: pa.Array | pa.ChunkedArray | None,
) -> np.ndarray:
    """The flat ``labels`` of the packed blocks (``input_ids``, whose first ``total`` values are
    the documents and their EOS): the ids, with -100 on each document's prompt (but for its
    learned spans), on padding and on the EOS after a cut document."""
    size = len(input_ids)
    labels = input_ids.astype(np.int32)
    labels[total:] = IGNORE_INDEX
    prompt = np.minimum(np.asarray(prompt_tokens, dtype=np.int64), lengths)
    masked = _ranges(doc_starts, prompt)
    labels[masked[masked < size]] = IGNORE_INDEX
    if learned_spans is not None:
        learned = _span_positions(learned_spans, doc_starts, lengths)
        learned = learned[learned < size]
        labels[learned] = input_ids[learned]
    # A cut document did not end where its EOS follows the cut: the EOS separates it from
    # the next but is not learned (it would teach to stop mid-answer, or mid-question).
    ends = (doc_starts + lengths)[was_cut]
    labels[ends[ends < size]] = IGNORE_INDEX
    return labels


def _block_documents(
    doc_ids: pa.Array | pa.ChunkedArray | Sequence[str],
    starts: np.ndarray,
    spans: np.ndarray,
    n_seq: int,
    seq_len: int,
) -> pa.Array:
    """The :data:`DOC_IDS` column: for each of ``n_seq`` blocks, the documents whose stream span
    ``[start, start + span)`` (tokens and EOS) meets it. Documents are contiguous in the stream,
    so a block's documents are one run of them: the first whose span ends after the block starts
    to the last that starts before it ends."""
    block_starts = np.arange(n_seq, dtype=np.int64) * seq_len
    first = np.searchsorted(starts + spans, block_starts, side="right")
    last = np.searchsorted(starts, block_starts + seq_len, side="left")
    counts = last - first
    offsets = np.zeros(n_seq + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    if isinstance(doc_ids, pa.ChunkedArray):
        doc_ids = doc_ids.combine_chunks()
    names = doc_ids if isinstance(doc_ids, pa.Array) else pa.array(doc_ids, pa.string())
    values = names.cast(pa.string()).take(pa.array(_ranges(first, counts)))
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values)
