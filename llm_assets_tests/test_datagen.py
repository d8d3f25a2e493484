"""The data generator: deterministic bytes in every format, WikiText-2-like length and duplicate
statistics, languages, reviews and instructions, the command line, and the shipped sample."""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from collections import Counter
from itertools import islice
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from llm_assets.datagen import (
    FORMATS,
    KIND_DUPLICATE,
    KIND_HEADING,
    KIND_NEAR_DUPLICATE,
    KIND_PARAGRAPH,
    PLAIN,
    PLANTED_LINES,
    SAMPLE_WIKI_LINES,
    generate_instructions,
    generate_records,
    generate_reviews,
    main,
    make_sample,
    sentiment_of,
    to_wikitext,
    write_corpus,
)

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO / "data" / "sample"
N = 20_000


@pytest.fixture(scope="module")
def records() -> list[dict]:
    """A default corpus with the generator's ``lang`` and ``kind`` fields."""
    return list(generate_records(N, seed=3, with_meta=True))


def read_rows(path: Path) -> list[dict]:
    """Read back a file written by write_corpus with the plain libraries of each format."""
    name = path.name
    if name.endswith(".jsonl"):
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    if name.endswith(".jsonl.gz"):
        with gzip.open(path, "rt", encoding="utf-8") as handle:
            return [json.loads(line) for line in handle]
    if name.endswith(".jsonl.zst"):
        with open(path, "rb") as raw, zstandard.ZstdDecompressor().stream_reader(raw) as stream:
            return [json.loads(line) for line in io.TextIOWrapper(stream, encoding="utf-8")]
    if name.endswith(".parquet"):
        return pq.read_table(path).to_pylist()
    if name.endswith(".csv"):
        with open(path, encoding="utf-8", newline="") as handle:
            return list(csv.DictReader(handle))
    paragraphs = path.read_text(encoding="utf-8").split("\n\n")
    return [{"text": paragraph.strip("\n")} for paragraph in paragraphs]


# --- determinism and formats ------------------------------------------------------------------
@pytest.mark.parametrize("suffix", FORMATS)
def test_every_format_is_readable_deterministic_and_complete(tmp_path, suffix):
    first = write_corpus(tmp_path / "a" / f"corpus{suffix}", 1500, seed=5)
    again = write_corpus(tmp_path / "b" / f"corpus{suffix}", 1500, seed=5)
    other = write_corpus(tmp_path / "c" / f"corpus{suffix}", 1500, seed=6)
    assert first.read_bytes() == again.read_bytes()
    assert first.read_bytes() != other.read_bytes()
    rows = read_rows(first)
    expected = list(generate_records(1500, seed=5))
    if suffix == ".txt":  # text only, one paragraph each (their inner line breaks are kept)
        assert len(rows) == 1500
        assert rows[10]["text"] == expected[10]["text"].rstrip("\n")
    else:
        assert rows == expected


def test_a_smaller_corpus_is_a_prefix_of_a_larger_one():
    small = list(generate_records(100, seed=11))
    large = list(islice(generate_records(5000, seed=11), 100))
    assert small == large
    assert [r["id"] for r in small] == [f"wiki-11-{i:08d}" for i in range(100)]
    assert list(generate_records(100, seed=12)) != small


def test_write_corpus_takes_rows_and_other_kinds(tmp_path):
    path = write_corpus(tmp_path / "given.jsonl.gz", generate_records(300, seed=2), seed=2)
    assert read_rows(path) == list(generate_records(300, seed=2))
    reviews = write_corpus(tmp_path / "reviews.parquet", 50, seed=1, kind="reviews")
    assert read_rows(reviews) == list(generate_reviews(50, seed=1))
    with pytest.raises(ValueError, match="unsupported suffix"):
        write_corpus(tmp_path / "corpus.json", 10)
    with pytest.raises(ValueError, match="kind"):
        write_corpus(tmp_path / "x.jsonl", 10, kind="poems")


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
    from llm_assets.lib.tokenization import TokenizerSpec

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


# --- reviews and instructions -----------------------------------------------------------------
def test_reviews():
    reviews = list(generate_reviews(2000, seed=9))
    assert reviews == list(generate_reviews(2000, seed=9))
    assert list(reviews[0]) == ["review_id", "rating", "title", "text"]
    ratings = Counter(r["rating"] for r in reviews)
    assert set(ratings) == {1, 2, 3, 4, 5}
    assert ratings[5] == max(ratings.values())
    assert len({r["review_id"] for r in reviews}) == len(reviews)
    assert all(r["title"] and len(r["text"]) > 10 for r in reviews)
    assert [sentiment_of(n) for n in range(1, 6)] == ["negative"] * 2 + ["neutral"] + [
        "positive"
    ] * 2


def test_instructions_are_correct_and_deterministic():
    rows = list(generate_instructions(600, seed=2))
    assert rows == list(generate_instructions(600, seed=2))
    assert all(list(r) == ["instruction", "input", "output"] and r["output"] for r in rows)
    assert 0.2 < sum(not r["input"] for r in rows) / len(rows) < 0.5
    assert len({r["instruction"].split()[0] for r in rows}) >= 8
    operations = {"plus": int.__add__, "minus": int.__sub__, "times": int.__mul__}
    checked = 0
    for row in rows:
        match = re.fullmatch(r"What is (\d+) (plus|minus|times) (\d+)\?", row["instruction"])
        if match:
            a, op, b = match.groups()
            assert row["output"] == f"{a} {op} {b} is {operations[op](int(a), int(b))}."
            checked += 1
        if row["instruction"].startswith("Sort"):
            assert row["output"] == ", ".join(sorted(row["input"].split(", ")))
    assert checked > 10


