"""Flagged words: counting (whole words, any case, punctuation around them, phrases), the density
threshold, word lists from files and the shipped one."""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_assets.kernels.filters.flagged import (
    _SENTENCE_PUNCTUATION,
    FLAGGED_WORDS,
    PUNCTUATION,
    FlaggedWordsSpec,
    flagged_counts,
    flagged_filter,
    load_word_list,
)
from llm_assets.kernels.schema import REJECT_SCHEMA
from llm_assets_tests.conftest import docs_table

WORDS = frozenset({"ass", "shit", "damn it", "son of a bitch", "a$$"})


def _list_file(tmp_path, text: str, name: str = "words.txt") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("What a pile of shit.", 1),
        ("SHIT, Shit! shit? (shit) «shit» 'shit' “shit”", 7),
        ("The class passed the glass to the assistant; bass, mass, assess.", 0),
        ("ass", 1),
        ("shitty shits shitake", 0),  # no stemming, no partial words
        ("Damn it, you son of a bitch!", 6),  # two phrases: 2 + 4 words
        ("damn, it", 2),  # punctuation between the words of a phrase does not matter
        ("damn and it", 0),
        ("a son of a gun", 0),
        ("he is an a$$ and an a$$.", 2),  # an entry with punctuation at its end
        ("", 0),
        ("   \n\t ", 0),
    ],
)
def test_counts(text, count):
    assert flagged_counts([text], WORDS).tolist() == [count]


def test_phrases_do_not_cross_documents_and_words_count_once():
    words = frozenset({"son of", "of a bitch", "bitch"})
    counts = flagged_counts(["my son", "of a bitch", "son of a bitch"], words)
    # "of a bitch" covers all three words; the last text: every word covered once
    assert counts.tolist() == [0, 3, 4]


def test_counts_of_arrow_input_with_nulls_and_chunks():
    texts = pa.chunked_array([["shit happens", None], ["no", "ass ass"]], pa.string())
    assert flagged_counts(texts, WORDS).tolist() == [1, 0, 0, 2]
    assert flagged_counts(texts, frozenset()).tolist() == [0, 0, 0, 0]


def test_filter_rejects_dense_documents_with_reason_and_value(tmp_path):
    spec = FlaggedWordsSpec(path=_list_file(tmp_path, "shit\nass\n"), max_density=0.03)
    clean = "a perfectly clean sentence about classes and glasses"
    dirty = "shit " * 3 + "word " * 85  # 3 of 88 words
    result = flagged_filter(docs_table([clean, dirty, "ass"]), spec)
    assert result.kept["doc_id"].to_pylist() == ["d0"]
    assert result.kept.column_names == ["doc_id", "source_file", "source_line", "text"]
    assert result.rejects.schema == REJECT_SCHEMA
    assert result.rejects["reason"].to_pylist() == [FLAGGED_WORDS, FLAGGED_WORDS]
    assert result.rejects["value"].to_pylist() == ["0.034 (3 of 88 words)", "1.000 (1 of 1 words)"]
    assert result.rejects["stage"].to_pylist() == ["filter", "filter"]
    assert result.rejects["source_line"].to_pylist() == [2, 3]


@pytest.mark.parametrize(("n_words", "kept"), [(100, True), (99, False), (200, True)])
def test_density_exactly_at_the_threshold_passes(tmp_path, n_words, kept):
    spec = FlaggedWordsSpec(path=_list_file(tmp_path, "shit\n"), max_density=0.01)
    flagged = n_words // 100 or 1
    text = " ".join(["shit"] * flagged + ["word"] * (n_words - flagged))
    result = flagged_filter(docs_table([text]), spec)
    assert (result.kept.num_rows == 1) is kept


def test_custom_list_format(tmp_path):
    path = _list_file(
        tmp_path,
        "\ufeff# my list\n\n  Gros   Mot  \nmerde # inline comment\n  # indented comment\nÉCOLE\n",
    )
    assert load_word_list(path) == frozenset({"gros mot", "merde", "école"})
    result = flagged_filter(
        docs_table(["Quelle MERDE !", "un gros mot", "l'école", "rien"]),
        FlaggedWordsSpec(path=path, max_density=0.2),
    )
    assert result.kept["doc_id"].to_pylist() == ["d2", "d3"]  # "l'école" is not "école"


def test_list_is_cached_and_reloaded_when_the_file_changes(tmp_path):
    path = _list_file(tmp_path, "one\n")
    first = load_word_list(path)
    assert load_word_list(path) is first
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("two\n")
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert load_word_list(path) == frozenset({"one", "two"})


