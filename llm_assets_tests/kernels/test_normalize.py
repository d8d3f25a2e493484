"""Normalization presets: the vectorized kernel equals the reference definition, the study's rule
is reproduced exactly, and rows emptied by normalization become rejects."""

from __future__ import annotations

import itertools
import re
import string
from functools import cache

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.kernels.normalize import (
    _ASCII_LOWER_SPECIAL,
    EMPTY_AFTER_NORMALIZE,
    PRESETS,
    NormalizeSpec,
    normalize_array,
    normalize_table,
    normalize_text,
)
from llm_assets.kernels.schema import DOCUMENT_SCHEMA, REASON, make_doc_id

TRICKY = [
    "Hello,  World!\u00a0Ça va?\r\n\r\n\r\n  x\x07y\tz ",
    "İstanbul \u212aelvin ﬁne",
    "<b>a&amp;b</b> <script>x</script>",
    "!!!",
    "",
    "a\x0bb\x1cc\x85d\u2028e\u3000f",
    "line one  \n  line two\n\n\n\nnext paragraph",
    "e\u0301 (e + combining acute)",
    "page one.\x0cpage two\x0bcol\x1fval\x1ebell\x00\x7f\x9b\u2029next \x0c\n\x85 end",
    "Mail a&#64;b.com <EMAIL> &lt;PHONE&gt; x <i>1</i> <b> 2 </b>\t<br/>  3 &nbsp;4 &amp;",
]


def study_normalize(text: str) -> str:
    """The published study's normalizer, verbatim."""
    text = text.lower()
    text = re.sub(r"[^a-zA-Z0-9\s]", "", text)
    text = re.sub(r"\s+", " ", text)
    return text.strip()


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("strip_html", [False, True])
def test_vectorized_kernel_equals_reference_on_tricky_text(preset, strip_html):
    spec = NormalizeSpec(preset=preset, strip_html=strip_html)
    assert normalize_array(pa.array(TRICKY), spec).to_pylist() == [
        normalize_text(t, spec) for t in TRICKY
    ]


_MARKUP_ALPHABET = [
    *"<>&;#x0 \t\nab/\x0b\x0c\x1c\x85\u2029",
    "&amp;",
    "&#64;",
    "&nbsp;",
    "<b>",
    "</p>",
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(st.text(max_size=80), st.lists(st.sampled_from(_MARKUP_ALPHABET)).map("".join)),
        max_size=20,
    ),
    st.sampled_from(PRESETS),
    st.booleans(),
)
def test_vectorized_kernel_equals_reference_on_random_text(texts, preset, strip_html):
    spec = NormalizeSpec(preset=preset, strip_html=strip_html)
    assert normalize_array(pa.array(texts, pa.string()), spec).to_pylist() == [
        normalize_text(t, spec) for t in texts
    ]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_ascii_lower_is_the_study_rule_and_idempotent(text):
    spec = NormalizeSpec(preset="ascii_lower")
    out = normalize_array(pa.array([text]), spec)[0].as_py()
    assert out == study_normalize(text)
    assert normalize_array(pa.array([out]), spec)[0].as_py() == out


# --- ascii_lower: the byte kernel against the reference ------------------------------------------
ASCII_LOWER = NormalizeSpec(preset="ascii_lower")


@cache
def _all_characters() -> tuple[str, ...]:
    """Every character a str can hold and UTF-8 can encode: all code points but the surrogates."""
    return tuple(chr(cp) for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF)


def _contribution(char: str) -> str:
    """What one character becomes under the study's rule before whitespace is collapsed: the ASCII
    letters and digits of its lowercase, a space for each whitespace character, nothing else."""
    return "".join(
        c if c.isascii() and c.isalnum() else " " if c.isspace() else "" for c in char.lower()
    )


@cache
def _unicode_whitespace() -> tuple[str, ...]:
    """Every character for which ``str.isspace`` holds (Python's ``\\s``)."""
    return tuple(c for c in _all_characters() if c.isspace())


def _reference(texts: list[str | None]) -> list[str | None]:
    return [None if t is None else normalize_text(t, ASCII_LOWER) for t in texts]


def _check_ascii_lower(arr: pa.Array | pa.ChunkedArray) -> None:
    """``normalize_array`` equals the reference row by row, keeps the type, and is valid Arrow."""
    out = normalize_array(arr, ASCII_LOWER)
    assert isinstance(out, pa.Array)
    assert out.type == arr.type
    out.validate(full=True)
    assert out.to_pylist() == _reference(arr.to_pylist())


