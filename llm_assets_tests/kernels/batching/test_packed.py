"""The ``packed`` layout: every token kept in order, positions, block documents, chunks."""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.kernels.batching import sequences
from llm_assets.kernels.batching.packed import pack_sequences
from llm_assets.kernels.batching.sequences import PackStats

EOS = 0
"""Separator id in the property tests; generated documents never contain it."""

documents = st.lists(st.lists(st.integers(1, 30), max_size=40), max_size=25)
token_types = st.sampled_from([pa.uint16(), pa.uint32()])
no_deadline = settings(deadline=None)
"""Per-example deadlines flake on a first call that warms up Arrow; the file's total time is what
matters (a few seconds)."""


def _arrays(docs: list[list[int]], token_type: pa.DataType) -> list[np.ndarray]:
    return [np.array(d, dtype=token_type.to_pandas_dtype()) for d in docs]


def _ids(n: int) -> list[str]:
    return [hashlib.sha256(str(i).encode()).hexdigest()[:16] for i in range(n)]


def _expected_positions(docs: list[list[int]], seq_len: int, size: int) -> list[int]:
    """Slow definition: restart at each document start and each block start; padding is one more
    segment that counts from 0."""
    starts = set()
    at = 0
    for doc in docs:
        starts.add(at)
        at += len(doc) + 1
    starts.add(at)  # the padding run, if any
    positions, current = [], 0
    for i in range(size):
        current = 0 if i in starts or i % seq_len == 0 else current + 1
        positions.append(current)
    return positions


@no_deadline
@given(
    docs=documents,
    seq_len=st.integers(2, 16),
    pad_id=st.sampled_from([EOS, 31]),
    drop_remainder=st.booleans(),
    token_type=token_types,
)
def test_packing_keeps_every_token_in_order_and_adds_only_separators(
    docs, seq_len, pad_id, drop_remainder, token_type
):
    table, stats = pack_sequences(
        _arrays(docs, token_type), seq_len, EOS, pad_id, drop_remainder, token_type
    )
    ids = table["input_ids"].to_pylist()
    mask = table["attention_mask"].to_pylist()
    assert all(len(row) == seq_len for row in ids + mask + table["position_ids"].to_pylist())
    flat_ids = [t for row in ids for t in row]
    flat_mask = [m for row in mask for m in row]

    # padding only at the very end: the mask is ones then zeros, and the zeros fit in the last row
    real = sum(flat_mask)
    assert flat_mask == [1] * real + [0] * (len(flat_mask) - real)
    assert len(flat_mask) - real < seq_len
    assert flat_ids[real:] == [pad_id] * (len(flat_ids) - real)

    stream = [t for doc in docs for t in [*doc, EOS]]
    assert flat_ids[:real] == stream[:real]
    if drop_remainder:
        assert stats.padding_tokens == 0
        assert stats.dropped_tokens == len(stream) - real < seq_len
    else:
        assert real == len(stream) and stats.dropped_tokens == 0
        assert [list(d) for d in _split_on(flat_ids[:real], EOS)] == docs

    assert stats.documents == len(docs)
    assert stats.sequences == table.num_rows
    assert stats.tokens == real
    assert stats.padding_tokens == len(flat_mask) - real
    assert stats.tokens + stats.padding_tokens == stats.sequences * seq_len
    assert stats.tokens + stats.dropped_tokens == len(stream)
    assert stats.truncated_tokens == 0


def _split_on(stream: list[int], separator: int) -> list[list[int]]:
    """Documents of a stream in which every document is followed by ``separator``."""
    docs, current = [], []
    for token in stream:
        if token == separator:
            docs.append(current)
            current = []
        else:
            current.append(token)
    assert current == [], "the stream must end with a separator"
    return docs


@no_deadline
@given(docs=documents, seq_len=st.integers(2, 16), drop_remainder=st.booleans())
def test_position_ids_restart_exactly_at_document_and_block_starts(docs, seq_len, drop_remainder):
    table, _ = pack_sequences(
        _arrays(docs, pa.uint16()), seq_len, EOS, EOS, drop_remainder, pa.uint16()
    )
    positions = [p for row in table["position_ids"].to_pylist() for p in row]
    assert positions == _expected_positions(docs, seq_len, table.num_rows * seq_len)


