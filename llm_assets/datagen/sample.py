"""The shipped sample: ``data/sample/``, ``data/instructions/`` and ``data/chat/``, byte for
byte, with their planted bad lines.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llm_assets.datagen.chats import generate_chats
from llm_assets.datagen.corpus import KIND_PARAGRAPH, generate_records
from llm_assets.datagen.grammar import PLAIN
from llm_assets.datagen.instructions import generate_instructions
from llm_assets.datagen.reviews import generate_reviews
from llm_assets.datagen.writers import write_corpus

DATA_DIR = Path(__file__).resolve().parents[2] / "data"
"""The repository's ``data/`` folder (where :func:`make_sample` writes by default)."""

SAMPLE_SEED = 0


@dataclass(frozen=True)
class PlantedLine:
    """A deliberately bad (or odd) line of a shipped JSONL file (``wiki_sample.jsonl``,
    ``chats.jsonl``) and what ingest makes of it."""

    line: int
    """1-based line number in the file."""
    reason: str | None
    """The ingest reject reason it must produce; None for a line that is kept."""
    description: str
    raw: bytes
    """The exact bytes of the line, without its newline."""


SAMPLE_WIKI_LINES = 2500
"""Lines of ``wiki_sample.jsonl``: generated records plus the planted lines."""
PLANTED_LINES: tuple[PlantedLine, ...] = (
    PlantedLine(
        42,
        "invalid_json",
        "malformed JSON: a comma is missing between two fields",
        b'{"text": " The survey of the estate was never completed . \\n" "title": "Planted", '
        b'"id": "planted-invalid-json"}',
    ),
    PlantedLine(
        404,
        "invalid_utf8",
        "invalid UTF-8: Latin-1 bytes (0xE9 0xE8) inside an otherwise valid JSON line",
        b'{"text": " The caf\xe9 near the chapel was rebuilt in 1887 by the m\xe8re . \\n", '
        b'"title": "Planted", "id": "planted-invalid-utf8"}',
    ),
    PlantedLine(
        777,
        "missing_text",
        'an object without a "text" field (the prose is under "body")',
        b'{"body": " The old mill was closed in 1921 . \\n", "title": "Planted", '
        b'"id": "planted-missing-text"}',
    ),
    PlantedLine(
        1234,
        "non_string_text",
        '"text" is a number (1234567), not a string',
        b'{"text": 1234567, "title": "Planted", "id": "planted-number-text"}',
    ),
    PlantedLine(
        1800,
        "not_an_object",
        "valid JSON that is a list, not an object",
        b'["planted-not-an-object", " A JSON array where an object belongs . \\n"]',
    ),
    PlantedLine(
        2222,
        None,
        'a whitespace-only "text": a valid record, kept by ingest, empty once normalized',
        b'{"text": "   \\n", "title": "Planted", "id": "planted-blank-text"}',
    ),
)
"""The six planted lines of ``data/sample/wiki_sample.jsonl`` (see ``data/README.md``)."""

SAMPLE_CHATS = 120
"""Generated conversations in ``chat/chats.jsonl``."""
PLANTED_CHAT_LINES: tuple[PlantedLine, ...] = (
    PlantedLine(
        37,
        "invalid_chat",
        "the last message is the user's: a conversation without an answer to learn",
        b'{"id": "planted-last-user", "messages": [{"role": "user", "content": "What is the '
        b'capital of Peru?"}, {"role": "assistant", "content": "The capital of Peru is Lima."}, '
        b'{"role": "user", "content": "Thanks! And what is the capital of Bolivia?"}]}',
    ),
    PlantedLine(
        101,
        "missing_text",
        '"messages": null',
        b'{"id": "planted-null-messages", "messages": null}',
    ),
)
"""The two planted lines of ``data/chat/chats.jsonl``, read with ``chat_field: messages`` (see
``data/README.md``)."""
SAMPLE_CHAT_LINES = SAMPLE_CHATS + len(PLANTED_CHAT_LINES)
"""Lines of ``chat/chats.jsonl``: the generated conversations plus the planted lines."""


def make_sample(root: str | Path = DATA_DIR, seed: int = SAMPLE_SEED) -> dict[str, int]:
    """(Re)write the shipped sample under ``root``: ``sample/`` (what the pipeline reads by
    default), ``instructions/instructions.jsonl`` and ``chat/chats.jsonl`` (SFT rows, not read by
    default).

    The result is byte-identical for the same seed (and pyarrow version, for the Parquet file).
    Returns each file's path relative to ``root`` and its number of rows (lines for
    ``wiki_sample.jsonl`` and ``chats.jsonl``, paragraphs for ``notes.txt``).
    """
    root = Path(root)
    sample = root / "sample"
    counts: dict[str, int] = {}

    def write(name: str, rows: Iterable[Mapping[str, Any]]) -> None:
        materialized = list(rows)
        write_corpus(root / name, materialized)
        counts[name] = len(materialized)

    counts["sample/wiki_sample.jsonl"] = _write_wiki_sample(sample / "wiki_sample.jsonl", seed)
    write("sample/wiki_more.jsonl.gz", generate_records(300, seed + 1))
    write("sample/wiki_more.jsonl.zst", generate_records(300, seed + 2))
    write(
        "sample/wiki_table.parquet",
        (
            {**record, "url": "https://en.wikipedia.org/wiki/" + record["title"].replace(" ", "_")}
            for record in generate_records(300, seed + 3)
        ),
    )
    write("sample/reviews.csv", generate_reviews(200, seed))
    notes = (
        record
        for record in generate_records(10**6, seed + 4, style=PLAIN, with_meta=True)
        if record["kind"] == KIND_PARAGRAPH and record["lang"] == "en"
    )
    write(
        "sample/notes.txt",
        ({"text": textwrap.fill(next(notes)["text"], width=88)} for _ in range(40)),
    )
    write("instructions/instructions.jsonl", generate_instructions(200, seed))
    counts["chat/chats.jsonl"] = _write_planted(
        root / "chat" / "chats.jsonl", generate_chats(SAMPLE_CHATS, seed), PLANTED_CHAT_LINES
    )
    return counts


def _write_wiki_sample(path: Path, seed: int) -> int:
    """Generated records with :data:`PLANTED_LINES` at their line numbers; returns the lines."""
    records = generate_records(SAMPLE_WIKI_LINES - len(PLANTED_LINES), seed)
    return _write_planted(path, records, PLANTED_LINES)


def _write_planted(
    path: Path, rows: Iterator[Mapping[str, Any]], planted_lines: Sequence[PlantedLine]
) -> int:
    """JSONL of ``rows`` with ``planted_lines`` at their line numbers (a row after the last
    planted line is written too); returns the lines written."""
    planted = {p.line: p.raw for p in planted_lines}
    path.parent.mkdir(parents=True, exist_ok=True)
    line = 0
    with open(path, "wb") as handle:
        while True:
            line += 1
            raw = planted.pop(line, None)
            if raw is None:
                row = next(rows, None)
                if row is None:
                    break
                raw = json.dumps(row, ensure_ascii=False).encode("utf-8")
            handle.write(raw + b"\n")
    if planted:
        raise ValueError(f"{path}: too few rows for the planted lines {sorted(planted)}")
    return line - 1
