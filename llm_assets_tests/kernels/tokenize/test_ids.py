"""Token ids as Arrow columns: word-by-word encoding equals row-by-row encoding; the dtype."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.kernels.normalize import PRESETS, NormalizeSpec, normalize_array
from llm_assets.kernels.tokenize.ids import token_dtype
from llm_assets_tests.kernels.tokenize.test_gpt2 import FAST, REFERENCE, _sample_texts

TRICKY = [
    "",
    "a",
    "hello world",
    " leading",
    "trailing ",
    "two  spaces",
    " ",
    "  ",
    "it's 12abc x'll they're",
    "tab\tand\nnewline",
    "caf\u00e9 na\u00efve \u00e0",
    "no\u00a0break and\u3000ideographic and\u2009thin",
    "<|endoftext|> stays text",
    "emoji \U0001f600 x \U0001f600\U0001f600",
    "a , b . c ' d",
    "123 4567 89a b12",
    # splitting these at their spaces would change the ids (found by brute force over 5 chars)
    " \u00a0 \u00a0",
    "a \u00a0 \u00a0",
    "\n \u00a0 \u00a0 ",
]
_WORDISH = st.lists(
    st.sampled_from([*"ab Z1'.,-\u00e9\u00a0\u3000\t\n\x1c", "\U0001f600", "  ", "the", " it's"]),
    max_size=20,
).map("".join)


def _arrow_equals_rows(texts: pa.Array) -> None:
    tok = FAST.build()
    lists, counts = tok.encode_arrow(texts)
    expected = tok.encode_batch([t or "" for t in texts.to_pylist()])
    assert lists.to_pylist() == expected
    assert counts.to_pylist() == [len(ids) for ids in expected]
    assert lists.type == pa.list_(pa.uint16())


def test_arrow_encoding_by_distinct_words_equals_row_by_row_encoding():
    """encode_arrow encodes each distinct word once; rows with other whitespace than single
    spaces between words (tabs, newlines, no-break spaces, doubled, leading or trailing spaces)
    are encoded whole. Either way the ids equal encoding each row."""
    _arrow_equals_rows(pa.array(TRICKY))
    _arrow_equals_rows(pa.array(TRICKY[2:6]))  # only rows that need the whole-row path
    _arrow_equals_rows(pa.array(["x y", "y x", "x"]))  # only the word path
    _arrow_equals_rows(pa.array(["", "x y", "", "", "z", ""]))  # empty rows have no pieces
    _arrow_equals_rows(pa.array(["", ""]))  # nothing to encode at all
    _arrow_equals_rows(pa.array(["skip me", "a b", "", "c d e"]).slice(1))  # word path, offset
    _arrow_equals_rows(pa.array(["a b", "", "c"], pa.large_string()).slice(1))
    _arrow_equals_rows(pa.array([], pa.string()))
    _arrow_equals_rows(pa.array([*TRICKY, None]))  # a null row encodes as empty
    _arrow_equals_rows(pa.array(TRICKY).slice(3, 9))  # offsets not starting at zero
    _arrow_equals_rows(pa.array(TRICKY, pa.large_string()))
    chunked = pa.chunked_array([pa.array(TRICKY[:5]), pa.array(TRICKY[5:])])
    lists, _ = FAST.build().encode_arrow(chunked)
    assert lists.to_pylist() == FAST.build().encode_batch(TRICKY)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(_WORDISH, st.text(max_size=30)), max_size=12))
def test_arrow_encoding_equals_row_encoding_on_random_text(texts):
    _arrow_equals_rows(pa.array(texts, pa.string()))


@pytest.mark.parametrize("preset", PRESETS)
def test_arrow_encoding_equals_reference_on_the_sample(preset):
    texts = normalize_array(pa.array(_sample_texts()), NormalizeSpec(preset=preset))
    lists, _ = FAST.build().encode_arrow(texts)
    assert lists.to_pylist() == REFERENCE.build().encode_batch(texts.to_pylist())


def test_token_dtype_follows_vocabulary_size():
    assert token_dtype(50257) == pa.uint16()
    assert token_dtype(65536) == pa.uint16()
    assert token_dtype(128_256) == pa.int32()


@settings(max_examples=40, deadline=None)
@given(st.lists(_WORDISH, max_size=12), st.integers(1, 5), st.integers(1, 9))
def test_windowed_scans_and_gathers_equal_row_by_row_encoding(texts, pieces, scan_bytes):
    """With windows of a few pieces and bytes (a big document's case, at a small size), the
    ids are still those of encoding each row whole."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("llm_assets.kernels.tokenize.ids.GATHER_WINDOW", pieces)
        patch.setattr("llm_assets.kernels.schema.SCAN_WINDOW", scan_bytes)
        _arrow_equals_rows(pa.array(texts + TRICKY, pa.string()))
