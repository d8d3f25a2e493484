"""The data generator: deterministic bytes in every format, WikiText-2-like length and duplicate
statistics, languages, reviews, instructions and chats, the command line, and the shipped
sample."""

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

from llm_assets.datagen import _DICTIONARY as DICTIONARY
from llm_assets.datagen import (
    FORMATS,
    KIND_DUPLICATE,
    KIND_HEADING,
    KIND_NEAR_DUPLICATE,
    KIND_PARAGRAPH,
    PLAIN,
    PLANTED_CHAT_LINES,
    PLANTED_LINES,
    SAMPLE_CHAT_LINES,
    SAMPLE_CHATS,
    SAMPLE_WIKI_LINES,
    generate_chats,
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
CHATS = REPO / "data" / "chat" / "chats.jsonl"
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


def test_chats_are_well_formed_conversations_and_deterministic():
    rows = list(generate_chats(800, seed=2))
    assert rows == list(generate_chats(800, seed=2))
    assert rows[:50] == list(generate_chats(50, seed=2))  # streamed: a prefix of a longer run
    assert rows != list(generate_chats(800, seed=3))
    assert [r["id"] for r in rows[:3]] == [f"chat-2-{i:08d}" for i in range(3)]
    exchanges = Counter()
    for row in rows:
        assert list(row) == ["id", "messages"]
        messages = row["messages"]
        assert all(list(m) == ["role", "content"] for m in messages)
        assert all(isinstance(m["content"], str) and m["content"].strip() for m in messages)
        roles = [m["role"] for m in messages]
        turns = roles[1:] if roles[0] == "system" else roles
        assert turns == ["user", "assistant"] * (len(turns) // 2) and turns, roles
        assert roles[-1] == "assistant"
        exchanges[len(turns) // 2] += 1
    assert set(exchanges) == {1, 2, 3}
    assert 0.25 < sum(r["messages"][0]["role"] == "system" for r in rows) / len(rows) < 0.42
    assert (
        len({r["messages"][0]["content"] for r in rows if r["messages"][0]["role"] == "system"}) > 2
    )
    users = [m["content"] for r in rows for m in r["messages"] if m["role"] == "user"]
    assert any(u.startswith("Thanks! And ") for u in users)
    assert any("\n\n" in u for u in users) and any("\n\n" not in u for u in users)


def test_chat_answers_are_correct_for_their_questions():
    operations = {"plus": int.__add__, "minus": int.__sub__, "times": int.__mul__}
    translations = {
        (english, language): foreign
        for english, words in DICTIONARY.items()
        for language, foreign in zip(("German", "French", "Spanish"), words, strict=True)
    }
    checked = Counter()
    for row in generate_chats(1500, seed=4):
        messages = [m for m in row["messages"] if m["role"] != "system"]
        last_result, last_word = None, None
        for question, answer in zip(messages[::2], messages[1::2], strict=True):
            q, a = question["content"], answer["content"]
            if match := re.search(r"[Ww]hat is (\d+) (plus|minus|times) (\d+)\?$", q):
                x, op, y = match.groups()
                result = operations[op](int(x), int(y))
                assert a == f"{x} {op} {y} is {result}.", (q, a)
                last_result, last_word = result, None
                checked["arithmetic"] += 1
            elif match := re.fullmatch(r"Thanks! And what is that (plus|times) (\d+)\?", q):
                op, y = match.groups()
                assert last_result is not None, row
                result = operations[op](last_result, int(y))
                assert a == f"{last_result} {op} {y} is {result}.", (q, a)
                last_result = None
                checked["follow-up sum"] += 1
            elif match := re.search(r'ranslate the word "(\w+)" into (\w+)\.$', q):
                word, language = match.groups()
                assert a == f'In {language}, "{word}" is "{translations[word, language]}".'
                last_result, last_word = None, (word, language)
                checked["translation"] += 1
            elif match := re.fullmatch(r"Thanks! And in (\w+)\?", q):
                assert last_word is not None and last_word[1] != match[1], row
                word, language = last_word[0], match[1]
                assert a == f'In {language}, "{word}" is "{translations[word, language]}".'
                last_word = None
                checked["follow-up translation"] += 1
            else:
                if "ort the following words alphabetically.\n\n" in q:
                    words = q.split("\n\n", 1)[1]
                    assert a == ", ".join(sorted(words.split(", ")))
                    checked["sort"] += 1
                last_result = last_word = None
    assert min(checked.values()) > 5 and len(checked) == 5, checked


def test_chats_leave_the_instructions_alone():
    """generate_chats has random streams of its own: the instructions of a seed do not depend on
    whether (or how many) chats were generated before or between them."""
    first = list(generate_instructions(50, seed=0))
    chats = generate_chats(100, seed=0)
    next(chats)
    instructions = generate_instructions(50, seed=0)
    mixed = []
    for row in instructions:
        mixed.append(row)
        next(chats)
    assert mixed == first


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".parquet", ".csv"])
def test_chats_written_in_every_format_that_holds_them(tmp_path, suffix):
    path = write_corpus(tmp_path / f"chats{suffix}", 60, seed=1, kind="chats")
    expected = list(generate_chats(60, seed=1))
    rows = read_rows(path)
    if suffix == ".csv":  # the messages as a JSON string cell
        assert all(isinstance(r["messages"], str) for r in rows)
        rows = [{**r, "messages": json.loads(r["messages"])} for r in rows]
    assert rows == expected
    from llm_assets.kernels.ingest.read import IngestSpec, read_documents

    results = list(read_documents(str(path), path.name, IngestSpec(chat_field="messages")))
    assert sum(r.kept.num_rows for r in results) == 60
    assert not any(r.rejects.num_rows for r in results)
    texts = [t for r in results for t in r.kept["text"].to_pylist()]
    assert texts == [row["messages"][-1]["content"] for row in expected]


def test_chats_are_refused_as_txt_before_anything_is_written(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"\.txt file holds only the string field 'text'"):
        write_corpus(tmp_path / "chats.txt", 10, kind="chats")
    assert not (tmp_path / "chats.txt").exists()
    with pytest.raises(ValueError, match="its fields: id, messages"):  # given rows: the same
        write_corpus(tmp_path / "given.txt", generate_chats(10))
    assert not (tmp_path / "given.txt").exists()
    with pytest.raises(SystemExit) as exit_info:
        main(["--kind", "chats", "--rows", "5", "--out", str(tmp_path / "cli.txt")])
    assert exit_info.value.code == 2 and "write .jsonl" in capsys.readouterr().err
    assert not (tmp_path / "cli.txt").exists()


# --- command line -----------------------------------------------------------------------------
def test_command_line_writes_rows_and_reports_progress(tmp_path, capsys):
    out = tmp_path / "generated" / "corpus.jsonl.zst"
    assert main(["--rows", "700", "--seed", "3", "--out", str(out)]) == 0
    assert read_rows(out) == list(generate_records(700, seed=3))
    assert "700/700 rows" in capsys.readouterr().err
    reviews = tmp_path / "reviews.csv"
    assert main(["--kind", "reviews", "--rows", "40", "--out", str(reviews)]) == 0
    assert len(read_rows(reviews)) == 40
    chats = tmp_path / "chats.jsonl"
    assert main(["--kind", "chats", "--rows", "30", "--seed", "2", "--out", str(chats)]) == 0
    assert read_rows(chats) == list(generate_chats(30, seed=2))


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
        "chat/chats.jsonl": SAMPLE_CHAT_LINES,
    }
    shipped = REPO / "data"
    assert sorted(p.name for p in SAMPLE_DIR.iterdir()) == sorted(
        Path(name).name for name in counts if name.startswith("sample/")
    )
    assert sorted(p.name for p in CHATS.parent.iterdir()) == ["chats.jsonl"]
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
    from llm_assets.kernels.ingest.read import IngestSpec, read_documents
    from llm_assets.kernels.normalize import NormalizeSpec, normalize_table

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