def test_missing_file_error_names_it(tmp_path):
    missing = str(tmp_path / "nope.txt")
    with pytest.raises(FileNotFoundError, match=r"nope\.txt"):
        load_word_list(missing)
    with pytest.raises(FileNotFoundError, match=r"nope\.txt"):
        flagged_filter(docs_table(["x"]), FlaggedWordsSpec(path=missing))


@pytest.mark.parametrize(
    ("content", "error", "message"),
    [
        (b"# only comments\n\n   \n", ValueError, "no words"),
        (b"", ValueError, "no words"),
        (b"\xff\xfe bad bytes", ValueError, "not UTF-8"),
    ],
)
def test_empty_or_undecodable_file_error_names_it(tmp_path, content, error, message):
    path = tmp_path / "bad_list.txt"
    path.write_bytes(content)
    with pytest.raises(error, match=message) as info:
        load_word_list(str(path))
    assert "bad_list.txt" in str(info.value)


def test_unreadable_path_error_names_it(tmp_path):
    with pytest.raises(OSError, match="a_directory"):
        load_word_list(str(tmp_path / "a_directory" / ".."))
    (tmp_path / "a_directory").mkdir()
    with pytest.raises(OSError, match="a_directory"):
        load_word_list(str(tmp_path / "a_directory"))


def test_shipped_list():
    words = load_word_list(None)
    assert 50 <= len(words) <= 150
    assert {"fuck", "shit", "son of a bitch"} <= words
    assert all(w == w.lower() and w == w.strip() for w in words)
    # words with an everyday meaning are not on it
    assert not {"class", "hell", "damn", "cock", "bastard", "retard", "analysis"} & words
    result = flagged_filter(
        docs_table(
            ["What the fuck is this shit", "An ordinary sentence about a classic assessment."]
        ),
        FlaggedWordsSpec(),
    )
    assert result.kept["doc_id"].to_pylist() == ["d1"]
    assert result.rejects["value"].to_pylist() == ["0.333 (2 of 6 words)"]


def test_disabled_is_the_identity():
    table = docs_table(["shit " * 10])
    result = flagged_filter(table, FlaggedWordsSpec(enabled=False, path="/does/not/exist"))
    assert result.kept.equals(table) and result.rejects.num_rows == 0


def test_emptydocs_table():
    result = flagged_filter(docs_table([]), FlaggedWordsSpec())
    assert result.kept.num_rows == 0 and result.rejects.num_rows == 0


@pytest.mark.parametrize(
    ("kwargs", "message"), [({"max_density": 1.5}, "max_density"), ({"path": " "}, "path")]
)
def test_bad_specs_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        FlaggedWordsSpec(**kwargs)


_REFERENCE_WORDS = WORDS | {"école", "_x_"}


def _reference_count(text: str) -> int:
    """The definition, in plain Python: whitespace words, lowercased, stripped of punctuation
    (or, for entries like ``a$$``, of sentence punctuation only), phrases cover their words."""
    tokens = text.lower().split()
    full = [t.strip(PUNCTUATION) for t in tokens]
    sentence = [t.strip(_SENTENCE_PUNCTUATION) for t in tokens]
    covered = [
        a in _REFERENCE_WORDS or b in _REFERENCE_WORDS for a, b in zip(full, sentence, strict=True)
    ]
    for phrase in (p.split() for p in _REFERENCE_WORDS if " " in p):
        for i in range(len(full) - len(phrase) + 1):
            if full[i : i + len(phrase)] == phrase:
                covered[i : i + len(phrase)] = [True] * len(phrase)
    return sum(covered)


_VOCABULARY = [
    *["shit", "Ass!", "_ass_", "«ass»", "a$$", "(a$$)", "$a$$$", "École,", "écoles", "_x_"],
    *["class", "son", "of", "a", "bitch", "Damn", "it.", "x", "-", "...", "ass-hat", "\t"],
]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.lists(st.sampled_from(_VOCABULARY)).map(" ".join), max_size=20),
    st.floats(0, 1),
)
def test_nothing_lost_and_counts_match_the_reference(texts, density):
    counts = flagged_counts(texts, _REFERENCE_WORDS)
    assert counts.tolist() == [_reference_count(t) for t in texts]
    result = flagged_filter(docs_table(texts), FlaggedWordsSpec(max_density=density))
    assert result.kept.num_rows + result.rejects.num_rows == len(texts)
