"""Every file format: deterministic bytes, readable by the plain libraries, complete."""

from __future__ import annotations

import json

import pytest

from llm_assets.datagen.chats import generate_chats
from llm_assets.datagen.cli import main
from llm_assets.datagen.corpus import (
    generate_records,
)
from llm_assets.datagen.reviews import generate_reviews
from llm_assets.datagen.writers import FORMATS, write_corpus
from llm_assets_tests.datagen.read_back import read_rows


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


def test_write_corpus_takes_rows_and_other_kinds(tmp_path):
    path = write_corpus(tmp_path / "given.jsonl.gz", generate_records(300, seed=2), seed=2)
    assert read_rows(path) == list(generate_records(300, seed=2))
    reviews = write_corpus(tmp_path / "reviews.parquet", 50, seed=1, kind="reviews")
    assert read_rows(reviews) == list(generate_reviews(50, seed=1))
    with pytest.raises(ValueError, match="unsupported suffix"):
        write_corpus(tmp_path / "corpus.json", 10)
    with pytest.raises(ValueError, match="kind"):
        write_corpus(tmp_path / "x.jsonl", 10, kind="poems")


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
