"""Batching kernels: shuffle keys, splits and buckets, and packed or padded sequences.

The property tests compare against the obvious slow definition of each rule (a Python loop over
the token stream), and the shard tests replay the scatter/gather protocol of the pipeline to check
that the result does not depend on how documents are split into shards or ordered within them.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import pickle
from dataclasses import FrozenInstanceError

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.kernels import batching
from llm_assets.kernels.batching import (
    IGNORE_INDEX,
    BatchSpec,
    PackStats,
    assign_buckets,
    assign_splits,
    batch_schema_metadata,
    pack_sequences,
    pad_sequences,
    prompt_fills_sequence,
    shuffle_keys,
    shuffle_order,
)

EOS = 0
"""Separator id in the property tests; generated documents never contain it."""

documents = st.lists(st.lists(st.integers(1, 30), max_size=40), max_size=25)
token_types = st.sampled_from([pa.uint16(), pa.uint32()])
doc_id_sets = st.sets(st.text(min_size=1, max_size=12), min_size=1, max_size=60)
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


# --- packed ---------------------------------------------------------------------------------------
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
    monkeypatch.setattr(batching, "_MAX_LIST_VALUES", 9)  # two rows of 4 per chunk
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


# --- padded ---------------------------------------------------------------------------------------
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


def test_empty_input_gives_an_empty_table_with_the_schema_and_zero_stats():
    packed, packed_stats = pack_sequences([], 8, 0, 0, False, pa.uint16())
    full, _ = pack_sequences([np.array([1], dtype=np.uint16)], 8, 0, 0, False, pa.uint16())
    assert packed.num_rows == 0 and packed.schema == full.schema
    padded, padded_stats = pad_sequences([], [], 8, 0, pa.uint32())
    assert padded.num_rows == 0 and padded.schema.field("input_ids").type == pa.list_(pa.uint32())
    assert packed_stats == padded_stats == PackStats()
    assert packed_stats.padding_fraction() == 0.0


# --- shuffle keys, splits, buckets ----------------------------------------------------------------
def test_shuffle_keys_are_the_documented_keyed_hash():
    expected = hashlib.blake2b(
        b"doc-1", digest_size=8, key=(7).to_bytes(8, "little"), person=b"llm-assets/shuf"
    ).digest()
    keys = shuffle_keys(["doc-1"], 7)
    assert keys.dtype == np.uint64
    assert int(keys[0]) == int.from_bytes(expected, "little")
    # Many documents (the hasher is copied per document: no state carries over between them).
    ids = ["doc-1", "", "doc-1", "é-unicode", "x" * 300]
    fresh = [
        hashlib.blake2b(
            i.encode(), digest_size=8, key=(7).to_bytes(8, "little"), person=b"llm-assets/shuf"
        ).digest()
        for i in ids
    ]
    assert shuffle_keys(ids, 7).tolist() == [int.from_bytes(d, "little") for d in fresh]


def test_shuffle_is_deterministic_per_seed_and_differs_between_seeds():
    ids = _ids(1000)
    a = shuffle_order(shuffle_keys(ids, 1), ids)
    assert np.array_equal(a, shuffle_order(shuffle_keys(pa.array(ids), 1), ids))
    assert not np.array_equal(a, shuffle_order(shuffle_keys(ids, 2), ids))
    assert sorted(a.tolist()) == list(range(1000))


@no_deadline
@given(ids=doc_id_sets, seed=st.integers(0, 2**64 - 1), data=st.data())
def test_shuffle_order_does_not_depend_on_input_order(ids, seed, data):
    ids = sorted(ids)
    permuted = data.draw(st.permutations(ids))
    ordered = [ids[i] for i in shuffle_order(shuffle_keys(ids, seed), ids)]
    assert [permuted[i] for i in shuffle_order(shuffle_keys(permuted, seed), permuted)] == ordered


def test_equal_keys_are_ordered_by_doc_id_whatever_the_input_order():
    keys = np.array([5, 3, 5, 3, 5], dtype=np.uint64)
    ids = ["e", "b", "a", "c", "d"]
    assert [ids[i] for i in shuffle_order(keys, ids)] == ["b", "c", "a", "d", "e"]
    back = ids[::-1]
    assert [back[i] for i in shuffle_order(keys[::-1], back)] == ["b", "c", "a", "d", "e"]


def _scatter_gather(shards: list[list[str]], seed: int, fraction: float, n_buckets: int):
    """The pipeline's protocol: scatter every shard to (split, bucket), then sort each bucket."""
    buckets: dict[tuple[bool, int], list[tuple[int, str]]] = {}
    for shard in shards:
        keys = shuffle_keys(shard, seed)
        validation = assign_splits(shard, seed, fraction)
        for key, split, bucket, doc in zip(
            keys, validation, assign_buckets(keys, n_buckets), shard, strict=True
        ):
            buckets.setdefault((bool(split), int(bucket)), []).append((int(key), doc))
    result = {}
    for split in (False, True):
        ordered = []
        for bucket in range(n_buckets):
            rows = buckets.get((split, bucket), [])
            keys = np.array([k for k, _ in rows], dtype=np.uint64)
            docs = [d for _, d in rows]
            ordered += [docs[i] for i in shuffle_order(keys, docs)]
        result[split] = ordered
    return result


