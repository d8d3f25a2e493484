"""Shared helpers of the kernels: the single-spaced test that tokenization and normalization use to
skip work on rows that need none, and ``drop_rows``, where every kernel builds its rejects."""

from __future__ import annotations

import unicodedata

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.kernels.schema import (
    DOC_ID,
    DOCUMENT_SCHEMA,
    REASON,
    REJECT_SCHEMA,
    SAMPLE,
    STAGE,
    VALUE,
    drop_rows,
    single_spaced,
)

# Every character Python or Unicode (White_Space, what Rust's regex \s means) calls a space.
_SPACES = [
    c
    for c in map(chr, range(0x3001))
    if c.isspace() or c == "\u180e"  # U+180E was White_Space before Unicode 6.3
]


def _reference(text: str) -> bool:
    if text.startswith(" ") or text.endswith(" ") or "  " in text:
        return False
    return not any((c != " " and c in _SPACES) or unicodedata.category(c) == "Cc" for c in text)


def test_each_kind_of_row():
    rows = ["", "a", "a b", "é ü — “x” …", " a", "a ", "a  b", "a\tb", "a\nb", "a\rb", "\x00"]
    rows += ["a\x7fb", "a\x85b", "a\u00a0b", "a\u2009b", "a\u3000b", "a\u1680b", "😀 😀"]
    assert single_spaced(pa.array(rows)).tolist() == [
        True, True, True, True, False, False, False, False, False, False, False,
        False, False, False, False, False, False, True,
    ]  # fmt: skip


def test_every_unicode_space_and_control_character_is_caught():
    for c in _SPACES + [chr(i) for i in range(0x20)] + [chr(i) for i in range(0x7F, 0xA0)]:
        if c != " ":
            assert not single_spaced(pa.array([f"a{c}b"]))[0], hex(ord(c))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(
            st.sampled_from(["a", " ", "é", "—", "\n", "\u00a0", "\u2003", "\x85", "😀", "\x1f"])
            | st.characters(blacklist_categories=("Cs",)),  # surrogates are not UTF-8
            max_size=12,
        ).map("".join),
        max_size=10,
    ),
    st.integers(0, 3),
)
def test_equals_a_plain_python_reference(texts, start):
    array = pa.array(["x"] * start + texts, pa.string()).slice(start)  # offsets not at zero
    assert single_spaced(array).tolist() == [_reference(t) for t in texts]
    assert single_spaced(pa.array(texts, pa.large_string())).tolist() == [
        _reference(t) for t in texts
    ]


def _documents(n: int) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"doc_id": f"d{i}", "source_file": "f.jsonl", "source_line": i + 1, "text": f"text {i}"}
            for i in range(n)
        ],
        schema=DOCUMENT_SCHEMA,
    )


def test_drop_rows_splits_into_kept_and_rejects_with_reasons_in_row_order():
    table = _documents(5)
    result = drop_rows(
        table, [False, True, False, True, False], stage="s", reasons=["a", "b"], values=["1", None]
    )
    assert result.kept[DOC_ID].to_pylist() == ["d0", "d2", "d4"]
    assert result.rejects.schema == REJECT_SCHEMA
    assert result.rejects[DOC_ID].to_pylist() == ["d1", "d3"]
    assert result.rejects[STAGE].to_pylist() == ["s", "s"]
    assert result.rejects[REASON].to_pylist() == ["a", "b"]
    assert result.rejects[VALUE].to_pylist() == ["1", None]
    assert result.rejects[SAMPLE].to_pylist() == ["text 1", "text 3"]


def test_drop_rows_with_nothing_dropped_returns_every_row_and_no_rejects():
    table = _documents(4)
    for mask in ([False] * 4, pa.chunked_array([[False, False], [False, False]]), []):
        rows = table if len(mask) else table.slice(0, 0)
        result = drop_rows(rows, mask, stage="s", reasons=[], values=[])
        assert result.kept.equals(rows)
        assert result.rejects.num_rows == 0 and result.rejects.schema == REJECT_SCHEMA


def test_drop_rows_refuses_a_reason_count_that_does_not_match_and_a_mask_with_nulls():
    """Bad calls are errors, never rows silently lost (a null mask entry would drop the row from
    both the kept rows and the rejects)."""
    table = _documents(3)
    with pytest.raises(ValueError, match="0 dropped rows but 1 reasons"):
        drop_rows(table, [False] * 3, stage="s", reasons=["a"], values=[None])
    with pytest.raises(ValueError, match="1 dropped rows but 2 reasons"):
        drop_rows(table, [True, False, False], stage="s", reasons=["a", "b"], values=[None, None])
    with pytest.raises(ValueError, match="nulls"):
        drop_rows(table, [True, None, False], stage="s", reasons=["a"], values=[None])


@given(
    st.lists(
        st.lists(
            st.sampled_from(["a", " ", "é", "\n", "\u00a0", "\u2003", "\x85", "\u3000", "\x1f"]),
            max_size=12,
        ).map("".join),
        max_size=10,
    ),
    st.integers(1, 6),
)
def test_a_scan_in_small_windows_equals_the_reference(texts, window):
    """Bytes scanned a window at a time: a character or a double space across two windows is
    still seen."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("llm_assets.kernels.schema.SCAN_WINDOW", window)
        assert single_spaced(pa.array(texts, pa.string())).tolist() == [
            _reference(t) for t in texts
        ]
