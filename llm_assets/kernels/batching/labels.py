"""SFT labels in sequences: the leading ids the loss masks, the learned spans inside them, and
the documents whose prompt fills what a layout keeps."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from llm_assets.kernels.batching.checks import _is_int
from llm_assets.kernels.batching.sequences import _ranges
from llm_assets.kernels.schema import learned_span_arrays

PROMPT_FILLS_SEQUENCE = "prompt_fills_sequence"
"""Reject reason of an SFT document left with no response token once cut to fit (the padded and
bucketed layouts, and the packed one with ``overflow="truncate"``): its only learned label would
be the EOS (packed) or none at all (padded: every label -100, and a batch of only such rows gives
a NaN mean loss); the EOS right after a cut-off prompt would teach the model to stop mid-prompt."""


def prompt_fills_sequence(
    lengths: Sequence[int] | np.ndarray, prompt_tokens: Sequence[int] | np.ndarray, limit: int
) -> np.ndarray:
    """Per document cut to its first ``limit`` tokens: does its prompt cover every token kept?

    True when ``prompt_tokens >= min(length, limit)``: a prompt as long as the cut, or a response
    of no tokens. ``lengths`` count what the layout keeps of a document (its EOS included when
    the layout appends one: SFT rows of the padded layouts); ``limit`` is ``seq_len`` there and
    ``seq_len - 1`` for packed documents with ``overflow="truncate"`` (their EOS follows the cut).
    Packed documents that continue in the next block lose nothing, so none is without a label."""
    if not _is_int(limit) or limit < 1:
        raise ValueError(f"limit must be an int >= 1, got {limit!r}")
    kept = np.minimum(np.asarray(lengths, dtype=np.int64), limit)
    return np.asarray(prompt_tokens, dtype=np.int64) >= kept


def masked_lead(
    prompt_tokens: Sequence[int] | np.ndarray, learned_spans: pa.Array | pa.ChunkedArray | None
) -> np.ndarray:
    """Per document, how many leading ids the loss masks: its prompt, or less when one of its
    ``learned_spans`` starts inside it (a chat's earlier answer)."""
    lead = np.array(prompt_tokens, dtype=np.int64)
    if learned_spans is not None:
        rows, starts, _ = learned_span_arrays(learned_spans)
        np.minimum.at(lead, rows, starts)
    return lead


def _span_positions(
    learned_spans: pa.Array | pa.ChunkedArray, row_starts: np.ndarray, kept: np.ndarray
) -> np.ndarray:
    """Flat positions of every document's learned spans, each document's starting at
    ``row_starts`` and cut to its first ``kept`` ids."""
    rows, starts, ends = learned_span_arrays(learned_spans)
    if len(rows) and rows[-1] >= len(row_starts):
        raise ValueError(f"learned spans for {rows[-1] + 1} documents, not {len(row_starts)}")
    ends = np.minimum(ends, kept[rows])
    starts = np.minimum(starts, ends)
    return _ranges(row_starts[rows] + starts, ends - starts)