def test_ascii_lower_special_table_is_every_non_ascii_character_that_survives():
    """The kernel drops every non-ASCII character except those in its table: the table must be
    exactly the characters whose lowercase holds an ASCII letter, digit or whitespace."""
    # A character that is its own lowercase and not whitespace contributes only itself: skip it.
    found = {
        c: _contribution(c)
        for c in _all_characters()
        if not c.isascii() and (c.isspace() or c.lower() != c) and _contribution(c)
    }
    assert found == _ASCII_LOWER_SPECIAL
    assert found["\u0130"] == "i" and found["\u212a"] == "k"
    assert {c for c in _unicode_whitespace() if not c.isascii()} <= set(found)


def test_ascii_lower_equals_reference_on_every_code_point():
    """Every code point between letters, and between spaces (where a dropped one leaves a double
    space to collapse), in rows of 256."""
    chars = _all_characters()
    blocks = [chars[i : i + 256] for i in range(0, len(chars), 256)]
    texts = ["A" + "A".join(b) + "A" for b in blocks] + [" x " + " ".join(b) + " " for b in blocks]
    assert normalize_array(pa.array(texts), ASCII_LOWER).to_pylist() == _reference(texts)


def test_ascii_lower_special_and_whitespace_characters_in_every_position():
    """Each special character and each whitespace character alone, doubled, leading, trailing,
    between letters, next to dropped characters (ASCII and multi-byte) and to spaces."""
    chars = sorted(set(_ASCII_LOWER_SPECIAL) | set(_unicode_whitespace()))
    contexts = [
        "{c}",
        "{c}{c}",
        "a{c}b",
        "{c}a{c}",
        "a{c}{c}b",
        "a,{c},b",
        "a {c} b",
        "é{c}é",
        "😀{c}😀",
        "{c}!",
        "!{c}",
        "Z\u00a0{c}\t9",
    ]
    texts = [ctx.format(c=c) for c in chars for ctx in contexts]
    _check_ascii_lower(pa.array(texts))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        ("   ", ""),
        ("!!! ???", ""),
        ("\u00a0\t\n\u3000\x1c", ""),
        ("😀é中文", ""),
        (" \t\u3000Hello ,\u00a0 World!\n\x1c", "hello world"),
        ("a , , b", "a b"),
        ("a,b", "ab"),
        ("a\r\n\r\nb", "a b"),
        ("x\x0by\x0cz\x1fw\x85v\u2028u", "x y z w v u"),
        ("İstanbul \u212aelvin", "istanbul kelvin"),
        ("ΣΑΣ ǅ Ⅻ ①", ""),
        ("a😀b 😀 c", "ab c"),
        ("Tabs\tand  spaces   end  \u2003", "tabs and spaces end"),
        ("ÀÉÎõü 123", "123"),
    ],
)
def test_ascii_lower_examples(text, expected):
    assert normalize_text(text, ASCII_LOWER) == expected
    assert normalize_array(pa.array([text]), ASCII_LOWER).to_pylist() == [expected]


def test_ascii_lower_sliced_chunked_null_and_empty_arrays():
    texts = [" A , b ", None, "", "  ", "é😀", "\u00a0X\u2003y\u3000", None, "İ\u212a!", " z"]
    for kind in (pa.string(), pa.large_string()):
        arr = pa.array(texts, kind)
        _check_ascii_lower(arr)
        _check_ascii_lower(pa.array([], kind))
        _check_ascii_lower(pa.array([None, None], kind))
        _check_ascii_lower(pa.array(["", ""], kind))
        for i in range(len(texts) + 1):
            for j in range(i, len(texts) + 1):
                _check_ascii_lower(arr.slice(i, j - i))
        _check_ascii_lower(pa.chunked_array([], kind))
        _check_ascii_lower(pa.chunked_array([arr.slice(0, 0)], kind))
        _check_ascii_lower(pa.chunked_array([arr.slice(1, 3), arr.slice(0, 0), arr.slice(5)]))
        _check_ascii_lower(pa.chunked_array([arr.slice(2)]))


def test_ascii_lower_rejects_non_string_arrays():
    with pytest.raises(TypeError, match="string"):
        normalize_array(pa.array([b"x"]), ASCII_LOWER)


