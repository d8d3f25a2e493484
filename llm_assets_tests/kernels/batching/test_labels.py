"""SFT labels in both layouts: prompts masked, learned spans and EOS learned."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.kernels.batching.labels import masked_lead, prompt_fills_sequence
from llm_assets.kernels.batching.packed import pack_sequences
from llm_assets.kernels.batching.padded import pad_sequences
from llm_assets.kernels.batching.sequences import IGNORE_INDEX
from llm_assets_tests.kernels.batching.test_packed import EOS, no_deadline

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
    lead = masked_lead([p for _, p, _ in rows], _span_column(rows))
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
