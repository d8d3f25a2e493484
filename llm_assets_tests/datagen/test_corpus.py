"""The WikiText-2-like corpus: its length and duplicate statistics, headings, styles and
languages; a smaller corpus is a prefix of a larger one."""

from __future__ import annotations

import re
from collections import Counter
from itertools import islice

import numpy as np
import pytest

from llm_assets.datagen.corpus import (
    KIND_DUPLICATE,
    KIND_HEADING,
    KIND_NEAR_DUPLICATE,
    KIND_PARAGRAPH,
    generate_records,
)
from llm_assets.datagen.grammar import PLAIN, to_wikitext

N = 20_000


@pytest.fixture(scope="module")
def records() -> list[dict]:
    """A default corpus with the generator's ``lang`` and ``kind`` fields."""
    return list(generate_records(N, seed=3, with_meta=True))


def test_a_smaller_corpus_is_a_prefix_of_a_larger_one():
    small = list(generate_records(100, seed=11))
    large = list(islice(generate_records(5000, seed=11), 100))
    assert small == large
    assert [r["id"] for r in small] == [f"wiki-11-{i:08d}" for i in range(100)]
    assert list(generate_records(100, seed=12)) != small


@pytest.mark.parametrize(
    "options",
    [{"style": "html"}, {"languages": ("en", "xx")}, {"languages": ()}, {"duplicate_fraction": 2}],
)
def test_invalid_options_are_refused(options):
    with pytest.raises(ValueError):
        generate_records(10, **options)


# --- what the corpus looks like ---------------------------------------------------------------
def test_length_distribution_is_wikitext_like(records):
    lengths = np.array([len(r["text"]) for r in records])
    assert 380 <= lengths.mean() <= 500  # WikiText-2 train: ~440 characters per non-empty line
    assert np.median(lengths) < lengths.mean()  # long right tail
    assert lengths.max() > 2000
    kinds = Counter(r["kind"] for r in records)
    assert 0.12 <= kinds[KIND_HEADING] / N <= 0.32
    assert (lengths < 50).mean() >= 0.1


def test_headings_are_short_lines_in_wikitext_form(records):
    headings = [r["text"] for r in records if r["kind"] == KIND_HEADING]
    assert all(re.fullmatch(r" (= )+\S.* (= )+\n", h) for h in headings)
    assert any(h.startswith(" = = ") for h in headings)
    titles = {r["title"] for r in records}
    assert any(h == f" = {to_wikitext(t)} = \n" for h in headings for t in titles)


def test_headings_mostly_have_fewer_than_ten_gpt2_tokens(records):
    from llm_assets.kernels.tokenize.spec import TokenizerSpec

    tokenizer = TokenizerSpec().build()
    sample = records[:3000]
    counts = [len(ids) for ids in tokenizer.encode_batch([r["text"] for r in sample])]
    heading_counts = [n for n, r in zip(counts, sample, strict=True) if r["kind"] == KIND_HEADING]
    assert np.mean(np.array(heading_counts) < 10) > 0.7
    assert 0.1 < np.mean(np.array(counts) < 10) < 0.35
    assert 70 < np.mean(counts) < 120


def test_wikitext_formatting():
    assert to_wikitext("A well-known ship, 1,200 tons (3.5 m).") == (
        "A well @-@ known ship , 1 @,@ 200 tons ( 3 @.@ 5 m ) ."
    )
    assert (
        to_wikitext("In the U.S. state of Ohio's north.") == "In the U.S. state of Ohio 's north ."
    )


def test_plain_style_has_no_wikitext_markup():
    rows = list(generate_records(2000, seed=1, style=PLAIN, with_meta=True))
    assert not any(" @-@ " in r["text"] or " , " in r["text"] for r in rows)
    assert all("=" not in r["text"] for r in rows if r["kind"] == KIND_HEADING)


def test_duplicates_at_the_configured_fraction(records):
    kinds = Counter(r["kind"] for r in records)
    assert 0.012 <= (kinds[KIND_DUPLICATE] + kinds[KIND_NEAR_DUPLICATE]) / N <= 0.028
    assert kinds[KIND_DUPLICATE] > 0.3 * kinds[KIND_NEAR_DUPLICATE]
    seen: dict[tuple[str, int], list[list[str]]] = {}
    earlier: set[str] = set()
    for record in records:
        text, words = record["text"], record["text"].split(" ")
        if record["kind"] == KIND_DUPLICATE:
            assert text in earlier
        elif record["kind"] == KIND_NEAR_DUPLICATE:
            assert text not in earlier
            candidates = seen[(record["title"], len(words))]
            edits = min(sum(a != b for a, b in zip(words, c, strict=True)) for c in candidates)
            assert 1 <= edits <= max(1, len(words) // 50)
        earlier.add(text)
        seen.setdefault((record["title"], len(words)), []).append(words)


def test_duplicate_fraction_zero_gives_no_copies():
    kinds = Counter(r["kind"] for r in generate_records(3000, duplicate_fraction=0, with_meta=True))
    assert not kinds[KIND_DUPLICATE] and not kinds[KIND_NEAR_DUPLICATE]


_STOP_WORDS = {  # words of the generated prose that only one of the languages uses
    "de": {"und", "wurde", "ist", "der", "von", "im", "war"},
    "fr": {"et", "le", "près", "à", "était", "reste", "est"},
    "es": {"y", "el", "cerca", "sigue", "era", "tenía", "muy", "es"},
    "en": {"the", "was", "and", "of", "by"},
}


def test_languages_present_at_the_configured_share(records):
    paragraphs = [r for r in records if r["kind"] == KIND_PARAGRAPH]
    by_language = Counter(r["lang"] for r in paragraphs)
    assert set(by_language) == {"en", "de", "fr", "es"}
    assert 0.035 <= 1 - by_language["en"] / len(paragraphs) <= 0.065
    for record in paragraphs[:3000]:
        words = set(record["text"].split())
        scores = {code: len(words & stop_words) for code, stop_words in _STOP_WORDS.items()}
        assert scores[record["lang"]] == max(scores.values()), record["text"]
        assert scores[record["lang"]] > 0 or record["lang"] == "en", record["text"]


def test_language_selection():
    english = list(generate_records(1000, seed=4, languages=("en",), with_meta=True))
    assert {r["lang"] for r in english} == {"en"}
    german = list(generate_records(1000, seed=4, languages=("de",), with_meta=True))
    assert {r["lang"] for r in german if r["kind"] != KIND_HEADING} == {"de"}