@no_deadline
@given(
    docs=documents,
    seq_len=st.integers(2, 16),
    drop_remainder=st.booleans(),
    truncate=st.booleans(),
)
def test_each_block_names_exactly_the_documents_with_tokens_in_it(
    docs, seq_len, drop_remainder, truncate
):
    names = [f"d{i}" for i in range(len(docs))]
    table, _ = pack_sequences(
        _arrays(docs, pa.uint16()),
        seq_len,
        EOS,
        EOS,
        drop_remainder,
        pa.uint16(),
        truncate=truncate,
        doc_ids=names,
    )
    # Which document owns each position of the stream (its tokens and its EOS), block by block.
    owner = [
        name
        for name, doc in zip(names, docs, strict=True)
        for _ in range(min(len(doc), seq_len - 1) + 1 if truncate else len(doc) + 1)
    ]
    expected = []
    for block in range(table.num_rows):
        in_block = owner[block * seq_len : (block + 1) * seq_len]
        expected.append(list(dict.fromkeys(in_block)))  # in order, each once
    assert table["doc_ids"].to_pylist() == expected
    assert table.schema.field("doc_ids").type == pa.list_(pa.string())


def test_packed_example_with_a_document_split_across_blocks():
    docs = [[1, 2, 3], [4, 5, 6, 7, 8], [9]]
    table, stats = pack_sequences(_arrays(docs, pa.uint16()), 5, 0, 99, False, pa.uint16())
    assert table.to_pydict() == {
        "input_ids": [[1, 2, 3, 0, 4], [5, 6, 7, 8, 0], [9, 0, 99, 99, 99]],
        "attention_mask": [[1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 0, 0, 0]],
        "position_ids": [[0, 1, 2, 3, 0], [0, 1, 2, 3, 4], [0, 1, 0, 1, 2]],
    }
    assert stats == PackStats(documents=3, sequences=3, tokens=12, padding_tokens=3)
    assert stats.padding_fraction() == pytest.approx(3 / 15)

    dropped, stats = pack_sequences(_arrays(docs, pa.uint16()), 5, 0, 99, True, pa.uint16())
    assert dropped.to_pydict() == {k: v[:2] for k, v in table.to_pydict().items()}
    assert stats == PackStats(documents=3, sequences=2, tokens=10, dropped_tokens=2)

    named, _ = pack_sequences(
        _arrays(docs, pa.uint16()), 5, 0, 99, False, pa.uint16(), doc_ids=["a", "b", "c"]
    )
    assert named["doc_ids"].to_pylist() == [["a", "b"], ["b"], ["c"]]
    with pytest.raises(ValueError, match="2 doc_ids for 3 documents"):
        pack_sequences(_arrays(docs, pa.uint16()), 5, 0, 99, False, pa.uint16(), doc_ids=["a", "b"])


def test_packed_schema_and_wide_positions():
    table, _ = pack_sequences([np.arange(1, 10, dtype=np.uint32)], 4, 0, 0, False, pa.uint32())
    assert table.schema.field("input_ids").type == pa.list_(pa.uint32())
    assert table.schema.field("attention_mask").type == pa.list_(pa.uint8())
    assert table.schema.field("position_ids").type == pa.list_(pa.uint16())
    wide, _ = pack_sequences([np.arange(1, 10, dtype=np.uint16)], 70_000, 0, 0, False, pa.uint16())
    assert wide.schema.field("position_ids").type == pa.list_(pa.uint32())
    assert wide["position_ids"][0].as_py()[-1] == 70_000 - 11  # the padding run counts from 0


def test_long_columns_are_split_into_chunks_with_the_same_rows(monkeypatch):
    docs = _arrays([[1, 2, 3]] * 10, pa.uint16())
    whole, _ = pack_sequences(docs, 4, 0, 0, False, pa.uint16())
    monkeypatch.setattr(sequences, "_MAX_LIST_VALUES", 9)  # two rows of 4 per chunk
    chunked, _ = pack_sequences(docs, 4, 0, 0, False, pa.uint16())
    assert chunked["input_ids"].num_chunks == 5
    assert chunked.equals(whole)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"token_lists": [np.array([1, 2], dtype=np.int64)]}, "cast safely"),
        ({"eos_id": 70_000}, "eos_id"),
        ({"pad_id": -1}, "pad_id"),
        ({"token_type": pa.float32()}, "token_type"),
        ({"seq_len": 1}, "seq_len"),
    ],
)
def test_pack_refuses_bad_arguments_naming_them(kwargs, message):
    args = {
        "token_lists": [np.array([1, 2], dtype=np.uint16)],
        "seq_len": 4,
        "eos_id": 0,
        "pad_id": 0,
        "drop_remainder": False,
        "token_type": pa.uint16(),
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        pack_sequences(**args)