_BIASED_ALPHABET = (
    sorted(_ASCII_LOWER_SPECIAL)
    + list(string.printable)
    + list("\x1c\x1d\x1e\x1f\x7f\x80\u00c0\u00e9\u0307\u03a3\u2019\u201c\u4e2d\U0001f600")
)
_ROW = st.one_of(
    st.none(),
    st.text(max_size=40),
    st.text(alphabet=st.sampled_from(_BIASED_ALPHABET), max_size=40),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_ROW, max_size=12), st.data())
def test_ascii_lower_equals_reference_on_random_sliced_and_chunked_arrays(texts, data):
    """Random text over all of Unicode and text biased to the characters the kernel treats
    specially, with nulls, in a random slice, split into random chunks."""
    kind = data.draw(st.sampled_from([pa.string(), pa.large_string()]))
    arr = pa.array(texts, kind)
    i = data.draw(st.integers(0, len(texts)))
    j = data.draw(st.integers(i, len(texts)))
    part = arr.slice(i, j - i)
    _check_ascii_lower(part)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(part)), max_size=3)))
    bounds = [0, *cuts, len(part)]
    chunks = [part.slice(a, b - a) for a, b in itertools.pairwise(bounds)]
    _check_ascii_lower(pa.chunked_array(chunks, kind))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_default_preset_is_idempotent_and_keeps_paragraphs(text):
    spec = NormalizeSpec()
    once = normalize_text(text, spec)
    assert normalize_text(once, spec) == once
    _check_default_shape(once)


def _check_default_shape(text: str) -> None:
    """What the ``default`` preset leaves: no more than one blank line, no outer whitespace, and
    per line its indentation (spaces and tabs) then text with single spaces, nothing trailing;
    no whitespace but space, tab and newline."""
    assert "\n\n\n" not in text and text == text.strip()
    assert all(c in " \t\n" for c in text if c.isspace())
    for line in text.split("\n"):
        body = line.lstrip(" \t")
        assert body == body.rstrip(" \t"), repr(line)  # nothing trailing (blank lines are empty)
        assert "  " not in body and "\t" not in body, repr(line)


# --- default: clean rows skip the regex passes ---------------------------------------------------
DEFAULT_FORMS = [NormalizeSpec(), NormalizeSpec(unicode_form="NFKC")]
_CLEAN_AND_DIRTY = [
    " Plain clean text . \n",  # clean once stripped: the fast path
    "already clean",
    "\n\n  leading and trailing \n \n",
    "caf\u00e9 na\u00efve \u2014 \u201cquoted\u201d",  # non-ASCII, NFC already
    "cafe\u0301 composes",  # NFC changes it, then clean
    " \u0301starts with a combining mark ",
    "\ufb01ne ligature",  # NFKC changes it
    "\u00a8starts with a diaeresis",  # NFKC: " \u0308...", a leading space to strip
    "acute \u00b4 accent",  # NFKC: a double space
    "two  spaces",
    "tab\there",
    "inner\nline",
    "cr\r\nlf",
    "nbsp\u00a0here",
    "em\u2003space",
    "bell\x07",
    "c1\x85",
    "",
    " ",
    "\n \n",
    None,
]


def _check_default(arr: pa.Array | pa.ChunkedArray, spec: NormalizeSpec) -> None:
    """``normalize_array`` equals the reference row by row, keeps nulls and is valid Arrow."""
    out = normalize_array(arr, spec)
    assert isinstance(out, pa.Array)
    out.validate(full=True)
    assert out.to_pylist() == [
        None if t is None else normalize_text(t, spec) for t in arr.to_pylist()
    ]


@pytest.mark.parametrize("spec", DEFAULT_FORMS)
def test_default_mixed_clean_and_dirty_rows_sliced_chunked_and_null(spec):
    """Clean rows take the fast path and dirty ones the regex passes; every mix, slice and
    chunking must equal the reference in row order (a wrong scatter would shuffle rows)."""
    for kind in (pa.string(), pa.large_string()):
        arr = pa.array(_CLEAN_AND_DIRTY, kind)
        _check_default(arr, spec)
        _check_default(pa.array([], kind), spec)
        _check_default(pa.array([None, None], kind), spec)
        _check_default(pa.array(_CLEAN_AND_DIRTY[:3], kind), spec)  # all clean
        _check_default(pa.array(_CLEAN_AND_DIRTY[7:12], kind), spec)  # all dirty
        for i in range(0, len(_CLEAN_AND_DIRTY) + 1, 3):
            for j in range(i, len(_CLEAN_AND_DIRTY) + 1, 2):
                _check_default(arr.slice(i, j - i), spec)
        _check_default(pa.chunked_array([arr.slice(1, 4), arr.slice(0, 0), arr.slice(9)]), spec)


