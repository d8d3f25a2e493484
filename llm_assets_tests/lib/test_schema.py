"""Shared helpers of the kernels: the single-spaced test that tokenization and normalization use to
skip work on rows that need none."""

from __future__ import annotations

import unicodedata

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.lib.schema import single_spaced

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