@settings(max_examples=50, deadline=None)
@given(
    ids=doc_id_sets,
    seed=st.integers(0, 1000),
    fraction=st.sampled_from([0.0, 0.2, 0.5]),
    n_buckets=st.integers(1, 5),
    data=st.data(),
)
def test_scatter_gather_is_independent_of_sharding(ids, seed, fraction, n_buckets, data):
    ids = sorted(ids)
    reference = _scatter_gather([ids], seed, fraction, n_buckets)
    permuted = data.draw(st.permutations(ids))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(ids)), max_size=4)))
    bounds = [0, *cuts, len(ids)]
    shards = [permuted[a:b] for a, b in itertools.pairwise(bounds)]
    assert _scatter_gather(shards, seed, fraction, n_buckets) == reference
    # the buckets in order are the global sort by key: one bucket or many give the same order
    assert _scatter_gather(shards, seed, fraction, 1) == reference


def test_splits_are_per_document_and_respect_the_fraction():
    ids = _ids(10_000)
    validation = assign_splits(ids, 3, 0.05)
    assert validation.dtype == np.bool_
    assert 0.04 < validation.mean() < 0.06
    # a document's split is the same in any shard, next to any neighbours
    assert [bool(assign_splits([i], 3, 0.05)[0]) for i in ids[:200]] == validation[:200].tolist()
    assert np.array_equal(assign_splits(ids[::-1], 3, 0.05), validation[::-1])
    assert not assign_splits(ids, 3, 0.0).any()
    assert not np.array_equal(assign_splits(ids, 4, 0.05), validation)


def test_split_is_independent_of_the_shuffle_key():
    ids = _ids(10_000)
    validation = assign_splits(ids, 0, 0.5)
    low_keys = shuffle_keys(ids, 0) < np.uint64(2**63)
    # were the split a function of the key, these would agree far from half the time
    assert 0.47 < (validation == low_keys).mean() < 0.53


def test_buckets_are_in_range_roughly_uniform_and_contiguous_in_key_order():
    keys = shuffle_keys(_ids(10_000), 0)
    buckets = assign_buckets(keys, 8)
    assert buckets.dtype == np.int32
    counts = np.bincount(buckets, minlength=8)
    assert len(counts) == 8 and counts.min() > 1100 and counts.max() < 1400
    assert np.all(np.diff(buckets[np.argsort(keys)]) >= 0)


@no_deadline
@given(
    keys=st.lists(st.integers(0, 2**64 - 1), max_size=50).map(lambda k: [0, 2**64 - 1, *k]),
    n_buckets=st.integers(1, 2**31 - 1),
)
def test_bucket_is_the_exact_high_bits_of_key_times_n(keys, n_buckets):
    buckets = assign_buckets(np.array(keys, dtype=np.uint64), n_buckets)
    assert buckets.tolist() == [k * n_buckets >> 64 for k in keys]