_DEFAULT_ALPHABET = list(
    " \n\r\tab.,\x07\x85\u00a0\u00e9\u0301\u2003\u2028\u3000\ufb01\u00a8"
    "\x00\x0b\x0c\x1c\x1d\x1e\x1f\x7f\x84\x86\x9f\u2029"
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.text(max_size=40),
            st.text(alphabet=st.sampled_from(_DEFAULT_ALPHABET), max_size=40),
        ),
        max_size=12,
    ),
    st.sampled_from(DEFAULT_FORMS),
    st.data(),
)
def test_default_equals_reference_on_random_sliced_and_chunked_arrays(texts, spec, data):
    """Random rows, many of them clean (single spaces, letters) and many not, with nulls, in a
    random slice split into random chunks."""
    arr = pa.array(texts, pa.string())
    i = data.draw(st.integers(0, len(texts)))
    j = data.draw(st.integers(i, len(texts)))
    part = arr.slice(i, j - i)
    _check_default(part, spec)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(part)), max_size=3)))
    bounds = [0, *cuts, len(part)]
    chunks = [part.slice(a, b - a) for a, b in itertools.pairwise(bounds)]
    _check_default(pa.chunked_array(chunks, pa.string()), spec)


@pytest.mark.parametrize("spec", DEFAULT_FORMS)
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Unicode's mandatory line breaks (once deleted, joining the words) become a newline
        ("end of page one.\x0cStart of page two", "end of page one.\nStart of page two"),
        ("col1\x0bcol2", "col1\ncol2"),  # vertical tab: Word's manual line break
        ("line one\x85line two", "line one\nline two"),  # NEL
        ("line one\u2028line two\u2029para", "line one\nline two\npara"),  # once a space
        ("a\r\nb\rc", "a\nb\nc"),
        # a blank line at most, spaces before a break trimmed; the one after the last break is
        # the indentation of the line "b": kept
        ("a \x0c \n \x0c b", "a\n\n b"),
        ("\x0c\x0bText\x85", "Text"),
        # the other whitespace controls (information separators U+001C-U+001F) are spaces
        ("field\x1fvalue\x1erecord\x1dgroup\x1cfile", "field value record group file"),
        ("a \x1f\t b", "a b"),
        # control characters that are not whitespace are still removed
        ("bell\x07\x00\x7f\x84\x86\x9f!", "bell!"),
    ],
)
def test_default_whitespace_controls_become_whitespace(spec, text, expected):
    assert normalize_text(text, spec) == expected
    assert normalize_array(pa.array([text, "clean row"]), spec).to_pylist() == [
        expected,
        "clean row",
    ]


def test_default_preset_keeps_meaning():
    spec = NormalizeSpec()
    assert normalize_text("Ça  va?\tOui!\r\n\r\n\r\nNext", spec) == "Ça va? Oui!\n\nNext"
    assert normalize_text("e\u0301", spec) == "\u00e9"  # NFC composes
    assert normalize_text("ﬁ", NormalizeSpec(unicode_form="NFKC")) == "fi"


