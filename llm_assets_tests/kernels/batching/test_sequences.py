"""What every layout builds: empty input, and the counts of a run."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from llm_assets.kernels.batching.packed import pack_sequences
from llm_assets.kernels.batching.padded import pad_sequences
from llm_assets.kernels.batching.sequences import PackStats


def test_empty_input_gives_an_empty_table_with_the_schema_and_zero_stats():
    packed, packed_stats = pack_sequences([], 8, 0, 0, False, pa.uint16())
    full, _ = pack_sequences([np.array([1], dtype=np.uint16)], 8, 0, 0, False, pa.uint16())
    assert packed.num_rows == 0 and packed.schema == full.schema
    padded, padded_stats = pad_sequences([], [], 8, 0, pa.uint32())
    assert padded.num_rows == 0 and padded.schema.field("input_ids").type == pa.list_(pa.uint32())
    assert packed_stats == padded_stats == PackStats()
    assert packed_stats.padding_fraction() == 0.0


def test_pack_stats_merge_fraction_and_dict():
    a = PackStats(documents=2, sequences=1, tokens=6, padding_tokens=2)
    b = PackStats(documents=1, sequences=1, tokens=8, truncated_tokens=3, dropped_tokens=1)
    merged = a.merge(b)
    assert merged == PackStats(3, 2, 14, 2, 3, 1)
    assert merged.padding_fraction() == pytest.approx(2 / 16)
    assert merged.as_dict() == {
        "documents": 3,
        "sequences": 2,
        "tokens": 14,
        "padding_tokens": 2,
        "truncated_tokens": 3,
        "dropped_tokens": 1,
    }
