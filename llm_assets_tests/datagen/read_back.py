"""Read back what the generators wrote, with the plain libraries of each format."""

from __future__ import annotations

import csv
import gzip
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import zstandard


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