# --- command line -----------------------------------------------------------------------------
def test_command_line_writes_rows_and_reports_progress(tmp_path, capsys):
    out = tmp_path / "generated" / "corpus.jsonl.zst"
    assert main(["--rows", "700", "--seed", "3", "--out", str(out)]) == 0
    assert read_rows(out) == list(generate_records(700, seed=3))
    assert "700/700 rows" in capsys.readouterr().err
    reviews = tmp_path / "reviews.csv"
    assert main(["--kind", "reviews", "--rows", "40", "--out", str(reviews)]) == 0
    assert len(read_rows(reviews)) == 40


def test_command_line_refuses_an_all_duplicate_corpus_with_a_message(tmp_path, capsys):
    """Every record a copy of an earlier one is impossible (the first has nothing to copy): the
    command line says so as a usage error and writes nothing, instead of an IndexError."""
    out = tmp_path / "dups.jsonl"
    with pytest.raises(SystemExit) as exit_info:
        main(["--rows", "10", "--duplicate-fraction", "1.0", "--out", str(out)])
    assert exit_info.value.code == 2
    assert "duplicate_fraction must be below 1" in capsys.readouterr().err
    assert not out.exists()
    # Just below 1 works: an original first, then nearly only copies.
    records = generate_records(200, duplicate_fraction=0.99, with_meta=True)
    kinds = Counter(r["kind"] for r in records)
    assert kinds[KIND_DUPLICATE] + kinds[KIND_NEAR_DUPLICATE] > 150


# --- the shipped sample -----------------------------------------------------------------------
def test_shipped_sample_is_what_make_sample_writes(tmp_path):
    counts = make_sample(tmp_path)
    assert counts == {
        "sample/wiki_sample.jsonl": SAMPLE_WIKI_LINES,
        "sample/wiki_more.jsonl.gz": 300,
        "sample/wiki_more.jsonl.zst": 300,
        "sample/wiki_table.parquet": 300,
        "sample/reviews.csv": 200,
        "sample/notes.txt": 40,
        "instructions/instructions.jsonl": 200,
    }
    shipped = REPO / "data"
    assert sorted(p.name for p in SAMPLE_DIR.iterdir()) == sorted(
        Path(name).name for name in counts if name.startswith("sample/")
    )
    total = 0
    for name, rows in counts.items():
        ours, theirs = tmp_path / name, shipped / name
        total += theirs.stat().st_size
        if name.endswith(".parquet"):  # bytes also depend on the pyarrow version
            assert pq.read_table(theirs).equals(pq.read_table(ours))
            assert "url" in pq.read_table(theirs).column_names
        else:
            assert theirs.read_bytes() == ours.read_bytes(), name
        if not name.endswith("wiki_sample.jsonl"):
            assert len(read_rows(theirs)) == rows, name
    assert total < 3_000_000


def test_sample_planted_lines_are_where_the_readme_says():
    lines = (SAMPLE_DIR / "wiki_sample.jsonl").read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) - 1 == SAMPLE_WIKI_LINES
    readme = (REPO / "data" / "README.md").read_text(encoding="utf-8")
    for planted in PLANTED_LINES:
        assert lines[planted.line - 1] == planted.raw
        assert re.search(rf"^\| {planted.line} \|", readme, re.MULTILINE), planted.line
    others = [
        line for i, line in enumerate(lines[:-1], 1) if i not in {p.line for p in PLANTED_LINES}
    ]
    assert all(isinstance(json.loads(line)["text"], str) for line in others)


def test_ingest_rejects_exactly_the_planted_lines():
    from llm_assets.lib.ingest import IngestSpec, read_documents
    from llm_assets.lib.normalize import NormalizeSpec, normalize_table

    kept, rejected, values, texts = 0, {}, {}, []
    path = SAMPLE_DIR / "wiki_sample.jsonl"
    for result in read_documents(str(path), path.name, IngestSpec()):
        kept += result.kept.num_rows
        texts.append(result.kept)
        lines, reasons = result.rejects["source_line"], result.rejects["reason"]
        rejected.update(zip(lines.to_pylist(), reasons.to_pylist(), strict=True))
        values.update(zip(lines.to_pylist(), result.rejects["value"].to_pylist(), strict=True))
    assert rejected == {p.line: p.reason for p in PLANTED_LINES if p.reason}
    assert kept == SAMPLE_WIKI_LINES - len(rejected)
    # data/README.md's table says what each planted line gives, reject values included (before:
    # line 777's value was given as the old "absent", and line 2222 as a length-filter reject).
    readme = (REPO / "data" / "README.md").read_text(encoding="utf-8")
    rows = {int(m[1]): m[2] for m in re.finditer(r"^\| (\d+) \|.*\| (.*) \|$", readme, re.M)}
    for line, reason in rejected.items():
        assert f"reject `{reason}`" in rows[line], line
        if values[line] not in ("", None) and "value" in rows[line]:
            assert f"`{values[line]}`" in rows[line], (line, values[line])
    blank = next(p.line for p in PLANTED_LINES if p.reason is None)
    normalized = normalize_table(pa.concat_tables(texts), NormalizeSpec())
    reasons = dict(
        zip(
            normalized.rejects["source_line"].to_pylist(),
            normalized.rejects["reason"].to_pylist(),
            strict=True,
        )
    )
    assert f"`{reasons[blank]}` in `normalized_documents`" in rows[blank]
