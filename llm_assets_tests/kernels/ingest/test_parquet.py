"""The Parquet reader: row groups, damage, and values Arrow or Python cannot hold."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_assets.kernels.ingest.read import IngestSpec
from llm_assets.kernels.ingest.records import (
    CORRUPT_FILE,
    INVALID_UTF8,
    MALFORMED_RECORD,
    MISSING_TEXT,
    NON_STRING_TEXT,
)
from llm_assets_tests.kernels.ingest.test_read import read, reasons


def test_parquet_with_the_wrong_schema_rejects_every_row_naming_the_problem(tmp_path):
    pq.write_table(pa.table({"body": ["x", "y"]}), tmp_path / "wrong.parquet")
    kept, rejects = read(tmp_path / "wrong.parquet")
    assert kept.num_rows == 0 and reasons(rejects) == [(1, MISSING_TEXT), (2, MISSING_TEXT)]
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "ints.parquet")
    assert read(tmp_path / "ints.parquet")[1]["reason"].to_pylist() == [NON_STRING_TEXT] * 2


def _strings_with_bad_utf8() -> pa.Array:
    """``["ok", b"\\xff\\xfebad", "ok"]`` as an Arrow string array: Parquet writers and readers
    do not check UTF-8, so such files exist."""
    offsets = pa.py_buffer(pa.array([0, 2, 7, 9], pa.int32()).buffers()[1])
    return pa.Array.from_buffers(pa.string(), 3, [None, offsets, pa.py_buffer(b"ok\xff\xfebadok")])


@pytest.mark.parametrize("column", ["text", "title"])
def test_parquet_invalid_utf8_in_any_column_rejects_only_that_row(tmp_path, column):
    """Invalid UTF-8 in the text or in a metadata column: that row is an ``invalid_utf8`` reject
    naming the column, with a readable sample; the other rows are kept (a UnicodeDecodeError
    would fail the shard, recorded already, at every re-run)."""
    table = pa.table({"text": ["a", "b", "c"], "title": ["x", "y", "z"]})
    table = table.set_column(table.schema.get_field_index(column), column, _strings_with_bad_utf8())
    pq.write_table(table, tmp_path / "bad.parquet")
    kept, rejects = read(tmp_path / "bad.parquet")
    assert kept["source_line"].to_pylist() == [1, 3]
    assert reasons(rejects) == [(2, INVALID_UTF8)]
    assert rejects["value"][0].as_py().startswith(f"column {column!r}: ")
    assert "\ufffd\ufffdbad" in rejects["sample"][0].as_py()
    kept.validate(full=True)
    rejects.validate(full=True)


def test_parquet_damaged_midway_keeps_every_readable_row_group(tmp_path):
    """A damaged data page in row group 7 of 10: its 100 rows are one ``corrupt_file`` reject
    naming them, and the 900 rows before and after it are kept (not every row lost to one
    reject at line 0)."""
    path = tmp_path / "damaged.parquet"
    texts = [f"document number {i}" for i in range(1000)]
    pq.write_table(pa.table({"text": texts}), path, row_group_size=100, compression="zstd")
    page = pq.ParquetFile(path).metadata.row_group(7).column(0).data_page_offset
    data = bytearray(path.read_bytes())
    data[page + 2 : page + 12] = b"\xab" * 10  # inside the page header
    path.write_bytes(bytes(data))
    for batch_rows in (64, 8192):
        kept, rejects = read(path, IngestSpec(batch_rows=batch_rows))
        assert kept["text"].to_pylist() == texts[:700] + texts[800:]
        assert kept["source_line"].to_pylist() == list(range(1, 701)) + list(range(801, 1001))
        assert reasons(rejects) == [(701, CORRUPT_FILE)]
        assert rejects["value"][0].as_py().startswith("rows 701-800 (row group 7) unreadable")


def test_parquet_row_group_ranges_read_their_rows_once_with_file_row_numbers(tmp_path):
    """A big Parquet file is read as several raw shards, each a range of row groups: together
    they give the whole file's rows, numbered as in the file; the damaged row group 7 is one
    ``corrupt_file`` reject of the range holding it, not of the ranges after it."""
    path = tmp_path / "damaged.parquet"
    texts = [f"document number {i}" for i in range(1000)]
    pq.write_table(pa.table({"text": texts}), path, row_group_size=100, compression="zstd")
    page = pq.ParquetFile(path).metadata.row_group(7).column(0).data_page_offset
    data = bytearray(path.read_bytes())
    data[page + 2 : page + 12] = b"\xab" * 10
    path.write_bytes(bytes(data))
    whole_kept, whole_rejects = read(path, IngestSpec(batch_rows=64))
    ranges = [(0, 4), (4, 8), (8, 10)]
    pieces = [read(path, IngestSpec(batch_rows=64), row_groups=r) for r in ranges]
    assert pa.concat_tables([k for k, _ in pieces]).equals(whole_kept)
    assert [reasons(r) for _, r in pieces] == [[], [(701, CORRUPT_FILE)], []]
    assert pieces[1][1].equals(whole_rejects)
    assert pieces[2][0]["source_line"].to_pylist() == list(range(801, 1001))
    with pytest.raises(ValueError, match="row_groups only applies to Parquet files"):
        read(tmp_path / "x.jsonl", row_groups=(0, 1))


def test_parquet_string_view_text_and_repeated_column_names(tmp_path):
    """A ``string_view`` text column is read like any string (Arrow's take has no kernel for
    it); the first column named ``text`` is the text and a repeated name goes to metadata as
    ``name#2`` (no KeyError failing the shard)."""
    pq.write_table(
        pa.table({"text": pa.array(["x", "y"], pa.string_view())}), tmp_path / "v.parquet"
    )
    kept, rejects = read(tmp_path / "v.parquet")
    assert kept["text"].to_pylist() == ["x", "y"] and rejects.num_rows == 0
    table = pa.Table.from_arrays(
        [pa.array(["a"]), pa.array(["b"]), pa.array([1]), pa.array([2])],
        names=["text", "text", "id", "id"],
    )
    pq.write_table(table, tmp_path / "dup.parquet")
    kept, rejects = read(tmp_path / "dup.parquet")
    assert kept["text"].to_pylist() == ["a"] and rejects.num_rows == 0
    assert json.loads(kept["metadata"][0].as_py()) == {"text#2": "b", "id": 1, "id#2": 2}


