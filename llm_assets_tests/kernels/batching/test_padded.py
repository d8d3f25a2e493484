"""The ``padded`` layout: padding and truncation, ``pad_to: longest``."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from llm_assets.kernels.batching.padded import longest_in_batch, pad_sequences
from llm_assets.kernels.batching.sequences import IGNORE_INDEX
from llm_assets_tests.kernels.batching.test_packed import (
    _arrays,
    documents,
    no_deadline,
    token_types,
)


@no_deadline
@given(docs=documents, seq_len=st.integers(2, 16), token_type=token_types)
def test_padded_labels_mask_exactly_the_padding_and_truncation_is_counted(
    docs, seq_len, token_type
):
    ids = [f"d{i}" for i in range(len(docs))]
    table, stats = pad_sequences(_arrays(docs, token_type), ids, seq_len, 31, token_type)
    assert table["doc_id"].to_pylist() == ids
    rows = zip(
        docs,
        table["input_ids"].to_pylist(),
        table["attention_mask"].to_pylist(),
        table["labels"].to_pylist(),
        table["n_tokens"].to_pylist(),
        strict=True,
    )
    for doc, row_ids, mask, labels, n_tokens in rows:
        kept = doc[:seq_len]
        assert n_tokens == len(kept)
        assert row_ids == kept + [31] * (seq_len - len(kept))
        assert mask == [1] * len(kept) + [0] * (seq_len - len(kept))
        assert labels == [t if m else IGNORE_INDEX for t, m in zip(row_ids, mask, strict=True)]
    assert stats.documents == stats.sequences == len(docs)
    assert stats.tokens == sum(min(len(d), seq_len) for d in docs)
    assert stats.truncated_tokens == sum(max(0, len(d) - seq_len) for d in docs)
    assert stats.tokens + stats.padding_tokens == stats.sequences * seq_len
    assert stats.dropped_tokens == 0


def test_padded_schema():
    table, _ = pad_sequences([np.array([5], dtype=np.uint16)], ["a"], 3, 0, pa.uint16())
    assert table.schema.names == ["doc_id", "input_ids", "attention_mask", "labels", "n_tokens"]
    assert table.schema.field("labels").type == pa.list_(pa.int32())
    assert table.schema.field("n_tokens").type == pa.int32()


def test_pad_to_longest_in_batch_pads_each_group_to_its_longest():
    lengths = np.array([3, 9, 2, 5, 40, 1, 7])
    targets = longest_in_batch(lengths, seq_len=16, batch_size=3)
    assert targets.tolist() == [9, 9, 9, 16, 16, 16, 7]
    token_lists = [np.arange(n, dtype=np.uint16) for n in lengths]
    table, stats = pad_sequences(
        token_lists, [str(i) for i in range(7)], 16, 0, pa.uint16(), targets=targets
    )
    assert [len(r) for r in table["input_ids"].to_pylist()] == targets.tolist()
    assert stats.padding_tokens == int(targets.sum()) - int(np.minimum(lengths, 16).sum())
    with pytest.raises(ValueError, match="targets"):
        pad_sequences(token_lists, [str(i) for i in range(7)], 16, 0, pa.uint16(), targets=[1] * 7)