def test_key_and_split_functions_refuse_bad_arguments():
    with pytest.raises(ValueError, match="seed"):
        shuffle_keys(["a"], -1)
    with pytest.raises(ValueError, match="doc_ids"):
        shuffle_keys(pa.array(["a", None]), 0)
    with pytest.raises(ValueError, match="validation_fraction"):
        assign_splits(["a"], 0, 1.0)
    with pytest.raises(ValueError, match="n_buckets"):
        assign_buckets(np.array([1], dtype=np.uint64), 0)


# --- spec, stats, metadata ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"seq_len": 1}, "seq_len"),
        ({"seq_len": 2.5}, "seq_len"),
        ({"layout": "ragged"}, "layout"),
        ({"length_buckets": 0}, "length_buckets"),
        ({"validation_fraction": 1.0}, "validation_fraction"),
        ({"validation_fraction": -0.1}, "validation_fraction"),
        ({"validation_fraction": math.nan}, "validation_fraction"),
        ({"shuffle_buckets": 0}, "shuffle_buckets"),
        ({"seed": -1}, "seed"),
        ({"drop_remainder": "yes"}, "drop_remainder"),
    ],
)
def test_batch_spec_refuses_bad_values_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        BatchSpec(**kwargs)


def test_batch_spec_is_frozen_and_picklable():
    spec = BatchSpec(layout="padded", seq_len=2, validation_fraction=0.0)
    assert pickle.loads(pickle.dumps(spec)) == spec
    with pytest.raises(FrozenInstanceError):
        spec.seq_len = 4  # type: ignore[misc]


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


def test_schema_metadata_is_bytes_and_deterministic():
    kwargs = {
        "spec": BatchSpec(seq_len=256, seed=42),
        "tokenizer_name": "gpt2",
        "tokenizer_fingerprint": "abc123",
        "vocab_size": 50257,
        "split": "validation",
        "input_fingerprint": "f00d",
    }
    meta = batch_schema_metadata(**kwargs)
    assert meta == batch_schema_metadata(**kwargs)
    assert all(isinstance(k, bytes) and isinstance(v, bytes) for k, v in meta.items())
    assert all(k.startswith(b"llm_assets.") for k in meta)
    assert meta[b"llm_assets.format_version"] == b"1"
    assert meta[b"llm_assets.layout"] == b"packed"
    assert meta[b"llm_assets.seq_len"] == b"256"
    assert meta[b"llm_assets.seed"] == b"42"
    assert meta[b"llm_assets.split"] == b"validation"
    assert meta[b"llm_assets.tokenizer.name"] == b"gpt2"
    assert meta[b"llm_assets.tokenizer.fingerprint"] == b"abc123"
    assert meta[b"llm_assets.tokenizer.vocab_size"] == b"50257"
    assert meta[b"llm_assets.source_fingerprint"] == b"f00d"
    assert batch_schema_metadata(**{**kwargs, "split": "train"}) != meta


