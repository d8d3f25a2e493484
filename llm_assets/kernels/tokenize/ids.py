"""Token ids as Arrow list columns: the vocabulary's dtype, and GPT-2's encoding of a batch
word by word (each distinct word encoded once)."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from llm_assets.kernels.schema import single_spaced

if TYPE_CHECKING:
    from llm_assets.kernels.tokenize.tokenizer import Tokenizer


def token_dtype(vocab_size: int) -> pa.DataType:
    """The narrowest Arrow integer type that holds every id of the vocabulary (``vocab_size``:
    its highest id + 1)."""
    return pa.uint16() if vocab_size <= 65536 else pa.int32()


GATHER_WINDOW = 1 << 20
"""Pieces whose ids :func:`_encode_by_words` gathers at a time: its index arrays take ~32 bytes a
piece, so one 60 MB document of words (12M pieces) would need ~400 MB of them at once."""


def ids_to_arrow(ids: list[list[int]], vocab_size: int) -> tuple[pa.Array, pa.Array]:
    """Token id lists as an Arrow list column of the vocabulary's dtype, plus int32 counts."""
    counts = np.fromiter(map(len, ids), dtype=np.int32, count=len(ids))
    dtype = token_dtype(vocab_size)
    flat = np.fromiter(
        itertools.chain.from_iterable(ids), dtype=dtype.to_pandas_dtype(), count=int(counts.sum())
    )
    return _lists(flat, counts, dtype), pa.array(counts, pa.int32())


def _lists(flat: np.ndarray, counts: np.ndarray, dtype: pa.DataType) -> pa.Array:
    return _lists_from(pa.array(flat, type=dtype), counts)


def _encode_by_words(tok: Tokenizer, texts: pa.StringArray) -> tuple[pa.Array, pa.Array]:
    """:meth:`Tokenizer.encode_arrow` for tokenizers whose ids split at single spaces: each
    distinct piece of the batch (a word, with its leading space unless it starts the row) is
    encoded once and the rows are gathered from those ids. Rows with any other whitespace are
    encoded whole."""
    dtype = token_dtype(tok.vocab_size)
    if len(texts) == 0:
        return _lists(np.zeros(0, dtype.to_pandas_dtype()), np.zeros(0, np.int32), dtype), pa.array(
            [], pa.int32()
        )
    simple = single_spaced(texts)
    if not simple.any():
        return ids_to_arrow(tok.encode_batch(texts.to_pylist()), tok.vocab_size)
    if not simple.all():
        fast_rows, whole_rows = np.flatnonzero(simple), np.flatnonzero(~simple)
        fast = _encode_by_words(tok, texts.take(pa.array(fast_rows)))
        whole = tok.encode_batch(texts.take(pa.array(whole_rows)).to_pylist())
        rest = ids_to_arrow(whole, tok.vocab_size)
        order = pa.array(np.argsort(np.concatenate([fast_rows, whole_rows]), kind="stable"))
        lists = pa.concat_arrays([fast[0], rest[0]]).take(order)
        return lists, pa.concat_arrays([fast[1], rest[1]]).take(order)
    pieces, first_piece = _space_pieces(texts)
    encoded = pieces.dictionary_encode()
    del pieces
    piece_ids = tok.encode_batch(encoded.dictionary.to_pylist())
    piece_counts = np.fromiter(map(len, piece_ids), dtype=np.int32, count=len(piece_ids))
    flat_ids = np.fromiter(
        itertools.chain.from_iterable(piece_ids),
        dtype=dtype.to_pandas_dtype(),
        count=int(piece_counts.sum(dtype=np.int64)),
    )
    del piece_ids
    piece_starts = np.zeros(len(piece_counts) + 1, dtype=np.int64)
    np.cumsum(piece_counts, out=piece_starts[1:])
    which = encoded.indices.to_numpy()
    occurrences = np.bincount(which, minlength=len(piece_counts))
    total = int(occurrences @ piece_counts.astype(np.int64))
    # Where each piece's ids end in the output: int32 unless the batch has 2**31 ids or more.
    ends = np.zeros(len(which) + 1, dtype=np.int32 if total < 2**31 else np.int64)
    ids = np.empty(total, dtype=flat_ids.dtype)
    # Every piece of the batch, in order, replaced by its distinct piece's ids: a gather of
    # flat_ids (each occurrence's run of ids is its piece's run, shifted to its output place),
    # a window of pieces at a time so that its index arrays stay small whatever the batch holds.
    for first in range(0, len(which), GATHER_WINDOW):
        last = min(first + GATHER_WINDOW, len(which))
        counts = piece_counts[which[first:last]]
        np.cumsum(counts, out=ends[first + 1 : last + 1])
        ends[first + 1 : last + 1] += ends[first]
        start, end = int(ends[first]), int(ends[last])
        shift = piece_starts[which[first:last]] - (ends[first:last] - start)
        gather = np.repeat(shift, counts)
        gather += np.arange(end - start, dtype=np.int64)
        ids[start:end] = flat_ids[gather]
    row_counts = (ends[first_piece[1:]] - ends[first_piece[:-1]]).astype(np.int32)
    return _lists(ids, row_counts, dtype), pa.array(row_counts, pa.int32())


def _space_pieces(texts: pa.StringArray) -> tuple[pa.Array, np.ndarray]:
    """The pieces GPT-2's pre-tokenizer starts at single spaces, for rows of
    :func:`single_spaced` text: each row's first word, then every later word with its leading
    space. Returned as one string array over ``texts``' own bytes (no copy: new offsets only),
    with each row's first piece index (``len(texts) + 1`` entries; an empty row has none)."""
    wide = pa.types.is_large_string(texts.type)
    offset_type = np.int64 if wide else np.int32
    offsets = np.frombuffer(texts.buffers()[1], dtype=offset_type)
    offsets = offsets[texts.offset : texts.offset + len(texts) + 1].astype(np.int64)
    base = int(offsets[0])
    relative = offsets - base
    size = int(relative[-1])
    data = np.frombuffer(texts.buffers()[2] or b"", dtype=np.uint8)[base : base + size]
    # A piece starts at every space and at every row's start; the batch's end closes the last.
    starts = np.empty(size + 1, dtype=bool)
    np.equal(data, 0x20, out=starts[:size])
    starts[relative[:-1]] = True
    starts[size] = True
    bounds = np.flatnonzero(starts)
    del starts  # as many bytes as the text: freed before the offsets are made
    first_piece = np.searchsorted(bounds, relative)
    bounds += base
    piece_offsets = pa.py_buffer(bounds.astype(offset_type, copy=False))
    pieces = pa.Array.from_buffers(
        texts.type, len(bounds) - 1, [None, piece_offsets, texts.buffers()[2]]
    )
    return pieces, first_piece


def _lists_from(values: pa.Array, counts: np.ndarray) -> pa.Array:
    offsets = np.zeros(len(counts) + 1, dtype=np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.ListArray.from_arrays(pa.array(offsets), values)