# --- default: the indentation of a line is kept ------------------------------------------------
@pytest.mark.parametrize("spec", DEFAULT_FORMS)
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # code keeps its structure (the indentation was removed: "def f(x):\nif x:\nreturn 1")
        ("def f(x):\n    if x:\n        return 1", "def f(x):\n    if x:\n        return 1"),
        ("def f(x):\n\tif x:\n\t\treturn  1 \t\n", "def f(x):\n\tif x:\n\t\treturn 1"),
        ("if x:\n  \t  y = 1", "if x:\n  \t  y = 1"),  # mixed indentation: as it is
        # inside a line, runs of spaces and tabs still collapse (after the indentation)
        ("items:\n  - one   two\n  - three\t\tfour  \n", "items:\n  - one two\n  - three four"),
        ("x = 1    # comment\n    y\t=\t2", "x = 1 # comment\n    y = 2"),
        # other Unicode spaces in an indentation are one space each
        ("a\n \u3000\u00a0\x1fb", "a\n    b"),
        # a line of only spaces and tabs is blank; blank lines still collapse to one
        ("a\n    \n\t\n    \n    b", "a\n\n    b"),
        ("a  \t\nb", "a\nb"),  # trailing spaces and tabs go
        # outer whitespace is stripped, the first line's indentation too
        ("\n\n    first\n    second\n\n", "first\n    second"),
        ("\t\tfirst\n\t\tsecond", "first\n\t\tsecond"),
        # line breaks of every kind start a line whose indentation is kept
        ("a\r\n  b\x0c  c\u2028  d", "a\n  b\n  c\n  d"),
    ],
)
def test_default_keeps_the_indentation_of_each_line(spec, text, expected):
    assert normalize_text(text, spec) == expected
    assert normalize_text(expected, spec) == expected
    assert normalize_array(pa.array([text, "clean row", text]), spec).to_pylist() == [
        expected,
        "clean row",
        expected,
    ]


@pytest.mark.parametrize("spec", DEFAULT_FORMS)
def test_default_treats_every_python_whitespace_character_alike(spec):
    """Every ``str.isspace`` character: a line break starts a new line, a tab stays a tab in an
    indentation, any other is a space; the vectorized passes agree with the reference."""
    breaks = set("\n\r\x0b\x0c\x85\u2028\u2029")
    spaces = [chr(cp) for cp in range(0x110000) if chr(cp).isspace()]
    texts = [f"a{c}{c}b\n{c}c" for c in spaces]
    out = normalize_array(pa.array(texts), spec).to_pylist()
    assert out == [normalize_text(t, spec) for t in texts]
    for c, result in zip(spaces, out, strict=True):
        if c in breaks:
            expected = "a\n\nb\n\nc"
        elif c == "\t":
            expected = "a b\n\tc"
        else:
            expected = "a b\n c"
        assert result == expected, repr(c)


_CODE_ALPHABET = [*" \t\n\n\rab:=#\u3000\u00a0\x0c\x07", "    ", "\n    ", "\n\t"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(_CODE_ALPHABET), max_size=30).map("".join), max_size=8))
def test_default_on_indented_text_equals_reference_and_is_idempotent(texts):
    spec = NormalizeSpec()
    out = normalize_array(pa.array(texts, pa.string()), spec).to_pylist()
    assert out == [normalize_text(t, spec) for t in texts]
    for once in out:
        assert normalize_text(once, spec) == once
        _check_default_shape(once)


def _docs(texts: list[str]) -> pa.Table:
    n = len(texts)
    return pa.table(
        {
            "doc_id": [make_doc_id("f.jsonl", i + 1) for i in range(n)],
            "source_file": ["f.jsonl"] * n,
            "source_line": list(range(1, n + 1)),
            "text": texts,
            "metadata": [None] * n,
        },
        schema=DOCUMENT_SCHEMA,
    )


def test_rows_emptied_by_normalization_are_rejects_with_location():
    result = normalize_table(_docs(["Fine text.", "!!! ???", "  "]), NormalizeSpec("ascii_lower"))
    assert result.kept["text"].to_pylist() == ["fine text"]
    assert result.rejects[REASON].to_pylist() == [EMPTY_AFTER_NORMALIZE] * 2
    assert result.rejects["source_line"].to_pylist() == [2, 3]
    assert result.rejects["sample"].to_pylist() == ["!!! ???", "  "]
    assert result.kept.num_rows + result.rejects.num_rows == 3


def test_empty_table_and_schema_preserved():
    result = normalize_table(_docs([]), NormalizeSpec())
    assert result.kept.schema == DOCUMENT_SCHEMA
    assert result.rejects.num_rows == 0
    assert normalize_table(_docs(["a"]), NormalizeSpec()).kept.schema == DOCUMENT_SCHEMA


def test_bad_preset_is_a_clear_error():
    with pytest.raises(ValueError, match="preset"):
        NormalizeSpec(preset="lowercase")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unicode_form"):
        NormalizeSpec(unicode_form="NFD")  # type: ignore[arg-type]