# --- SFT labels, truncation, pad-to-longest, length buckets ---------------------------------------
_docs_with_prompts = st.lists(
    st.integers(0, 40).flatmap(
        lambda n: st.tuples(
            st.lists(st.integers(0, 50_000), min_size=n, max_size=n), st.integers(0, n + 3)
        )
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(_docs_with_prompts, st.integers(2, 48))
def test_padded_labels_mask_exactly_the_prompt_and_padding(docs, seq_len):
    token_lists = [np.array(ids, dtype=np.uint16) for ids, _ in docs]
    prompts = [p for _, p in docs]
    table, _stats = pad_sequences(
        token_lists,
        [f"d{i}" for i in range(len(docs))],
        seq_len,
        50256,
        pa.uint16(),
        prompt_tokens=prompts,
    )
    for row, (ids, prompt) in enumerate(docs):
        kept = ids[:seq_len]
        labels = table["labels"][row].as_py()
        mask = table["attention_mask"][row].as_py()
        expected = [-100 if i < prompt else t for i, t in enumerate(kept)] + [-100] * (
            seq_len - len(kept)
        )
        assert labels == expected
        assert mask == [1] * len(kept) + [0] * (seq_len - len(kept))


@settings(max_examples=150, deadline=None)
@given(_docs_with_prompts, st.integers(2, 48), st.booleans())
def test_packed_sft_labels_mask_exactly_prompts_and_padding(docs, seq_len, truncate):
    eos = 50256
    token_lists = [np.array(ids, dtype=np.uint16) for ids, _ in docs]
    table, stats = pack_sequences(
        token_lists,
        seq_len,
        eos,
        eos,
        False,
        pa.uint16(),
        truncate=truncate,
        prompt_tokens=[p for _, p in docs],
    )
    stream, expected = [], []
    for ids, prompt in docs:
        cut = truncate and len(ids) >= seq_len  # its EOS follows the cut: not learned
        ids = ids[: seq_len - 1] if truncate else ids
        stream += [*ids, eos]
        expected += [-100 if i < prompt else t for i, t in enumerate(ids)] + [-100 if cut else eos]
    flat_ids = [t for row in table["input_ids"].to_pylist() for t in row]
    flat_labels = [t for row in table["labels"].to_pylist() for t in row]
    assert flat_ids[: len(stream)] == stream
    assert flat_labels == expected + [-100] * (len(flat_labels) - len(expected))
    original = sum(len(ids) for ids, _ in docs)
    assert stats.truncated_tokens == original - (len(stream) - len(docs))
    if truncate:
        assert all(len(ids) < seq_len for ids, _ in docs) or stats.truncated_tokens > 0


def _spans_in_prompt(draw: st.DrawFn) -> tuple[list[int], int, list[tuple[int, int]]]:
    """A chat row: ids, its prompt's length, and disjoint learned spans inside the prompt (its
    earlier answers) followed by the answer's own span, as tokenize_table writes them."""
    n = draw(st.integers(0, 40))
    ids = draw(st.lists(st.integers(1, 50_000), min_size=n, max_size=n))
    prompt = draw(st.integers(0, n))
    cuts = sorted(draw(st.lists(st.integers(0, prompt), max_size=6, unique=True)))
    spans = [(a, b) for a, b in itertools.pairwise(cuts[: len(cuts) // 2 * 2]) if a < b][::2]
    return ids, prompt, [*spans, *([(prompt, n)] if prompt < n else [])]


_chat_rows = st.lists(st.composite(_spans_in_prompt)(), min_size=1, max_size=20)


def _span_column(rows: list[tuple[list[int], int, list[tuple[int, int]]]]) -> pa.Array:
    from llm_assets.kernels.schema import LEARNED_SPANS_TYPE

    return pa.array(
        [[{"start": a, "end": b} for a, b in spans] for _, _, spans in rows], LEARNED_SPANS_TYPE
    )


def _learned(ids: list[int], spans: list[tuple[int, int]]) -> list[int]:
    """Slow definition: each id inside a learned span, else -100."""
    inside = {i for a, b in spans for i in range(a, b)}
    return [t if i in inside else IGNORE_INDEX for i, t in enumerate(ids)]


@settings(max_examples=150, deadline=None)
@given(_chat_rows, st.integers(2, 48))
def test_padded_chat_labels_learn_exactly_the_learned_spans_and_the_eos(rows, seq_len):
    """``chat_answers: all``: the loss covers each earlier answer inside the prompt, the last
    answer and the EOS the layout adds, cut with the row; the rest of the prompt is masked."""
    table, _ = pad_sequences(
        [np.array(ids, dtype=np.uint16) for ids, _, _ in rows],
        [f"d{i}" for i in range(len(rows))],
        seq_len,
        0,
        pa.uint16(),
        prompt_tokens=[p for _, p, _ in rows],
        eos_id=EOS,
        learned_spans=_span_column(rows),
    )
    for row, (ids, _, spans) in enumerate(rows):
        expected = [*_learned(ids, spans), EOS][:seq_len]
        assert table["labels"][row].as_py() == expected + [-100] * (seq_len - len(expected))
    lead = batching.masked_lead([p for _, p, _ in rows], _span_column(rows))
    assert lead.tolist() == [min([p] + [a for a, _ in spans]) for _, p, spans in rows]
    # A row is without a learned label exactly when its masked lead fills the cut.
    full = prompt_fills_sequence([len(ids) + 1 for ids, _, _ in rows], lead, seq_len)
    learned = [any(x != IGNORE_INDEX for x in r) for r in table["labels"].to_pylist()]
    assert list(full) == [not x for x in learned]


@settings(max_examples=150, deadline=None)
@given(_chat_rows, st.integers(2, 48), st.booleans())
def test_packed_chat_labels_learn_exactly_the_learned_spans(rows, seq_len, truncate):
    table, _ = pack_sequences(
        [np.array(ids, dtype=np.uint16) for ids, _, _ in rows],
        seq_len,
        EOS,
        EOS,
        False,
        pa.uint16(),
        truncate=truncate,
        prompt_tokens=[p for _, p, _ in rows],
        learned_spans=_span_column(rows),
    )
    expected = []
    for ids, _, spans in rows:
        cut = truncate and len(ids) >= seq_len  # its EOS follows the cut: not learned
        ids = ids[: seq_len - 1] if truncate else ids
        expected += [*_learned(ids, spans), -100 if cut else EOS]
    flat_labels = [t for row in table["labels"].to_pylist() for t in row]
    assert flat_labels == expected + [-100] * (len(flat_labels) - len(expected))


def test_pad_to_longest_in_batch_pads_each_group_to_its_longest():
    lengths = np.array([3, 9, 2, 5, 40, 1, 7])
    targets = batching.longest_in_batch(lengths, seq_len=16, batch_size=3)
    assert targets.tolist() == [9, 9, 9, 16, 16, 16, 7]
    token_lists = [np.arange(n, dtype=np.uint16) for n in lengths]
    table, stats = pad_sequences(
        token_lists, [str(i) for i in range(7)], 16, 0, pa.uint16(), targets=targets
    )
    assert [len(r) for r in table["input_ids"].to_pylist()] == targets.tolist()
    assert stats.padding_tokens == int(targets.sum()) - int(np.minimum(lengths, 16).sum())
    with pytest.raises(ValueError, match="targets"):
        pad_sequences(token_lists, [str(i) for i in range(7)], 16, 0, pa.uint16(), targets=[1] * 7)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 300), min_size=0, max_size=200),
    st.integers(1, 16),
    st.integers(0, 2**32),
)
def test_bucketed_layout_is_a_permutation_with_uniform_batches(lengths, batch_size, seed):
    seq_len = 256
    boundaries = (16, 64, 128)
    lengths = np.array(lengths, dtype=np.int64)
    order, targets, buckets, batches = batching.bucket_layout(
        lengths, boundaries, seq_len, batch_size, seed
    )
    assert sorted(order.tolist()) == list(range(len(lengths)))
    # Batches are numbered 0, 1, ... in output order, each at most batch_size rows of one bucket
    # padded to one length: what a reader takes back whole.
    assert list(np.unique(batches)) == list(range(len(np.unique(batches))))
    assert (np.diff(batches) >= 0).all()
    for number in np.unique(batches):
        rows = batches == number
        assert rows.sum() <= batch_size
        assert len(set(targets[rows])) == 1 and len(set(buckets[rows])) == 1
    kept = np.minimum(lengths[order], seq_len)
    assert (targets >= np.maximum(kept, 1)).all()
    bounds = np.array([*boundaries, seq_len])
    assert (kept <= bounds[buckets]).all()
    assert (buckets == 0).all() or (kept[buckets > 0] > bounds[buckets[buckets > 0] - 1]).all()
    again = batching.bucket_layout(lengths, boundaries, seq_len, batch_size, seed)
    assert np.array_equal(order, again[0])


def test_bucketed_batch_order_differs_from_file_to_file():
    """Each shuffle-bucket file orders its length buckets its own way (before: the order tags
    depended on the bucket and batch number only, so with similar files every file repeated one
    sequence of lengths, e.g. always long batches first); the same salt gives the same order."""
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 256, 400)

    def lengths_order(salt: str) -> list[int]:
        _, _, buckets, batches = batching.bucket_layout(lengths, (32, 64, 128), 256, 8, 7, salt)
        return buckets[np.r_[0, np.flatnonzero(np.diff(batches)) + 1]].tolist()

    first, second = lengths_order("train:0"), lengths_order("train:1")
    assert sorted(first) == sorted(second) and first != second
    assert lengths_order("train:0") == first


def test_bucketed_padding_is_far_below_fixed_padding():
    rng = np.random.default_rng(0)
    lengths = np.minimum(rng.lognormal(4.5, 0.8, 5000).astype(int) + 1, 1024)
    quantiles = np.quantile(lengths, np.linspace(0, 1, 17)[1:-1])
    boundaries = batching.derive_boundaries(quantiles, 1024)
    assert boundaries[-1] == 1024 and list(boundaries) == sorted(set(boundaries))
    _order, targets, _, _ = batching.bucket_layout(lengths, boundaries, 1024, 8, 0)
    bucketed_padding = 1 - lengths.sum() / targets.sum()
    fixed_padding = 1 - lengths.sum() / (len(lengths) * 1024)
    assert bucketed_padding < 0.2 < 0.75 < fixed_padding


def test_length_histogram_counts_every_document():
    hist = batching.length_histogram(np.array([0, 5, 8, 100, 1024, 5000]), 1024)
    assert sum(hist.values()) == 6
    assert hist[">1024"] == 1
    # Counts per distinct length (as summed from the scatter manifests) give the same histogram.
    lengths, documents = np.unique([0, 5, 5, 8, 100, 100, 100, 5000], return_counts=True)
    assert batching.length_histogram(lengths, 1024, weights=documents) == (
        batching.length_histogram(np.array([0, 5, 5, 8, 100, 100, 100, 5000]), 1024)
    )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"overflow": "wrap"}, "overflow"),
        ({"pad_to": "max"}, "pad_to"),
        ({"batch_size": 0}, "batch_size"),
        ({"bucket_boundaries": (64, 32)}, "bucket_boundaries"),
        ({"bucket_boundaries": (2048,), "seq_len": 1024}, "bucket_boundaries"),
        ({"layout": "ragged"}, "layout"),
        ({"length_buckets": 0}, "length_buckets"),
    ],
)
def test_new_batch_spec_fields_are_validated(kwargs, field):
    with pytest.raises(ValueError, match=field):
        BatchSpec(**kwargs)


