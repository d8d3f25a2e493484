"""What every layout builds: the batch columns, list columns from flat numpy buffers, and the
counts of a run (:class:`PackStats`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import numpy as np
import pyarrow as pa

from llm_assets.kernels.batching.checks import _is_int

LENGTH_BUCKET = "length_bucket"
BATCH = "batch"
"""Column of the layouts that pad per batch (``bucketed``; ``padded`` with ``pad_to="longest"``):
the row's batch number within its file; consecutive rows with one number are one batch."""

ATTENTION_MASK = "attention_mask"
POSITION_IDS = "position_ids"
LABELS = "labels"
AUGMENTED = "augmented"
"""Batch column of a folder written with ``augment``: True for a row that is a variant of its
document (:mod:`llm_assets.kernels.mixing.augment`), False for the document itself."""
DOC_IDS = "doc_ids"
"""Column of the ``packed`` layout: the ``doc_id`` of every document with tokens in the block (its
EOS counts), in order; a document continued from the block before comes first. The block's
lineage: joinable to ``filtered_documents`` and, through it, to the source file and line."""
IGNORE_INDEX = -100
"""Label of padding positions: the index PyTorch's cross-entropy ignores by default."""
_MAX_LIST_VALUES = 2**31 - 1
"""Values one Arrow ``list`` array can address with int32 offsets; longer columns get chunks."""


@dataclass
class PackStats:
    """Additive counts of one packing or padding run (per file; :meth:`merge` sums them).

    ``tokens`` are the real tokens in the output, separators included; ``tokens + padding_tokens
    == sequences * seq_len`` always holds. ``truncated_tokens`` (padded layout) and
    ``dropped_tokens`` (packed with ``drop_remainder``) were given but are not in the output.
    """

    documents: int = 0
    sequences: int = 0
    tokens: int = 0
    padding_tokens: int = 0
    truncated_tokens: int = 0
    dropped_tokens: int = 0

    def merge(self, other: PackStats) -> PackStats:
        """A new PackStats with every count summed."""
        return PackStats(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )

    def padding_fraction(self) -> float:
        """Share of output positions that are padding: ``padding / (sequences * seq_len)``,
        computed as ``padding / (tokens + padding)`` (the same number); 0 when empty."""
        total = self.tokens + self.padding_tokens
        return self.padding_tokens / total if total else 0.0

    def as_dict(self) -> dict[str, int]:
        """The counts as plain ints (JSON-ready and additive, for the shard footer)."""
        return {k: int(v) for k, v in asdict(self).items()}


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(start, start + count)`` for every pair, without a Python loop."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    begins = np.repeat(np.asarray(starts, dtype=np.int64) - (np.cumsum(counts) - counts), counts)
    return begins + np.arange(total, dtype=np.int64)


def _ragged_column(values: np.ndarray, offsets: np.ndarray, value_type: pa.DataType) -> pa.Array:
    """A list column with the given int64 row offsets (rows of different lengths)."""
    if offsets[-1] <= _MAX_LIST_VALUES:
        return pa.ListArray.from_arrays(
            pa.array(offsets.astype(np.int32)), pa.array(values, value_type)
        )
    return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values, value_type)).cast(
        pa.list_(value_type)
    )


def _token_dtype(token_type: pa.DataType, **ids: int) -> np.dtype:
    """The numpy dtype of ``token_type``, after checking it is an integer type that can hold
    every special id given (by name, for the error message)."""
    if not pa.types.is_integer(token_type):
        raise ValueError(f"token_type must be an Arrow integer type, got {token_type}")
    dtype = np.dtype(token_type.to_pandas_dtype())
    bounds = np.iinfo(dtype)
    for name, value in ids.items():
        if not _is_int(value) or not bounds.min <= value <= bounds.max:
            raise ValueError(f"{name} must be an int that fits {token_type}, got {value!r}")
    return dtype


def _list_column(values: np.ndarray, width: int, value_type: pa.DataType) -> pa.ChunkedArray:
    """Rows of ``width`` consecutive values as ``list<value_type>``: a zero-copy view of
    ``values`` plus int32 offsets, in as many chunks as int32 offsets need."""
    rows_per_chunk = _MAX_LIST_VALUES // width
    n_rows = len(values) // width
    chunks = []
    for first in range(0, n_rows, rows_per_chunk):
        rows = min(rows_per_chunk, n_rows - first)
        offsets = pa.array(np.arange(rows + 1, dtype=np.int32) * np.int32(width))
        flat = pa.array(values[first * width : (first + rows) * width], type=value_type)
        chunks.append(pa.ListArray.from_arrays(offsets, flat))
    return pa.chunked_array(chunks, type=pa.list_(value_type))
