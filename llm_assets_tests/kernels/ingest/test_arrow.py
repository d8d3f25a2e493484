"""The Arrow IPC reader: record batches found from the messages' headers, ranges of them read
alone, the IPC file format, and damage."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from llm_assets.kernels.ingest.arrow import NotSplittable, record_batch_spans
from llm_assets.kernels.ingest.read import IngestSpec, read_documents
from llm_assets.kernels.ingest.records import CORRUPT_FILE, MISSING_TEXT
from llm_assets_tests.kernels.ingest.test_read import read, reasons


def _table(rows: int) -> pa.Table:
    return pa.table(
        {
            "text": [f"document {i}" for i in range(rows)],
            "label": [i % 3 for i in range(rows)],
            "meta": [{"n": i} for i in range(rows)],
        }
    )


def _write(path, table: pa.Table, batch_rows: int, *, file_format: bool = False) -> None:
    """``table`` as an Arrow IPC stream (as Hugging Face ``datasets`` writes) or file."""
    new = pa.ipc.new_file if file_format else pa.ipc.new_stream
    with pa.OSFile(str(path), "wb") as sink, new(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=batch_rows):
            writer.write_batch(batch)


@pytest.mark.parametrize("file_format", [False, True])
def test_spans_are_the_record_batches_and_each_range_reads_alone(tmp_path, file_format):
    path = tmp_path / "data.arrow"
    _write(path, _table(250), 100, file_format=file_format)
    spans = record_batch_spans(str(path))
    assert [rows for _, _, rows in spans] == [100, 100, 50]
    assert [start for start, _, _ in spans[1:]] == [end for _, end, _ in spans[:-1]]
    kept, rejects = read(path)
    assert rejects.num_rows == 0 and kept["source_line"].to_pylist() == list(range(1, 251))
    assert json.loads(kept["metadata"][7].as_py()) == {"label": 1, "meta": {"n": 7}}
    start, end, _ = spans[1]
    part, _ = read(path, byte_range=(start, end), first_line=101)
    assert part.equals(kept.slice(100, 100))


def test_batches_are_cut_to_the_spec_s_rows(tmp_path):
    path = tmp_path / "data.arrow"
    _write(path, _table(250), 250)
    results = list(read_documents(str(path), "data.arrow", IngestSpec(batch_rows=64)))
    assert [r.kept.num_rows for r in results] == [64, 64, 64, 58]


def test_dictionary_batches_are_not_split_but_read(tmp_path):
    path = tmp_path / "dict.arrow"
    table = pa.table({"text": pa.array(["a", "b", "a"]).dictionary_encode()})
    _write(path, table, 1)
    with pytest.raises(NotSplittable):
        record_batch_spans(str(path))
    assert read(path)[0]["text"].to_pylist() == ["a", "b", "a"]


def test_a_cut_off_stream_keeps_the_batches_before_and_rejects_the_rest(tmp_path):
    path = tmp_path / "cut.arrow"
    _write(path, _table(250), 100)
    data = path.read_bytes()
    start, end, _ = record_batch_spans(str(path))[2]
    path.write_bytes(data[: (start + end) // 2])
    kept, rejects = read(path)
    assert kept.num_rows == 200
    assert reasons(rejects) == [(201, CORRUPT_FILE)]


def test_without_the_text_column_every_row_is_a_reject(tmp_path):
    path = tmp_path / "body.arrow"
    _write(path, pa.table({"body": ["x", "y"]}), 10)
    kept, rejects = read(path)
    assert kept.num_rows == 0 and reasons(rejects) == [(1, MISSING_TEXT), (2, MISSING_TEXT)]