@no_deadline
@given(
    docs=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=30),
    seq_len=st.integers(2, 50),
)
def test_prompt_fills_sequence_is_exactly_the_padded_rows_without_a_learned_label(docs, seq_len):
    """A padded SFT row (EOS appended) has a label other than -100 exactly when the kernel says
    its prompt does not fill it (prompts of any length, responses of 0 tokens included); the
    EOS is a real, learned token when the row holds it, and gone when the cut falls before it."""
    lengths = [p + r for p, r in docs]
    prompts = [p for p, _ in docs]
    full = prompt_fills_sequence([n + 1 for n in lengths], prompts, seq_len)
    token_lists = [np.arange(1, n + 1, dtype=np.uint32) for n in lengths]
    eos = 999
    table, stats = pad_sequences(
        token_lists,
        [str(i) for i in range(len(docs))],
        seq_len,
        0,
        pa.uint32(),
        prompt_tokens=prompts,
        eos_id=eos,
    )
    learned = [any(x != IGNORE_INDEX for x in row) for row in table["labels"].to_pylist()]
    assert list(full) == [not x for x in learned]
    rows = zip(
        table["input_ids"].to_pylist(),
        table["n_tokens"].to_pylist(),
        table["labels"].to_pylist(),
        strict=True,
    )
    for (n, p), (row, kept, labels) in zip(zip(lengths, prompts, strict=True), rows, strict=True):
        assert kept == min(n + 1, seq_len)
        assert row[:kept] == [*range(1, n + 1), eos][:kept]
        # The EOS, when the row holds it, is learned unless the prompt covers it (p > n: the
        # prompt count of a document is never above its length in the pipeline).
        if n < seq_len and p <= n:
            assert labels[n] == eos
    assert stats.tokens == sum(min(n + 1, seq_len) for n in lengths)
