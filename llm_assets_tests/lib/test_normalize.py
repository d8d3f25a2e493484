"""Normalization presets: the vectorized kernel equals the reference definition, the study's rule
is reproduced exactly, and rows emptied by normalization become rejects."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.lib.normalize import (
    EMPTY_AFTER_NORMALIZE,
    PRESETS,
    NormalizeSpec,
    normalize_array,
    normalize_table,
    normalize_text,
)
from llm_assets.lib.schema import DOCUMENT_SCHEMA, REASON, make_doc_id

TRICKY = [
    "Hello,  World!\u00a0Ça va?\r\n\r\n\r\n  x\x07y\tz ",
    "İstanbul \u212aelvin ﬁne",
    "<b>a&amp;b</b> <script>x</script>",
    "!!!",
    "",
    "a\x0bb\x1cc\x85d\u2028e\u3000f",
    "line one  \n  line two\n\n\n\nnext paragraph",
    "e\u0301 (e + combining acute)",
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


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=80), max_size=20), st.sampled_from(PRESETS))
def test_vectorized_kernel_equals_reference_on_random_text(texts, preset):
    spec = NormalizeSpec(preset=preset)
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


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_default_preset_is_idempotent_and_keeps_paragraphs(text):
    spec = NormalizeSpec()
    once = normalize_text(text, spec)
    assert normalize_text(once, spec) == once
    assert "\n\n\n" not in once and "  " not in once


def test_default_preset_keeps_meaning():
    spec = NormalizeSpec()
    assert normalize_text("Ça  va?\tOui!\r\n\r\n\r\nNext", spec) == "Ça va? Oui!\n\nNext"
    assert normalize_text("e\u0301", spec) == "\u00e9"  # NFC composes
    assert normalize_text("ﬁ", NormalizeSpec(unicode_form="NFKC")) == "fi"


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
    from llm_assets.lib.pii import PII_REDACTIONS, PiiSpec

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
    from llm_assets.lib.pii import PII_DENSITY, PiiSpec

    long = "Write to jane@example.com about the long and winding road home " + "again " * 20
    texts = ["a@b.io c@d.io", long.strip()]  # 2 per 2 words; 1 per 30 words (under 0.05)
    result = normalize_table(_docs(texts), NormalizeSpec(pii=PiiSpec(mode="reject")))
    assert result.rejects[REASON].to_pylist() == [PII_DENSITY]
    assert "jane" not in result.rejects["sample"][0].as_py()
    assert result.kept["text"].to_pylist() == [long.strip().replace("jane@example.com", "<EMAIL>")]
