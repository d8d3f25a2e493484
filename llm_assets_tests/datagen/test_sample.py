"""The shipped sample: what make_sample writes, its planted lines where the README says,
and ingest rejecting exactly those."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from llm_assets.datagen.chats import generate_chats
from llm_assets.datagen.sample import (
    PLANTED_CHAT_LINES,
    PLANTED_LINES,
    SAMPLE_CHAT_LINES,
    SAMPLE_CHATS,
    SAMPLE_WIKI_LINES,
    make_sample,
)
from llm_assets_tests.conftest import REPO, SAMPLE_DIR
from llm_assets_tests.datagen.read_back import read_rows

CHATS = REPO / "data" / "chat" / "chats.jsonl"


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
    # data/README.md's table says what each planted line gives, reject values included.
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