def test_parquet_dates_python_cannot_hold_go_to_metadata_as_text(tmp_path):
    """A date, timestamp or duration outside Python's range (``Long.MAX_VALUE`` ms for "never
    expires", a date32 of 2**31-1, in a list or a struct too) made Arrow's ``to_pylist`` raise
    OverflowError: the shard failed at every retry and the run failed. Now such a value goes to
    metadata as Arrow's text of it and the row is kept; in-range values are written as before.
    A temporal text column is a ``non_string_text`` reject whose sample shows the values."""
    never = 2**63 - 1
    struct = pa.StructArray.from_arrays(
        [pa.array([0, 2**31 - 1], pa.date32()), pa.array([1, 2])], ["d", "d"]
    )
    table = pa.table(
        {
            "text": ["a", "b"],
            "expires": pa.array([0, never], pa.timestamp("ms")),
            "expires_utc": pa.array([0, never], pa.timestamp("ms", tz="UTC")),
            "day": pa.array([0, 2**31 - 1], pa.date32()),
            "ttl": pa.array([1, 2**62], pa.duration("s")),
            "days": pa.array([[0], [2**31 - 1]], pa.list_(pa.date32())),
            "nested": struct,
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    kept, rejects = read(tmp_path / "t.parquet")
    assert rejects.num_rows == 0
    first, second = (json.loads(m) for m in kept["metadata"].to_pylist())
    assert first == {
        "expires": "1970-01-01T00:00:00",
        "expires_utc": "1970-01-01T00:00:00+00:00",
        "day": "1970-01-01",
        "ttl": "0:00:01",
        "days": ["1970-01-01"],
        "nested": {"d": "1970-01-01", "d#2": 1},
    }
    out = "<value out of range: {}>".format
    assert second == {
        "expires": out(never),
        "expires_utc": out(never),
        "day": out(2**31 - 1),
        "ttl": f"{2**62} s",
        "days": [out(2**31 - 1)],
        "nested": {"d": out(2**31 - 1), "d#2": 2},
    }

    table = pa.table({"text": pa.array([0, never], pa.timestamp("ms")), "id": [1, 2]})
    pq.write_table(table, tmp_path / "temporal_text.parquet")
    kept, rejects = read(tmp_path / "temporal_text.parquet")
    assert kept.num_rows == 0 and reasons(rejects) == [(1, NON_STRING_TEXT), (2, NON_STRING_TEXT)]
    assert json.loads(rejects["sample"][1].as_py()) == {"text": out(never), "id": 2}


def test_parquet_value_arrow_refuses_is_a_malformed_record_with_arrows_message(tmp_path):
    """A value failing Arrow's validation for a reason other than UTF-8 (a time32 of 90,000 s,
    past 24 h) was an ``invalid_utf8`` reject with the sample ``<invalid UTF-8>``; it is a
    ``malformed_record`` reject with Arrow's message and the value in the sample."""
    table = pa.table({"text": ["a", "b"], "at": pa.array([0, 90_000], pa.time32("s"))})
    pq.write_table(table, tmp_path / "t.parquet")
    kept, rejects = read(tmp_path / "t.parquet")
    assert kept["text"].to_pylist() == ["a"]
    assert reasons(rejects) == [(2, MALFORMED_RECORD)]
    assert "not within the acceptable range" in rejects["value"][0].as_py()
    assert json.loads(rejects["sample"][0].as_py()) == {
        "text": "b",
        "at": "<value out of range: 90000000>",  # Parquet stores time32 in ms
    }


def test_parquet_column_name_not_utf8_is_a_corrupt_file_reject(tmp_path):
    """A column name that is not valid UTF-8 made ``pq.ParquetFile`` raise UnicodeDecodeError,
    which nothing caught: the run failed. It is one ``corrupt_file`` reject of the file, saying
    why."""
    path = tmp_path / "name.parquet"
    pq.write_table(pa.table({"text": ["a"], "mXta": ["1"]}), path, store_schema=False)
    path.write_bytes(path.read_bytes().replace(b"mXta", b"m\xffta"))
    kept, rejects = read(path)
    assert kept.num_rows == 0 and reasons(rejects) == [(0, CORRUPT_FILE)]
    assert "column name is not valid UTF-8" in rejects["value"][0].as_py()
