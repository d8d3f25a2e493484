"""The ``padded`` layout (and the rows of ``bucketed``): one document per sequence, padded."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from llm_assets.kernels.batching.checks import _check_seq_len
from llm_assets.kernels.batching.labels import _span_positions
from llm_assets.kernels.batching.sequences import (
    ATTENTION_MASK,
    IGNORE_INDEX,
    LABELS,
    PackStats,
    _ragged_column,
    _ranges,
    _token_dtype,
)
from llm_assets.kernels.schema import DOC_ID, INPUT_IDS, N_TOKENS


def pad_sequences(
    token_lists: Sequence[np.ndarray],
    doc_ids: Sequence[str],
    seq_len: int,
    pad_id: int,
    token_type: pa.DataType,
    *,
    targets: Sequence[int] | np.ndarray | None = None,
    prompt_tokens: Sequence[int] | np.ndarray | None = None,
    extra_columns: dict[str, pa.Array] | None = None,
    eos_id: int | None = None,
    learned_spans: pa.Array | pa.ChunkedArray | None = None,
) -> tuple[pa.Table, PackStats]:
    """One document per sequence: truncated to ``seq_len`` (``truncated_tokens`` counts the cut),
    padded with ``pad_id`` to ``seq_len`` or, when given, to each row's ``targets`` length (which
    must be at least the row's kept tokens and at most ``seq_len``). ``labels`` are the input ids
    with -100 on padding and on the first ``prompt_tokens`` of each row (SFT: the loss covers the
    response only) but for its ``learned_spans`` (a chat's earlier answers, as in
    :func:`pack_sequences`); ``n_tokens`` counts the real tokens kept. With ``eos_id`` every
    document is followed by it before the cut, a real and learned token (SFT: the model learns where
    a response ends; a response cut by ``seq_len`` loses it, as it did not end there); without, no
    separator is added. ``extra_columns`` (e.g. ``label``, ``length_bucket``) are appended as they
    are."""
    _check_seq_len(seq_len)
    dtype = _token_dtype(
        token_type, pad_id=pad_id, **({} if eos_id is None else {"eos_id": eos_id})
    )
    if eos_id is not None:
        eos = np.array([eos_id], dtype=dtype)
        token_lists = [np.concatenate((t, eos.astype(t.dtype, copy=False))) for t in token_lists]
    fields_ = [
        pa.field(DOC_ID, pa.string(), nullable=False),
        pa.field(INPUT_IDS, pa.list_(token_type), nullable=False),
        pa.field(ATTENTION_MASK, pa.list_(pa.uint8()), nullable=False),
        pa.field(LABELS, pa.list_(pa.int32()), nullable=False),
        pa.field(N_TOKENS, pa.int32(), nullable=False),
    ]
    extra_columns = extra_columns or {}
    fields_ += [pa.field(name, column.type) for name, column in extra_columns.items()]
    schema = pa.schema(fields_)
    n_docs = len(token_lists)
    if len(doc_ids) != n_docs:
        raise ValueError(f"{n_docs} token lists but {len(doc_ids)} doc_ids")
    if n_docs == 0:
        return schema.empty_table(), PackStats()

    lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=n_docs)
    kept = np.minimum(lengths, seq_len)
    if targets is None:
        widths = np.full(n_docs, seq_len, dtype=np.int64)
    else:
        widths = np.asarray(targets, dtype=np.int64)
        if len(widths) != n_docs or (widths < kept).any() or (widths > seq_len).any():
            raise ValueError("targets must give each row a length in [its tokens, seq_len]")
    row_starts = np.concatenate([[0], np.cumsum(widths)])
    size = int(row_starts[-1])
    real_positions = _ranges(row_starts[:-1], kept)
    input_ids = np.full(size, pad_id, dtype=dtype)
    try:
        input_ids[real_positions] = np.concatenate(
            [t[:seq_len] for t in token_lists], dtype=dtype, casting="safe"
        )
    except TypeError as err:
        raise ValueError(f"token arrays must cast safely to {token_type}: {err}") from None
    attention = np.zeros(size, dtype=np.uint8)
    attention[real_positions] = 1
    labels = np.full(size, IGNORE_INDEX, dtype=np.int32)
    labels[real_positions] = input_ids[real_positions]
    if prompt_tokens is not None:
        prompt = np.minimum(np.asarray(prompt_tokens, dtype=np.int64), kept)
        labels[_ranges(row_starts[:-1], prompt)] = IGNORE_INDEX
        if learned_spans is not None:
            learned = _span_positions(learned_spans, row_starts[:-1], kept)
            labels[learned] = input_ids[learned]

    offsets = row_starts.astype(np.int64)
    columns = [
        pa.array(doc_ids, pa.string()),
        _ragged_column(input_ids, offsets, token_type),
        _ragged_column(attention, offsets, pa.uint8()),
        _ragged_column(labels, offsets, pa.int32()),
        pa.array(kept.astype(np.int32), pa.int32()),
        *extra_columns.values(),
    ]
    table = pa.Table.from_arrays(columns, schema=schema)
    n_kept = int(kept.sum())
    stats = PackStats(
        documents=n_docs,
        sequences=n_docs,
        tokens=n_kept,
        padding_tokens=size - n_kept,
        truncated_tokens=int(lengths.sum()) - n_kept,
    )
    return table, stats


def longest_in_batch(lengths: np.ndarray, seq_len: int, batch_size: int) -> np.ndarray:
    """Per row, the padded length for ``pad_to="longest"``: the longest (truncated) row of its
    group of ``batch_size`` consecutive rows."""
    kept = np.minimum(np.asarray(lengths, dtype=np.int64), seq_len)
    if len(kept) == 0:
        return kept
    groups = np.arange(len(kept)) // batch_size
    longest = np.maximum.reduceat(kept, np.arange(0, len(kept), batch_size))
    return np.maximum(longest[groups], 1)