# --- the shipped chats ------------------------------------------------------------------------
def test_chat_planted_lines_are_where_the_constant_and_readme_say():
    lines = CHATS.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) - 1 == SAMPLE_CHAT_LINES == SAMPLE_CHATS + 2
    readme = (REPO / "data" / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### The planted lines of `chat/chats.jsonl`") :]
    planted = {p.line: p for p in PLANTED_CHAT_LINES}
    assert {p.reason for p in PLANTED_CHAT_LINES} == {"invalid_chat", "missing_text"}
    for line, p in planted.items():
        assert lines[line - 1] == p.raw
        assert re.search(rf"^\| {line} \|.*\| reject `{p.reason}`", section, re.MULTILINE), line
    assert json.loads(planted[101].raw)["messages"] is None
    assert json.loads(planted[37].raw)["messages"][-1]["role"] == "user"
    others = [json.loads(line) for i, line in enumerate(lines[:-1], 1) if i not in planted]
    assert others == list(generate_chats(SAMPLE_CHATS))


def test_ingest_rejects_exactly_the_planted_chat_lines():
    from llm_assets.kernels.ingest.read import IngestSpec, read_documents

    kept, rejected = 0, {}
    for result in read_documents(str(CHATS), CHATS.name, IngestSpec(chat_field="messages")):
        kept += result.kept.num_rows
        rejects = result.rejects
        for line, reason, value in zip(
            rejects["source_line"].to_pylist(),
            rejects["reason"].to_pylist(),
            rejects["value"].to_pylist(),
            strict=True,
        ):
            rejected[line] = (reason, value)
    assert {line: reason for line, (reason, _) in rejected.items()} == {
        p.line: p.reason for p in PLANTED_CHAT_LINES
    }
    assert kept == SAMPLE_CHATS
    readme = (REPO / "data" / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### The planted lines of `chat/chats.jsonl`") :]
    rows = {int(m[1]): m[2] for m in re.finditer(r"^\| (\d+) \|.*\| (.*) \|$", section, re.M)}
    for line, (reason, value) in rejected.items():
        assert f"reject `{reason}`" in rows[line], line
        if "value" in rows[line]:
            assert f"(value `{value}`)" in rows[line], (line, value)