def test_pii_is_redacted_before_the_preset_and_counted():
    """``ascii_lower`` would strip the ``@`` and dots of an email: PII goes first."""
    from llm_assets.kernels.pii import PII_REDACTIONS, PiiSpec

    texts = ["Mail jane.doe@example.com or call (555) 123-4567.", "Nothing here.", "a@b.io"]
    result = normalize_table(
        _docs(texts), NormalizeSpec(preset="ascii_lower", pii=PiiSpec(mode="redact"))
    )
    assert result.kept["text"].to_pylist() == [
        "mail email or call phone",
        "nothing here",
        "email",
    ]
    assert result.kept[PII_REDACTIONS].to_pylist() == [2, 0, 1]


def test_pii_reject_mode_drops_dense_documents_with_the_reason():
    from llm_assets.kernels.pii import PII_DENSITY, PiiSpec

    long = "Write to jane@example.com about the long and winding road home " + "again " * 20
    texts = ["a@b.io c@d.io", long.strip()]  # 2 per 2 words; 1 per 30 words (under 0.05)
    result = normalize_table(_docs(texts), NormalizeSpec(pii=PiiSpec(mode="reject")))
    assert result.rejects[REASON].to_pylist() == [PII_DENSITY]
    assert "jane" not in result.rejects["sample"][0].as_py()
    assert result.kept["text"].to_pylist() == [long.strip().replace("jane@example.com", "<EMAIL>")]


# --- HTML, then PII, then the preset ---------------------------------------------------------
def _pii_docs(texts: list[str]) -> pa.Table:
    return _docs(texts)


_HTML_PII = [
    "Write to a@b.com or call 555-123-4567 today.",  # placeholders must not be taken for tags
    "Contact: john&#64;example.com for details",  # entity-encoded PII must be decoded first
    "Mail: jane.doe&commat;example.org",
    "Phone: 555&#45;123&#45;4567",
    "Card: <span>4111</span> 1111 1111 1111",  # tags between the groups
    "Card 4111&nbsp;1111&nbsp;1111&nbsp;1111",
    "IP <b>10.0.0.1</b>",
    "<p>No PII &amp; no problem</p>",
]


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        (
            "default",
            [
                "Write to <EMAIL> or call <PHONE> today.",
                "Contact: <EMAIL> for details",
                "Mail: <EMAIL>",
                "Phone: <PHONE>",
                "Card: <CREDIT_CARD>",
                "Card <CREDIT_CARD>",
                "IP <IP_ADDRESS>",
                "No PII & no problem",
            ],
        ),
        (
            "none",
            [
                "Write to <EMAIL> or call <PHONE> today.",
                "Contact: <EMAIL> for details",
                "Mail: <EMAIL>",
                "Phone: <PHONE>",
                "Card: <CREDIT_CARD>",
                "Card <CREDIT_CARD>",
                "IP <IP_ADDRESS> ",
                "\nNo PII & no problem\n",
            ],
        ),
    ],
)
def test_strip_html_runs_before_pii_so_placeholders_survive_and_encoded_pii_is_redacted(
    preset, expected
):
    """Once every placeholder was deleted as a tag ("Write to or call today.") and decoded PII
    (``john&#64;example.com``) came out in clear, uncounted."""
    from llm_assets.kernels.pii import PII_REDACTIONS, PiiSpec

    spec = NormalizeSpec(preset=preset, strip_html=True, pii=PiiSpec(mode="redact"))
    result = normalize_table(_pii_docs(_HTML_PII), spec)
    assert result.kept["text"].to_pylist() == expected
    assert result.kept[PII_REDACTIONS].to_pylist() == [2, 1, 1, 1, 1, 1, 1, 0]


def test_ascii_lower_ignores_strip_html_and_turns_placeholders_into_words():
    """The study's rule: no HTML stripping, and placeholders lose ``<``, ``>`` and ``_``."""
    from llm_assets.kernels.pii import PiiSpec

    spec = NormalizeSpec(preset="ascii_lower", strip_html=True, pii=PiiSpec(mode="redact"))
    texts = ["Write to a@b.com, card 4111 1111 1111 1111 <b>today</b>."]
    assert normalize_table(_pii_docs(texts), spec).kept["text"].to_pylist() == [
        "write to email card creditcard btodayb"
    ]


