"""The command line: ``python -m llm_assets.datagen``."""

from __future__ import annotations

from collections import Counter

import pytest

from llm_assets.datagen.chats import generate_chats
from llm_assets.datagen.cli import main
from llm_assets.datagen.corpus import (
    KIND_DUPLICATE,
    KIND_NEAR_DUPLICATE,
    generate_records,
)
from llm_assets_tests.datagen.read_back import read_rows


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
