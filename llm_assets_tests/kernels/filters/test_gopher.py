"""Gopher quality and repetition rules: every check passes one crafted document and rejects another
with its reason and value, lets it through when turned off; the vectorized measures equal a plain
Python reading of the definitions on random documents; nothing is lost, nothing is added."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_assets.kernels.filters.base import FILTER_STAGE
from llm_assets.kernels.filters.flagged import PUNCTUATION
from llm_assets.kernels.filters.gopher_quality import (
    ALPHA_WORDS_RATIO,
    BULLET_LINES_RATIO,
    ELLIPSIS_LINES_RATIO,
    ELLIPSIS_WORD_RATIO,
    HASH_WORD_RATIO,
    MEAN_WORD_LENGTH_TOO_LONG,
    MEAN_WORD_LENGTH_TOO_SHORT,
    TOO_FEW_STOP_WORDS,
    TOO_FEW_WORDS,
    TOO_MANY_WORDS,
    QualitySpec,
    quality_filter,
    quality_measures,
)
from llm_assets.kernels.filters.gopher_repetition import (
    DUP_LINE_CHAR_RATIO,
    DUP_LINE_RATIO,
    DUP_PARA_CHAR_RATIO,
    DUP_PARA_RATIO,
    RepetitionSpec,
    dup_ngram_reason,
    repetition_filter,
    repetition_measures,
    top_ngram_reason,
)
from llm_assets.kernels.schema import REJECT_SCHEMA
from llm_assets.kernels.words import factorize

PROSE = (
    "The committee met in the spring to review plans for a new library. Members agreed that "
    "the building should open with a reading room, a children's wing and a small gallery for "
    "local artists. Funding came from the town and from a private donor who had grown up "
    "nearby. Work began in autumn and took two years, slowed by a wet winter and a shortage "
    "of stone."
)
"""Ordinary prose: 67 words of 289 characters, 12 stop words; passes every default rule."""
PROSE_WORD_CHARS = 289

NO_STOP_WORDS = (
    "Green gardens grow near quiet rivers where old trees shade narrow paths. Visitors walk "
    "slowly, reading signs about local birds, insects, flowers. Children run across open lawns "
    "while parents rest under wide umbrellas. Small boats drift past stone bridges; fishermen "
    "wait patiently for trout. Evening light turns every window golden before lamps appear "
    "along quiet streets near busy markets selling fresh bread."
)
"""62 words, none of them a stop word."""

LINES = [
    "The town council approved the budget for next year.",  # 51 characters
    "Residents asked for more buses on the northern routes.",  # 54
    "A new school will open in the eastern district in May.",  # 54
    "Volunteers cleaned the river banks over the weekend.",  # 52
]
PARAS = [LINES[0] + "\n" + LINES[1], LINES[2] + "\n" + LINES[3], PROSE]  # 106, 107, 355 chars
TREE = "the garden of the house has a tall green tree"
BULLETED = ["• ", "- ", "  * ", "● ", "○ ", "▪ ", "‣ ", "⁃ ", "\t- ", "-"]
PASSAGE = "rare violet orchids bloom beneath ancient cedar forests during spring rains".split()  # noqa: SIM905
"""11 words of 65 characters, sharing no word with PROSE."""


def _table(texts: list[str]) -> pa.Table:
    n = len(texts)
    return pa.table(
        {
            "doc_id": pa.array([f"d{i}" for i in range(n)], pa.string()),
            "source_file": pa.array(["shard/f.jsonl"] * n, pa.string()),
            "source_line": pa.array(range(10, 10 + n), pa.int64()),
            "text": pa.array(texts, pa.string()),
            "metadata": pa.array([None] * n, pa.string()),
        }
    )


def _rejected(result) -> list[tuple[str, str]]:
    return list(
        zip(result.rejects["reason"].to_pylist(), result.rejects["value"].to_pylist(), strict=True)
    )


def test_ordinary_prose_passes_every_default_rule():
    table = _table([PROSE, "\n\n".join(PARAS)])
    assert quality_filter(table, QualitySpec()).kept.num_rows == 2
    assert repetition_filter(table, RepetitionSpec()).kept.num_rows == 2


# --- quality: (spec overrides, check's field, failing doc, reason, value, passing doc) ----------
QUALITY_CASES = [
    ({}, "min_words", "A note of the plan to build a new library.", TOO_FEW_WORDS, "10", PROSE),
    (
        {"max_words": 100},
        "max_words",
        PROSE + "\n\n" + PROSE,
        TOO_MANY_WORDS,
        "134",
        PROSE,
    ),
    (
        {},
        "min_mean_word_length",
        " ".join(["we go to the sea and be at ease"] * 6),  # 23 / 9 characters a word
        MEAN_WORD_LENGTH_TOO_SHORT,
        "2.56",
        PROSE,
    ),
    (
        {},
        "max_mean_word_length",
        " ".join(["the internationalization of telecommunications infrastructure"] * 10),
        MEAN_WORD_LENGTH_TOO_LONG,
        "11.40",
        PROSE,
    ),
    (
        {},
        "max_symbol_word_ratio",
        "#news " * 8 + "#a#b " + PROSE,  # 10 hashes, 76 words
        HASH_WORD_RATIO,
        "0.132",
        "#news " * 7 + "and then... so… " * 3 + PROSE,  # 7 / 83 hashes, 6 / 83 ellipses
    ),
    (
        {},
        "max_symbol_word_ratio",
        "and then... " * 4 + "so…… " * 2 + PROSE,  # 8 ellipses, 77 words
        ELLIPSIS_WORD_RATIO,
        "0.104",
        "and then... " * 3 + "so…… " * 2 + PROSE,  # 7 / 75
    ),
    (
        {},
        "max_bullet_lines_ratio",
        "\n".join(b + TREE for b in BULLETED),
        BULLET_LINES_RATIO,
        "1.0",
        "\n".join(b + TREE for b in BULLETED[:9]) + "\n" + TREE,  # 9 of 10: at the bound
    ),
    (
        {},
        "max_ellipsis_lines_ratio",
        "\n".join([TREE + "...", TREE + "…", TREE + "... ", TREE + "…"] + [TREE] * 6),
        ELLIPSIS_LINES_RATIO,
        "0.4",
        "\n".join([TREE + "...", TREE + "…", TREE + "..."] + [TREE + " ... and more"] * 7),
    ),
    (
        {},
        "min_alpha_words_ratio",
        PROSE + " 1999" * 17,  # 67 of 84 words have a letter
        ALPHA_WORDS_RATIO,
        "0.798",
        PROSE + " 1999" * 16 + " 1999s",  # 68 of 84
    ),
    (
        {},
        "min_stop_words",
        "The " + NO_STOP_WORDS,
        TOO_FEW_STOP_WORDS,
        "1",
        "The " + NO_STOP_WORDS + " (AND),",  # lowercased and stripped: a stop word
    ),
]


@pytest.mark.parametrize(
    ("overrides", "field", "failing", "reason", "value", "passing"),
    QUALITY_CASES,
    ids=[case[3] for case in QUALITY_CASES],
)
def test_each_quality_check(overrides, field, failing, reason, value, passing):
    spec = QualitySpec(**overrides)
    result = quality_filter(_table([passing, failing]), spec)
    assert _rejected(result) == [(reason, value)]
    assert result.kept["text"].to_pylist() == [passing]
    assert result.rejects["doc_id"].to_pylist() == ["d1"]
    # Off, the failing document passes: it fails no other check.
    off = QualitySpec(**{**overrides, field: None})
    assert quality_filter(_table([failing]), off).kept.num_rows == 1


def test_hashes_and_ellipses_are_bounded_separately():
    """Gopher's bound holds "for either the hash symbol or the ellipsis" (datatrove: two checks):
    6 % hashes and 6 % ellipses pass, though together they are 12 %."""
    words = (PROSE + " " + PROSE).split()[:88]
    text = " ".join(["#tag"] * 6 + ["then..."] * 3 + ["so…"] * 3 + words)  # 100 words
    measures = quality_measures(pa.array([text]))
    assert measures[HASH_WORD_RATIO].tolist() == [0.06]
    assert measures[ELLIPSIS_WORD_RATIO].tolist() == [0.06]
    assert quality_filter(_table([text]), QualitySpec()).kept.num_rows == 1
    spec = QualitySpec(max_symbol_word_ratio=0.05)  # one bound for both: hashes fail first
    assert _rejected(quality_filter(_table([text]), spec)) == [(HASH_WORD_RATIO, "0.06")]


def test_quality_reason_is_the_first_failing_check_in_field_order():
    # Too short, no stop words, mostly numbers: reported as too short.
    result = quality_filter(_table(["12 34 56 seven"]), QualitySpec())
    assert _rejected(result) == [(TOO_FEW_WORDS, "4")]
    result = quality_filter(_table(["12 34 56 seven"]), QualitySpec(min_words=None))
    assert _rejected(result) == [(MEAN_WORD_LENGTH_TOO_SHORT, "2.75")]


def test_everything_off_keeps_everything():
    off = QualitySpec(
        **{name: None for name in QualitySpec.__dataclass_fields__ if name != "stop_words"}
    )
    texts = ["", "   ", "#", "...", "- a", *[case[2] for case in QUALITY_CASES]]
    assert quality_filter(_table(texts), off).kept.num_rows == len(texts)
    rep_off = RepetitionSpec(
        max_dup_line_ratio=None,
        max_dup_para_ratio=None,
        max_dup_line_char_ratio=None,
        max_dup_para_char_ratio=None,
        top_ngram_char_ratios=((2, None),),
        dup_ngram_char_ratios=(),
    )
    texts.append("a a a a a a")
    assert repetition_filter(_table(texts), rep_off).kept.num_rows == len(texts)


def test_custom_stop_words():
    spec = QualitySpec(stop_words=("gardens", "Quiet"))
    assert quality_measures(pa.array([NO_STOP_WORDS]), spec)["stop_words"].tolist() == [3]


# --- the stop-word rule is English: it skips documents identified as another language ----------
GERMAN = (
    "Der Gemeinderat hat gestern Abend einen neuen Haushalt für die Renovierung der Grundschulen "
    "im Norden beschlossen. Nach monatelangen Debatten zwischen Mehrheit und Opposition sollen "
    "zuerst die Dächer, danach die Fenster und Heizungen erneuert werden. Eltern begrüßten "
    "diese Entscheidung, während Lehrer zusätzliche Klassenzimmer forderten. Außerdem bleibt "
    "die Bibliothek künftig abends länger geöffnet, damit Schüler vor Prüfungen ruhig lernen "
    "können."
)
"""German prose: 58 words, none of them an English stop word; passes every other default rule."""


def _with_language(
    texts: list[str], codes: list[str | None], kind: pa.DataType | None = None
) -> pa.Table:
    """Documents as the stop-word step sees them after language identification."""
    return _table(texts).append_column("language", pa.array(codes, kind or pa.string()))


def test_stop_word_rule_skips_documents_identified_as_another_language():
    """With a language column, German prose without English stop words is kept (it was rejected
    as too_few_stop_words: every German document was, with languages [en, de]); English without
    stop words, or a document without a language, is still rejected."""
    assert quality_measures(pa.array([GERMAN]))["stop_words"].tolist() == [0]
    texts = [GERMAN, NO_STOP_WORDS, PROSE, NO_STOP_WORDS, GERMAN]
    codes = ["de", "en", "en", None, "fr"]
    for kind in (pa.string(), pa.dictionary(pa.int32(), pa.string())):
        result = quality_filter(_with_language(texts, codes, kind), QualitySpec())
        assert result.kept["doc_id"].to_pylist() == ["d0", "d2", "d4"]
        assert _rejected(result) == [(TOO_FEW_STOP_WORDS, "0"), (TOO_FEW_STOP_WORDS, "0")]
        assert result.rejects["doc_id"].to_pylist() == ["d1", "d3"]
    # The stop-word rule alone, as filter_table runs it after language identification.
    kept_fields = ("stop_words", "min_stop_words")
    only = QualitySpec(
        **{name: None for name in QualitySpec.__dataclass_fields__ if name not in kept_fields}
    )
    result = quality_filter(_with_language(texts, codes), only)
    assert result.kept["doc_id"].to_pylist() == ["d0", "d2", "d4"]


def test_other_quality_rules_still_apply_to_other_languages():
    texts = [
        "Der Rat tagt morgen im Rathaus.",  # too few words
        GERMAN + " #Haushalt" * 8,  # 8 hashes in 66 words
        GERMAN,
    ]
    result = quality_filter(_with_language(texts, ["de", "de", "de"]), QualitySpec())
    assert _rejected(result) == [(TOO_FEW_WORDS, "6"), (HASH_WORD_RATIO, "0.121")]
    assert result.kept["doc_id"].to_pylist() == ["d2"]


def test_without_language_identification_the_stop_word_rule_checks_every_document():
    """No language column (language identification off): as before, German prose is rejected
    for lacking English stop words."""
    result = quality_filter(_table([GERMAN, NO_STOP_WORDS, PROSE]), QualitySpec())
    assert _rejected(result) == [(TOO_FEW_STOP_WORDS, "0"), (TOO_FEW_STOP_WORDS, "0")]
    assert result.kept["doc_id"].to_pylist() == ["d2"]
    empty = _with_language([], [])
    assert quality_filter(empty, QualitySpec()).kept.num_rows == 0


@pytest.mark.parametrize(
    ("languages", "expected"),
    [
        # Keep English and German: the German document passes the stop-word rule.
        (("en", "de"), {"d1": TOO_FEW_STOP_WORDS, "d2": TOO_FEW_WORDS}),
        # Only annotate: every language is kept, the rule checks only English.
        ((), {"d1": TOO_FEW_STOP_WORDS, "d2": TOO_FEW_WORDS}),
        # English only: German is the wrong language, before the stop-word rule runs.
        (("en",), {"d0": "wrong_language", "d1": TOO_FEW_STOP_WORDS, "d2": TOO_FEW_WORDS}),
        # Language identification off: the rule checks every document, as before.
        (None, {"d0": TOO_FEW_STOP_WORDS, "d1": TOO_FEW_STOP_WORDS, "d2": TOO_FEW_WORDS}),
    ],
)
def test_filter_chain_with_several_languages_keeps_german_prose(languages, expected):
    from llm_assets.kernels.filters.chain import FilterSpec, filter_table
    from llm_assets.kernels.filters.language import LanguageSpec

    table = _table([GERMAN, NO_STOP_WORDS, "Der Rat tagt morgen im Rathaus."])
    table = table.append_column("n_tokens", pa.array([100, 100, 100], pa.int32()))
    language = None if languages is None else LanguageSpec(languages=languages)
    spec = FilterSpec.standard(exact_dedup=None, near_dedup=None, language=language)
    result = filter_table(table, spec)
    reasons = result.rejects["reason"].to_pylist()
    assert dict(zip(result.rejects["doc_id"].to_pylist(), reasons, strict=True)) == expected
    assert result.kept["doc_id"].to_pylist() == ([] if "d0" in expected else ["d0"])


# --- repetition: one check on at a time -------------------------------------------------------
_NOTHING = {
    "max_dup_line_ratio": None,
    "max_dup_para_ratio": None,
    "max_dup_line_char_ratio": None,
    "max_dup_para_char_ratio": None,
    "top_ngram_char_ratios": (),
    "dup_ngram_char_ratios": (),
}


def _only(**check) -> RepetitionSpec:
    return RepetitionSpec(**{**_NOTHING, **check})


L0, L1, L2, L3 = LINES
P0, P1, P2 = PARAS

REPETITION_CASES = [
    (
        "max_dup_line_ratio",
        0.3,
        "\n".join([L0, L1, L0, L2, L0]),  # 2 of 5 lines
        DUP_LINE_RATIO,
        "0.4",
        "\n\n".join([L0, L1, L2, L3]) + "\n" + L0,  # 1 of 5: blank lines are no lines
    ),
    (
        "max_dup_para_ratio",
        0.3,
        "\n\n".join([P0, P1, P0, P0]),  # 2 of 4 paragraphs
        DUP_PARA_RATIO,
        "0.5",
        "\n\n\n".join([P0, P1, P2]) + "\n\n" + P0,  # 1 of 4
    ),
    (
        "max_dup_line_char_ratio",
        0.2,
        "\n".join([L0, L1, L0]),  # 51 of 158 characters
        DUP_LINE_CHAR_RATIO,
        "0.323",
        "\n".join([L0, L1, L2, L3, L0]),  # 51 of 266
    ),
    (
        "max_dup_para_char_ratio",
        0.2,
        "\n\n".join([P0, P1, P0]),  # 106 of 323
        DUP_PARA_CHAR_RATIO,
        "0.328",
        "\n\n".join([P0, P1, P2, P0]),  # 106 of 680
    ),
]


@pytest.mark.parametrize(
    ("field", "bound", "failing", "reason", "value", "passing"),
    REPETITION_CASES,
    ids=[case[3] for case in REPETITION_CASES],
)
def test_each_line_and_paragraph_check(field, bound, failing, reason, value, passing):
    result = repetition_filter(_table([passing, failing]), _only(**{field: bound}))
    assert _rejected(result) == [(reason, value)]
    assert result.kept["text"].to_pylist() == [passing]
    assert repetition_filter(_table([failing]), _only(**{field: None})).kept.num_rows == 1


TOP_PHRASE = ["buy", "cheap", "shoes", "now"]
# n, bound, repeats that fail, repeats that pass: k * chars / (289 + k * chars) around the bound.
TOP_CASES = [(2, 0.20, 10, 8), (3, 0.18, 6, 4), (4, 0.16, 5, 3)]


@pytest.mark.parametrize(("n", "bound", "fail_k", "pass_k"), TOP_CASES)
def test_each_top_ngram_check(n, bound, fail_k, pass_k):
    phrase = " ".join(TOP_PHRASE[:n])
    chars = len(phrase) - (n - 1)  # characters of the words, not of the spaces
    failing, passing = (PROSE + (" " + phrase) * k for k in (fail_k, pass_k))
    spec = _only(top_ngram_char_ratios=((n, bound),))
    result = repetition_filter(_table([passing, failing]), spec)
    expected = fail_k * chars / (PROSE_WORD_CHARS + fail_k * chars)
    assert _rejected(result) == [(top_ngram_reason(n), f"{expected:.3f}")]
    assert result.kept["text"].to_pylist() == [passing]
    off = _only(top_ngram_char_ratios=((n, None),))
    assert repetition_filter(_table([failing]), off).kept.num_rows == 1


@pytest.mark.parametrize(
    ("n", "bound"), [(5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)]
)
def test_each_duplicated_ngram_check(n, bound):
    # The passage twice: every word of the second copy is in a repeated n-gram (65 characters of
    # 289 + 2 * 65). Its first n - 1 words twice: no n-gram repeats.
    failing = PROSE + " " + " ".join(PASSAGE * 2)
    passing = PROSE + " " + " ".join(PASSAGE[: n - 1] * 2)
    result = repetition_filter(
        _table([passing, failing]), _only(dup_ngram_char_ratios=((n, bound),))
    )
    assert _rejected(result) == [(dup_ngram_reason(n), "0.155")]
    assert result.kept["text"].to_pylist() == [passing]
    off = _only(dup_ngram_char_ratios=((n, None),))
    assert repetition_filter(_table([failing]), off).kept.num_rows == 1


def test_overlapping_repeats_count_each_word_once():
    m = repetition_measures(
        pa.array(["aa bb aa bb aa bb", "aa aa aa aa", "aa bb cc"]),
        RepetitionSpec(top_ngram_char_ratios=((2, 0.2),), dup_ngram_char_ratios=((2, 0.2),)),
    )
    # 2-grams at 2, 3, 4 repeat earlier ones and cover words 2..5: 8 of 12 characters.
    # "aa aa" occurs 3 times (overlapping), covering words 1..3; the top share counts every
    # occurrence, so it can exceed 1.
    assert m[dup_ngram_reason(2)].tolist() == pytest.approx([8 / 12, 6 / 8, 0.0])
    assert m[top_ngram_reason(2)].tolist() == pytest.approx([12 / 12, 12 / 8, 0.0])


def test_top_ngram_ties_go_to_the_earliest():
    # "xx y", "y zzzz" and "zzzz w" all occur twice: the earliest, "xx y" (3 of 16 characters),
    # is the top 2-gram.
    text = "xx y zzzz w xx y zzzz w"
    m = repetition_measures(pa.array([text]), _only(top_ngram_char_ratios=((2, 0.5),)))
    assert m[top_ngram_reason(2)].tolist() == pytest.approx([2 * 3 / 16])


def test_ngrams_never_cross_documents():
    texts = ["alpha beta gamma delta", "epsilon alpha beta gamma delta zeta"]
    m = repetition_measures(pa.array(texts), RepetitionSpec(dup_ngram_char_ratios=((2, 0.1),)))
    assert m[dup_ngram_reason(2)].tolist() == [0.0, 0.0]
    assert m[top_ngram_reason(2)].tolist() == [0.0, 0.0]
    assert m[DUP_LINE_RATIO].tolist() == [0.0, 0.0]


def test_repetition_reason_is_the_first_failing_check_in_field_order():
    looped = "\n".join([L0, L1, L0, L0, L2])  # fails lines, line characters and n-grams
    result = repetition_filter(_table([looped]), RepetitionSpec())
    assert _rejected(result) == [(DUP_LINE_RATIO, "0.4")]
    # Top 2-gram "buy cheap": 6 * 8 of 385 characters (12.5 %, passes); top 3-gram 6 * 13 (20.3 %).
    spam = PROSE + " buy cheap shoes now" * 6
    assert _rejected(repetition_filter(_table([spam]), RepetitionSpec())) == [
        (top_ngram_reason(3), "0.203")
    ]
    no_top = RepetitionSpec(top_ngram_char_ratios=())
    assert [r for r, _ in _rejected(repetition_filter(_table([spam]), no_top))] == [
        dup_ngram_reason(5)
    ]


# --- rejects, rows, schema ---------------------------------------------------------------------
def test_rejects_carry_the_documents_location_and_sample():
    table = _table([PROSE, "too short to keep", PROSE, "\n".join([L0] * 5)])
    quality = quality_filter(table, QualitySpec())
    assert quality.rejects.schema == REJECT_SCHEMA
    assert quality.rejects.to_pylist() == [
        {
            "doc_id": "d1",
            "source_file": "shard/f.jsonl",
            "source_line": 11,
            "stage": FILTER_STAGE,
            "reason": TOO_FEW_WORDS,
            "value": "4",
            "sample": "too short to keep",
        },
        {
            "doc_id": "d3",
            "source_file": "shard/f.jsonl",
            "source_line": 13,
            "stage": FILTER_STAGE,
            "reason": TOO_FEW_WORDS,
            "value": "45",
            "sample": "\n".join([L0] * 5)[:200],
        },
    ]
    repetition = repetition_filter(table, RepetitionSpec())
    assert repetition.rejects["doc_id"].to_pylist() == ["d3"]
    assert repetition.rejects["source_line"].to_pylist() == [13]
    # The kernels only drop rows: the kept rows keep every column, in order.
    for result in (quality, repetition):
        assert result.kept.schema == table.schema
    assert quality.kept["doc_id"].to_pylist() == ["d0", "d2"]


def test_empty_table():
    table = _table([])
    for result in (
        quality_filter(table, QualitySpec()),
        repetition_filter(table, RepetitionSpec()),
    ):
        assert result.kept.num_rows == 0 and result.kept.schema == table.schema
        assert result.rejects.num_rows == 0 and result.rejects.schema == REJECT_SCHEMA
    assert all(len(v) == 0 for v in quality_measures(pa.array([], pa.string())).values())
    assert all(len(v) == 0 for v in repetition_measures(pa.array([], pa.string())).values())


def test_chunked_columns_empty_and_null_texts():
    texts = pa.chunked_array([[PROSE, ""], [], ["   ", None, "\n\n", "one"]], pa.string())
    q = quality_measures(texts, QualitySpec())
    r = repetition_measures(texts, RepetitionSpec())
    assert q["words"].tolist() == [67, 0, 0, 0, 0, 1]
    assert q["mean_word_length"][1:].tolist() == [0.0, 0.0, 0.0, 0.0, 3.0]
    for name, values in r.items():
        assert values[1:5].tolist() == [0.0] * 4, name
    large = pa.array([PROSE, "x", "a\n\n\nb\n\n\n\n\na"], pa.large_string())
    assert quality_measures(large, QualitySpec())["words"].tolist() == [67, 1, 3]
    assert repetition_measures(large, RepetitionSpec())[DUP_PARA_RATIO].tolist() == [0, 0, 1 / 3]
    # A table whose text column has several chunks: rows keep their order.
    table = pa.concat_tables([_table(["short one", PROSE]), _table([PROSE, "\n".join([L0] * 9)])])
    assert table["text"].num_chunks == 2
    quality = quality_filter(table, QualitySpec())
    assert _rejected(quality) == [(TOO_FEW_WORDS, "2")]
    repetition = repetition_filter(quality.kept, RepetitionSpec())
    assert _rejected(repetition) == [(DUP_LINE_RATIO, "0.889")]
    assert repetition.kept["doc_id"].to_pylist() == ["d1", "d0"]


# --- the measures equal a plain reading of the definitions --------------------------------------
BULLETS = ("•", "●", "○", "▪", "-", "*", "‣", "⁃")


def _ref_quality(text: str, stop_words: tuple[str, ...]) -> dict[str, float]:
    words = text.split()
    n = len(words)
    lines = [line for line in text.split("\n") if line]
    return {
        "words": n,
        "mean_word_length": sum(map(len, words)) / n if n else 0.0,
        "hash_word_ratio": text.count("#") / n if n else 0.0,
        "ellipsis_word_ratio": (text.count("...") + text.count("…")) / n if n else 0.0,
        "bullet_lines_ratio": sum(line.lstrip(" \t").startswith(BULLETS) for line in lines)
        / len(lines)
        if lines
        else 0.0,
        "ellipsis_lines_ratio": sum(line.rstrip(" \t").endswith(("...", "…")) for line in lines)
        / len(lines)
        if lines
        else 0.0,
        "alpha_words_ratio": sum(any(c.isalpha() for c in w) for w in words) / n if n else 0.0,
        "stop_words": sum(w.lower().strip(PUNCTUATION) in stop_words for w in words),
    }


def _ref_duplicates(pieces: list[str]) -> tuple[int, int]:
    seen: set[str] = set()
    count = chars = 0
    for piece in pieces:
        if piece in seen:
            count, chars = count + 1, chars + len(piece)
        seen.add(piece)
    return count, chars


def _ref_repetition(text: str, top: list[int], dup: list[int]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, pieces in (
        ("line", [p for p in text.split("\n") if p]),
        ("para", [p for p in re.split(r"\n{2,}", text) if p]),
    ):
        count, chars = _ref_duplicates(pieces)
        out[f"dup_{name}_ratio"] = count / len(pieces) if pieces else 0.0
        out[f"dup_{name}_char_ratio"] = chars / len(text) if text else 0.0
    words = text.split()
    total = sum(map(len, words))
    for n in top:
        grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
        counts = Counter(grams)
        best = max(counts.values(), default=0)
        ratio = 0.0
        if best > 1:
            gram = next(g for g in grams if counts[g] == best)  # the earliest on ties
            ratio = best * sum(map(len, gram)) / total
        out[top_ngram_reason(n)] = ratio
    for n in dup:
        seen: set[tuple[str, ...]] = set()
        covered = [False] * len(words)
        for i in range(len(words) - n + 1):
            gram = tuple(words[i : i + n])
            if gram in seen:
                covered[i : i + n] = [True] * n
            seen.add(gram)
        chars = sum(len(w) for w, c in zip(words, covered, strict=True) if c)
        out[dup_ngram_reason(n)] = chars / total if total else 0.0
    return out


_vocab = st.sampled_from(
    ["the", "The", "of,", "(and)", "to.", "cat", "dog", "ran", "#x", "...", "wait…", "…", "-",
     "*", "•", "42", "é", "naïve", "日本", "a", "aa", "b"]
)  # fmt: skip
_fresh_line = st.tuples(
    st.sampled_from(["", "", " ", "  ", "\t"]),
    st.lists(_vocab, max_size=10).map(" ".join),
    st.sampled_from(["", "", "", " ", "  "]),
).map("".join)
_line = st.one_of(_fresh_line, st.sampled_from(["the cat ran", "a a a a a a", "- the dog"]))
_doc = st.lists(
    st.tuples(_line, st.sampled_from(["\n", "\n", "\n\n", "\n\n\n", " "])), max_size=14
).map(lambda parts: "".join(line + sep for line, sep in parts))
TOP_NS = [1, 2, 3, 4, 6]
DUP_NS = [1, 2, 3, 5, 6, 7, 8, 9, 10]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_doc, min_size=1, max_size=10))
def test_measures_equal_a_plain_python_reference(texts):
    qspec = QualitySpec(stop_words=("the", "of", "and", "to", "a"))
    rspec = RepetitionSpec(
        top_ngram_char_ratios=tuple((n, 0.5) for n in TOP_NS),
        dup_ngram_char_ratios=tuple((n, 0.5) for n in DUP_NS),
    )
    quality = quality_measures(pa.array(texts, pa.string()), qspec)
    repetition = repetition_measures(pa.array(texts, pa.string()), rspec)
    for i, text in enumerate(texts):
        for name, expected in _ref_quality(text, qspec.stop_words).items():
            assert quality[name][i] == pytest.approx(expected), (name, text)
        for name, expected in _ref_repetition(text, TOP_NS, DUP_NS).items():
            assert repetition[name][i] == pytest.approx(expected), (name, text)


@settings(max_examples=30, deadline=None)
@given(st.lists(_doc, max_size=12), st.floats(0.0, 1.0), st.integers(0, 40))
def test_kept_plus_rejected_is_the_input_and_kept_rows_pass(texts, bound, min_words):
    table = _table(texts)
    qspec = QualitySpec(min_words=min_words, min_alpha_words_ratio=bound, min_stop_words=1)
    rspec = RepetitionSpec(max_dup_line_ratio=bound, top_ngram_char_ratios=((2, bound),))
    for result, measures, check in (
        (quality_filter(table, qspec), quality_measures, lambda m: m["words"] >= min_words),
        (
            repetition_filter(table, rspec),
            repetition_measures,
            lambda m: m[DUP_LINE_RATIO] <= bound,
        ),
    ):
        assert result.kept.num_rows + result.rejects.num_rows == len(texts)
        assert sorted(result.kept["doc_id"].to_pylist() + result.rejects["doc_id"].to_pylist()) == (
            sorted(table["doc_id"].to_pylist())
        )
        kept = result.kept["text"]
        assert np.all(check(measures(kept, qspec if measures is quality_measures else rspec)))


# --- specs -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "kwargs", "message"),
    [
        (QualitySpec, {"min_words": -1}, "QualitySpec.min_words"),
        (QualitySpec, {"min_words": 2.5}, "QualitySpec.min_words"),
        (QualitySpec, {"min_words": 10, "max_words": 5}, "QualitySpec.max_words"),
        (QualitySpec, {"min_mean_word_length": 5.0, "max_mean_word_length": 4.0}, "max_mean"),
        (QualitySpec, {"max_symbol_word_ratio": -0.1}, "max_symbol_word_ratio"),
        (QualitySpec, {"max_bullet_lines_ratio": 1.5}, "max_bullet_lines_ratio"),
        (QualitySpec, {"min_alpha_words_ratio": float("nan")}, "min_alpha_words_ratio"),
        (QualitySpec, {"min_stop_words": True}, "min_stop_words"),
        (QualitySpec, {"stop_words": "the"}, "stop_words"),
        (QualitySpec, {"stop_words": ("the", "of the")}, "stop_words"),
        (RepetitionSpec, {"max_dup_line_ratio": 2.0}, "RepetitionSpec.max_dup_line_ratio"),
        (RepetitionSpec, {"max_dup_para_char_ratio": "0.2"}, "max_dup_para_char_ratio"),
        (RepetitionSpec, {"top_ngram_char_ratios": ((0, 0.2),)}, "top_ngram_char_ratios"),
        (RepetitionSpec, {"dup_ngram_char_ratios": ((5, 1.5),)}, r"dup_ngram_char_ratios\[n=5\]"),
        (RepetitionSpec, {"dup_ngram_char_ratios": ((5, 0.1), (5, 0.2))}, "listed twice"),
        (RepetitionSpec, {"top_ngram_char_ratios": (2, 0.2)}, "top_ngram_char_ratios"),
    ],
)
def test_bad_specs_are_refused_naming_the_field(spec, kwargs, message):
    with pytest.raises(ValueError, match=message):
        spec(**kwargs)


def test_specs_accept_lists_and_are_hashable():
    spec = RepetitionSpec(top_ngram_char_ratios=[[2, 0.2]], dup_ngram_char_ratios=[])  # type: ignore[arg-type]
    assert spec.top_ngram_char_ratios == ((2, 0.2),) and spec.dup_ngram_char_ratios == ()
    assert hash(spec) == hash(
        RepetitionSpec(top_ngram_char_ratios=((2, 0.2),), dup_ngram_char_ratios=())
    )
    assert QualitySpec(stop_words=["x"]).stop_words == ("x",)  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2**63 - 1) | st.integers(0, 5), max_size=60))
def test_factorize_numbers_keys_in_order_of_first_appearance(keys):
    """The n-gram rules rely on it: an occurrence repeats an earlier one exactly when its number
    is not above every number before it."""
    first_seen: dict[int, int] = {}
    expected = [first_seen.setdefault(k, len(first_seen)) for k in keys]
    for dtype in (np.int64, np.uint64):
        assert factorize(np.array(keys, dtype)).tolist() == expected
    high = [k + 2**63 for k in keys]  # uint64 keys past the int64 range
    assert factorize(np.array(high, np.uint64)).tolist() == expected