def test_strip_html_turns_a_run_of_tags_and_the_spaces_around_it_into_one_break():
    """Inline markup is a space; a run holding a block or table-cell tag a line break, so that
    table cells never join into one number."""
    spec = NormalizeSpec(preset="none", strip_html=True)
    cases = {
        "a <b>x</b> c": "a x c",
        "<td>1</td> <td>2</td>\t<td>3</td>": "\n1\n2\n3\n",
        "x<br/>y": "x\ny",
        "x<BR>y<Br >z<hr class='a'>w": "x\ny\nz\nw",
        "<span>a</span><press>b</press>": " a b ",  # not a block tag: <press>, </press>
        # A stray < before a block and a > after it are no tag (the text between was deleted).
        "If x < 5 <br> then y > 3": "If x < 5\nthen y > 3",
        "<p>3 < 4</p><p>and 5 > 2</p>": "\n3 < 4\nand 5 > 2\n",
        "a<dİv>b": "a b",  # ASCII case folding in both engines: İ is not i
        "line\n<p>next": "line\n\nnext",  # a newline is kept
        "a &lt;b&gt; c": "a <b> c",  # entities are decoded after the tags are gone
        "no markup  at all": "no markup  at all",
    }
    assert [normalize_text(t, spec) for t in cases] == list(cases.values())
    assert normalize_array(pa.array(list(cases)), spec).to_pylist() == list(cases.values())


def test_strip_html_in_reject_mode_and_samples_of_emptied_rows():
    """Density is counted on the decoded text. A row emptied by the preset keeps the text as it
    came in as its sample when PII is off; with PII on, the stripped text redaction saw (markup
    may hide PII that stripping dropped and redaction never saw)."""
    from llm_assets.kernels.pii import PII_DENSITY, PiiSpec

    texts = ["<i>a&#64;b.com</i>", '<a href="mailto:x@y.com"></a>', "Fine text.", "<p>&#64;</p>"]
    spec = NormalizeSpec(strip_html=True, pii=PiiSpec(mode="reject"))
    result = normalize_table(_pii_docs(texts), spec)
    assert result.kept["text"].to_pylist() == ["Fine text.", "@"]
    assert result.rejects[REASON].to_pylist() == [PII_DENSITY, EMPTY_AFTER_NORMALIZE]
    assert result.rejects["sample"].to_pylist() == [" <EMAIL> ", " "]
    result = normalize_table(_pii_docs(texts), NormalizeSpec(strip_html=True))
    assert result.rejects["sample"].to_pylist() == ['<a href="mailto:x@y.com"></a>']
    assert result.kept["text"].to_pylist() == ["a@b.com", "Fine text.", "@"]


def test_numbers_in_table_cells_are_not_one_card_number():
    """Four cells of 4-digit numbers that form a Luhn-valid 16 digits: once the tags became
    single spaces, PII redaction read them as a card printed 4-4-4-4 and redacted them (29 of 50
    numeric tables in a review)."""
    from llm_assets.kernels.pii import PII_REDACTIONS, PiiSpec, luhn_valid

    last = next(f"599{d}" for d in range(10) if luhn_valid(f"510937192768599{d}"))
    cells = ["5109", "3719", "2768", last]
    html_row = "<table><tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr></table>"
    for preset in ("default", "none"):
        spec = NormalizeSpec(preset=preset, strip_html=True, pii=PiiSpec(mode="redact"))
        result = normalize_table(_pii_docs([html_row]), spec)
        assert result.kept[PII_REDACTIONS].to_pylist() == [0]
        assert result.kept["text"].to_pylist()[0].split() == cells


@pytest.mark.parametrize("form", ["NFC", "NFKC"])
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("A\x08\u0300", "\xc0"),
        ("cafe\x00\u0301 au lait", "caf\xe9 au lait"),
        ("\u1100\x08\u1161", "\uac00"),
    ],
)
def test_default_output_is_normalized_after_control_characters_are_removed(form, text, expected):
    """A control character between a letter and its combining mark (or two Hangul jamo) blocked
    their composition; removed after Unicode normalization, it left the pair apart: the output
    was not NFC (nor NFKC), a second pass changed it, and exact dedup kept ``café`` spelled both
    ways as two documents. Both paths normalize again after removing it."""
    spec = NormalizeSpec(unicode_form=form)
    got = normalize_array(pa.array([text, "plain clean text"]), spec).to_pylist()
    assert got == [expected, "plain clean text"]
    assert normalize_array(pa.array([text]), spec).to_pylist() == [expected]  # every row dirty
    assert normalize_text(text, spec) == expected
    assert normalize_text(expected, spec) == expected
