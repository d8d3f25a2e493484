"""Ingest: every format, stable locations and ids, and what happens to each kind of bad input.

The invariant checked throughout: every record (non-blank JSONL line, CSV record, TXT paragraph,
Parquet row) is either kept or rejected with a reason and its location; nothing raises past the
reject path except an unsupported file type (the run fails early, naming the file).
"""

from __future__ import annotations

import gzip
import io
import json
import random
import struct
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_assets.kernels.ingest import (
    CORRUPT_FILE,
    EMPTY_FILE,
    INVALID_JSON,
    INVALID_UTF8,
    MALFORMED_RECORD,
    MISSING_TEXT,
    NON_STRING_TEXT,
    NOT_AN_OBJECT,
    RAGGED_ROW,
    TRUNCATED_FILE,
    IngestSpec,
    UnsupportedFileError,
    file_encoding,
    read_documents,
)
from llm_assets.kernels.schema import make_doc_id
from llm_assets.stages.raw_documents import line_ranges


def read(path: Path, spec: IngestSpec | None = None, **kw) -> tuple[pa.Table, pa.Table]:
    results = list(read_documents(str(path), path.name, spec or IngestSpec(), **kw))
    kept = pa.concat_tables([r.kept for r in results])
    rejects = pa.concat_tables([r.rejects for r in results])
    return kept, rejects


def reasons(rejects: pa.Table) -> list[tuple[int, str]]:
    return list(zip(rejects["source_line"].to_pylist(), rejects["reason"].to_pylist(), strict=True))


LINES = [
    b'{"text": "first doc", "title": "a", "rating": 5}',
    b'{"text": "second doc"}',
]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst"])
def test_jsonl_formats_keep_text_metadata_and_location(tmp_path, suffix):
    raw = b"\n".join(LINES) + b"\n"
    if suffix.endswith("gz"):
        raw = gzip.compress(raw)
    elif suffix.endswith("zst"):
        raw = zstandard.ZstdCompressor().compress(raw)
    path = tmp_path / f"docs{suffix}"
    path.write_bytes(raw)
    kept, rejects = read(path)
    assert kept["text"].to_pylist() == ["first doc", "second doc"]
    assert kept["source_line"].to_pylist() == [1, 2]
    assert kept["doc_id"].to_pylist() == [make_doc_id(path.name, 1), make_doc_id(path.name, 2)]
    assert json.loads(kept["metadata"][0].as_py()) == {"title": "a", "rating": 5}
    assert kept["metadata"][1].as_py() is None
    assert rejects.num_rows == 0


def test_configurable_text_field(tmp_path):
    path = tmp_path / "sft.jsonl"
    path.write_text('{"instruction": "say hi", "output": "hi"}\n')
    kept, _ = read(path, IngestSpec(text_field="output"))
    assert kept["text"].to_pylist() == ["hi"]
    assert json.loads(kept["metadata"][0].as_py()) == {"instruction": "say hi"}


def test_parquet_csv_and_txt(tmp_path):
    pq.write_table(pa.table({"text": ["p1", None], "url": ["u1", "u2"]}), tmp_path / "t.parquet")
    kept, rejects = read(tmp_path / "t.parquet")
    assert kept["text"].to_pylist() == ["p1"] and json.loads(kept["metadata"][0].as_py()) == {
        "url": "u1"
    }
    assert reasons(rejects) == [(2, MISSING_TEXT)]

    (tmp_path / "r.csv").write_text('rating,text\n5,"great, really"\n1,bad\n3\n')
    kept, rejects = read(tmp_path / "r.csv")
    assert kept["text"].to_pylist() == ["great, really", "bad"]
    assert reasons(rejects) == [(3, RAGGED_ROW)]

    (tmp_path / "n.txt").write_text("para one\nline two\n\n\n\npara two\n")
    kept, _ = read(tmp_path / "n.txt")
    assert kept["text"].to_pylist() == ["para one\nline two", "para two"]
    assert kept["source_line"].to_pylist() == [1, 6]


def test_each_bad_jsonl_line_is_a_reject_with_reason_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(
        b'{"text": "ok"}\n'  # 1 kept
        b'{"text": \n'  # 2 malformed JSON
        b'{"text": "caf\xe9"}\n'  # 3 invalid UTF-8
        b'{"body": "no text"}\n'  # 4 missing text
        b'{"text": 42}\n'  # 5 number
        b'{"text": ["a", "b"]}\n'  # 6 list
        b'{"text": null}\n'  # 7 null
        b'["not", "an", "object"]\n'  # 8 list instead of object
        b"\n"  # 9 blank: skipped, not a record
        b'{"text": "nul\\u0000byte"}\n'  # 10 NUL kept (normalization removes controls)
        + b"[" * 100_000
        + b"]" * 100_000
        + b"\n"  # 11 deeply nested JSON
    )
    kept, rejects = read(path)
    assert kept["source_line"].to_pylist() == [1, 10]
    assert kept["text"][1].as_py() == "nul\x00byte"
    assert reasons(rejects) == [
        (2, INVALID_JSON),
        (3, INVALID_UTF8),
        (4, MISSING_TEXT),
        (5, NON_STRING_TEXT),
        (6, NON_STRING_TEXT),
        (7, MISSING_TEXT),
        (8, NOT_AN_OBJECT),
        (11, INVALID_JSON),
    ]
    assert all(v for v in rejects["value"].to_pylist())


def test_a_record_nested_deeper_than_orjson_writes_is_a_reject_not_a_crash(tmp_path):
    """orjson reads 300 nested lists but cannot write them back as metadata: before, the
    encoder's error crashed the whole shard (and every retry of it)."""
    path = tmp_path / "deep.jsonl"
    path.write_text('{"text": "deep", "m": ' + "[" * 300 + "]" * 300 + '}\n{"text": "next"}\n')
    kept, rejects = read(path)
    assert kept["text"].to_pylist() == ["next"]
    assert reasons(rejects) == [(1, "malformed_record")]
    assert "cannot be stored as metadata" in rejects["value"][0].as_py()


def test_empty_and_broken_files_are_whole_file_rejects(tmp_path):
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert reasons(read(tmp_path / "empty.jsonl")[1]) == [(0, EMPTY_FILE)]
    (tmp_path / "empty.csv").write_bytes(b"")
    assert reasons(read(tmp_path / "empty.csv")[1]) == [(0, EMPTY_FILE)]

    whole = gzip.compress(b"\n".join(LINES * 500) + b"\n")
    (tmp_path / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    kept, rejects = read(tmp_path / "cut.jsonl.gz")
    assert rejects["reason"].to_pylist()[-1] in (TRUNCATED_FILE, CORRUPT_FILE)
    assert kept.num_rows < 1000

    whole = zstandard.ZstdCompressor().compress(b"\n".join(LINES * 500) + b"\n")
    (tmp_path / "cut.jsonl.zst").write_bytes(whole[: len(whole) // 2])
    assert read(tmp_path / "cut.jsonl.zst")[1]["reason"].to_pylist()[-1] == TRUNCATED_FILE

    (tmp_path / "binary.parquet").write_bytes(bytes(range(256)) * 10)
    assert reasons(read(tmp_path / "binary.parquet")[1]) == [(0, CORRUPT_FILE)]

    (tmp_path / "binary.jsonl.gz").write_bytes(bytes(range(256)) * 10)
    assert read(tmp_path / "binary.jsonl.gz")[1]["reason"].to_pylist() == [CORRUPT_FILE]


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
    naming the column, with a readable sample; the other rows are kept (before: the stage
    crashed with a UnicodeDecodeError and the shard, recorded already, failed every re-run)."""
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
    naming them, and the 900 rows before and after it are kept (before: every row was lost to
    one reject at line 0)."""
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
    """A ``string_view`` text column is read like any string (before: a ``corrupt_file``
    reject, Arrow's take having no kernel for it); the first column named ``text`` is the text
    and a repeated name goes to metadata as ``name#2`` (before: a KeyError failed the shard)."""
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


def test_csv_quote_never_closed_is_a_reject_and_nothing_is_swallowed(tmp_path):
    """A quote never closed is a ``corrupt_file`` at the record it opens (before: the rest of
    the file became that record's text, its records silently gone). Text after a closing quote
    (``"ok" x``, ``"alpha" ``, written by some exporters) is read into the field, as before and
    as spreadsheet programs do; a quoted field spanning lines at the end of the file is whole."""
    (tmp_path / "open.csv").write_text('id,text\n1,"ok"\n2,"never closed\n3,after\n4,more\n')
    kept, rejects = read(tmp_path / "open.csv")
    assert kept["text"].to_pylist() == ["ok"]
    assert reasons(rejects) == [(2, CORRUPT_FILE)]
    assert "never closed" in rejects["value"][0].as_py()
    assert rejects["sample"][0].as_py() == '2,"never closed\n3,after\n4,more'

    (tmp_path / "loose.csv").write_text('id,text\n1,"ok" x\n2,"alpha" \n3,fine\n4,"two\nlines"')
    kept, rejects = read(tmp_path / "loose.csv")
    assert kept["text"].to_pylist() == ["ok x", "alpha ", "fine", "two\nlines"]
    assert rejects.num_rows == 0


def test_csv_repeated_column_names_keep_every_value(tmp_path):
    (tmp_path / "dup.csv").write_text("text,id,id,text\na,1,2,b\n")
    kept, _ = read(tmp_path / "dup.csv")
    assert kept["text"].to_pylist() == ["a"]
    assert json.loads(kept["metadata"][0].as_py()) == {"id": "1", "id#2": "2", "text#2": "b"}


@pytest.mark.parametrize("junk", [b"garbage!!", b"\x28\xb5\x2f\xfd" + b"\xff" * 64])
def test_zstd_junk_after_good_frames_keeps_the_records_before_it(tmp_path, junk):
    """Junk after complete frames (or a damaged frame header): the records decoded before it
    are kept and one ``corrupt_file`` reject follows them (before: all were lost, line 0)."""
    lines = b"".join(b'{"text": "doc %d"}\n' % i for i in range(20_000))
    compressor = zstandard.ZstdCompressor()
    path = tmp_path / "junk.jsonl.zst"
    path.write_bytes(
        compressor.compress(lines[:100_000]) + compressor.compress(lines[100_000:]) + junk
    )
    kept, rejects = read(path)
    assert kept.num_rows == 20_000
    assert reasons(rejects) == [(20_001, CORRUPT_FILE)]


def test_a_blank_jsonl_file_read_in_ranges_is_one_empty_file_reject(tmp_path):
    """Only blank lines, split into several byte ranges: the first range reports the file as
    ``empty_file`` (before: no range did, and the file appeared nowhere); a file whose records
    all lie after a blank first range gives no such reject."""
    path = tmp_path / "blank.jsonl"
    for data, expected in (
        (b"\n  \n\n\r\n\n\n\n", [(0, EMPTY_FILE)]),
        (b"\n" * 6 + b'{"text": "x"}\n', []),
    ):
        path.write_bytes(data)
        ranges = line_ranges(path, 3)
        assert len(ranges) == 3
        results = [
            result
            for start, end, first in ranges
            for result in read_documents(
                str(path), path.name, IngestSpec(), byte_range=(start, end), first_line=first
            )
        ]
        rejects = pa.concat_tables([r.rejects for r in results]) if results else None
        assert (reasons(rejects) if rejects is not None else []) == expected
        assert sum(r.kept.num_rows for r in results) == (0 if expected else 1)


def test_a_50_mb_single_line_is_read(tmp_path):
    text = "word " * 10_000_000  # 50 MB on one line, between two ordinary lines
    (tmp_path / "long.jsonl").write_text(
        '{"text": "before"}\n' + json.dumps({"text": text}) + '\n{"text": "after"}\n'
    )
    kept, rejects = read(tmp_path / "long.jsonl")
    assert kept["source_line"].to_pylist() == [1, 2, 3] and rejects.num_rows == 0
    assert kept["text"][1].as_py() == text


def test_duplicate_ids_in_the_input_do_not_collide(tmp_path):
    """Records carrying the same ``doc_id`` field (twice in one file, once in another) stay
    distinct documents: our ids come from the location; theirs stays in ``metadata``."""
    line = '{"doc_id": "same", "text": "one text"}\n'
    (tmp_path / "a.jsonl").write_text(line * 2)
    (tmp_path / "b.jsonl").write_text(line)
    ids, metadata = [], []
    for name in ("a.jsonl", "b.jsonl"):
        kept, rejects = read(tmp_path / name)
        assert rejects.num_rows == 0
        ids += kept["doc_id"].to_pylist()
        metadata += kept["metadata"].to_pylist()
    assert len(set(ids)) == 3
    assert all(json.loads(m) == {"doc_id": "same"} for m in metadata)


def test_unsupported_file_type_is_an_error_naming_it(tmp_path):
    """The error names the file and says how to keep it in the folder unread (a README.md in a
    downloaded dataset folder fails the run: the message said nothing of the ``_`` rule)."""
    (tmp_path / "notes.docx").write_bytes(b"PK")
    with pytest.raises(UnsupportedFileError, match=r"notes\.docx.*starting with '_' or '\.'"):
        read_documents(str(tmp_path / "notes.docx"), "notes.docx", IngestSpec())


@pytest.mark.parametrize("rows_per_shard", [1, 3, 7, 1000])
def test_byte_ranges_give_exactly_the_rows_of_a_whole_file_read(tmp_path, rows_per_shard):
    path = tmp_path / "big.jsonl"
    lines = [json.dumps({"text": f"doc {i}", "i": i}).encode() for i in range(20)]
    lines[5] = b"{broken"
    path.write_bytes(b"\n".join(lines) + b"\n")
    whole_kept, whole_rejects = read(path)
    parts = [
        read(path, byte_range=(start, end), first_line=first)
        for start, end, first in line_ranges(path, rows_per_shard)
    ]
    assert pa.concat_tables([k for k, _ in parts]).equals(whole_kept)
    assert pa.concat_tables([r for _, r in parts]).equals(whole_rejects)
    with pytest.raises(ValueError, match="byte_range"):
        read_documents(str(tmp_path / "x.csv"), "x.csv", IngestSpec(), byte_range=(0, 1))


# --- fuzz: random bytes and random JSON never escape the reject path -----------------------------
FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
FORMATS = [".csv", ".txt", ".jsonl.gz", ".jsonl.zst", ".parquet"]
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.binary(max_size=60) | _json.map(lambda v: json.dumps(v).encode()), max_size=30))
def test_fuzz_jsonl_lines_are_kept_or_rejected(tmp_path, lines):
    lines = [line.replace(b"\n", b" ").replace(b"\r", b" ") for line in lines]
    if lines and lines[0].startswith((b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")):
        # A UTF-16 or UTF-32 byte-order mark makes the whole file of that encoding, whose line
        # breaks are not these bytes (hypothesis found [FE FF, NUL]): see the utf16 tests below.
        lines[0] = b"#" + lines[0]
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(b"\n".join(lines) + (b"\n" if lines else b""))
    kept, rejects = read(path)
    # A UTF-8 BOM opening the file is an encoding mark, not content: a first line of only a BOM
    # is blank (hypothesis found [BOM, NUL]: one record, not two).
    records = sum(
        1
        for i, line in enumerate(lines)
        if (line[3:] if i == 0 and line.startswith(b"\xef\xbb\xbf") else line).strip()
    )
    if records == 0:
        assert kept.num_rows == 0 and rejects["reason"].to_pylist() == [EMPTY_FILE]
    else:
        assert kept.num_rows + rejects.num_rows == records


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.binary(max_size=400),
    st.sampled_from([".csv", ".txt", ".jsonl.gz", ".jsonl.zst", ".parquet"]),
)
def test_fuzz_random_bytes_in_any_format_never_raise(tmp_path, data, suffix):
    path = tmp_path / f"fuzz{suffix}"
    path.write_bytes(data)
    kept, rejects = read(path)
    assert kept.num_rows + rejects.num_rows >= 1 or not data.strip()


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


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_suffixed_key_never_takes_another_columns_name(tmp_path, suffix):
    """Columns ``m,m,m#2``: the second ``m`` got the key ``m#2``, which the third column's name
    then overwrote, silently losing a value. The second ``m`` now gets the next free suffix."""
    path = tmp_path / f"c{suffix}"
    if suffix == ".csv":
        path.write_text("text,m,m,m#2\nT,1,2,3\n")
    else:
        columns = [pa.array(["T"]), pa.array(["1"]), pa.array(["2"]), pa.array(["3"])]
        pq.write_table(pa.Table.from_arrays(columns, ["text", "m", "m", "m#2"]), path)
    kept, _ = read(path)
    assert json.loads(kept["metadata"][0].as_py()) == {"m": "1", "m#3": "2", "m#2": "3"}


def test_csv_header_quote_never_closed_is_a_corrupt_file_reject(tmp_path):
    """A header whose quote is never closed swallowed the whole file as one column name, and
    the file became a single ``empty_file`` "no records" reject; it is now a ``corrupt_file``
    reject at the header (line 0) saying so, as a body record's unclosed quote is."""
    (tmp_path / "h.csv").write_text('text,"id\n1,a\n2,b\n3,c\n')
    kept, rejects = read(tmp_path / "h.csv")
    assert kept.num_rows == 0 and reasons(rejects) == [(0, CORRUPT_FILE)]
    assert "header is never closed" in rejects["value"][0].as_py()
    assert rejects["sample"][0].as_py().startswith('text,"id\n1,a')


def test_csv_blank_lines_before_the_header_are_skipped(tmp_path):
    """A blank or whitespace-only first line was taken as a header with no column, and every
    record became a ``ragged_row``; blank lines before the header are skipped as blank lines
    between records are, and records are numbered from the header on as usual."""
    (tmp_path / "b.csv").write_text("\n  \r\n\ntext,id\na,1\n\nb,2\n")
    kept, rejects = read(tmp_path / "b.csv")
    assert rejects.num_rows == 0
    assert kept["text"].to_pylist() == ["a", "b"] and kept["source_line"].to_pylist() == [1, 2]
    (tmp_path / "blank.csv").write_text("\n \n")
    assert reasons(read(tmp_path / "blank.csv")[1]) == [(0, EMPTY_FILE)]


def test_zstd_frame_with_a_window_over_128_mib_is_read(tmp_path):
    """A valid frame written with ``zstd --long=31`` (a 2 GiB window) was refused by the
    decoder's default 128 MiB limit: the whole file was one ``corrupt_file`` reject at line 0.
    Its records are read."""
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=31)
    raw = b"".join(b'{"text": "d%d"}\n' % i for i in range(100))
    path = tmp_path / "long.jsonl.zst"
    with (
        open(path, "wb") as handle,
        zstandard.ZstdCompressor(compression_params=params).stream_writer(handle) as writer,
    ):
        writer.write(raw)  # streamed: the frame keeps its 2 GiB window (no content size)
    kept, rejects = read(path)
    assert rejects.num_rows == 0 and kept["text"].to_pylist() == [f"d{i}" for i in range(100)]


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".txt", ".parquet"])
def test_batches_are_bounded_by_input_bytes_as_well_as_rows(tmp_path, suffix):
    """Batches were 8,192 records however large: 2,200 one-MB documents peaked at 5.6 GB in a
    worker. A batch is now also flushed once it holds ``batch_bytes`` of input, so memory
    follows the bytes, not rows x document size; the rows and their order are unchanged."""
    docs = [f"{i:02d}" + "x" * 1000 for i in range(20)]
    path = tmp_path / f"big{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    elif suffix == ".csv":
        path.write_text("text\n" + "".join(d + "\n" for d in docs))
    elif suffix == ".txt":
        path.write_text("".join(d + "\n\n" for d in docs))
    else:
        pq.write_table(pa.table({"text": docs}), path)
    results = list(read_documents(str(path), path.name, IngestSpec(batch_bytes=4000)))
    sizes = [r.kept.num_rows + r.rejects.num_rows for r in results]
    assert len(sizes) >= 5 and max(sizes) <= 4
    assert pa.concat_tables(r.kept for r in results)["text"].to_pylist() == docs
    with pytest.raises(ValueError, match="batch_bytes"):
        IngestSpec(batch_bytes=0)


def test_gzip_member_damaged_midway_names_the_lines_that_may_be_damaged(tmp_path):
    """gzip checks a member's CRC only at its end: the records decoded from a member damaged
    midway were kept or rejected as if sound, and the one ``corrupt_file`` reject said only
    "CRC check failed". Its value now names the damaged member and the lines decoded from it,
    which may hold damaged records; a sound member before it is not named. Members padded with
    zero bytes between them are read as before."""
    first = b"".join(b'{"text": "a%d"}\n' % i for i in range(10))
    second = bytearray(gzip.compress(b"".join(b'{"text": "b%d"}\n' % i for i in range(30_000))))
    second[-8] ^= 0xFF  # the CRC-32: every byte of data decodes, the check at the end fails
    (tmp_path / "d.jsonl.gz").write_bytes(gzip.compress(first) + b"\0" * 4 + bytes(second))
    kept, rejects = read(tmp_path / "d.jsonl.gz")
    # Every record decoded is kept, the last piece before the bad trailer too (a first version
    # of the member reader lost up to 64 KiB of intact records there, with no reject).
    assert kept["text"].to_pylist() == [f"a{i}" for i in range(10)] + [
        f"b{i}" for i in range(30_000)
    ]
    (value,) = rejects.filter(pa.compute.equal(rejects["reason"], CORRUPT_FILE))["value"]
    assert value.as_py().startswith("CRC check failed: gzip member 2 is damaged")
    assert "(lines 11-30010, 30000 lines)" in value.as_py() and "may be damaged" in value.as_py()
    assert rejects.num_rows == 1


def _gzip_module_lines(data: bytes) -> tuple[list[bytes], bool]:
    """The complete lines :class:`gzip.GzipFile` yields from ``data`` before it raises, and
    whether it raised: the least a damaged ``.jsonl.gz`` must keep."""
    lines = []
    try:
        lines.extend(gzip.GzipFile(fileobj=io.BytesIO(data)))
    except (OSError, EOFError, zlib.error):
        return [line for line in lines if line.endswith(b"\n")], True
    return lines, False


def test_gzip_damage_inside_the_deflate_data_keeps_the_records_decoded_before_it(tmp_path):
    """zlib drops all the output of a call that finds damage inside the deflate data (here a
    stored block whose length and its complement disagree: "invalid stored block lengths"):
    the up to 64 KiB of records that call decoded before the damage were lost, with no reject
    of their own, where the gzip module keeps all but its last 8 KiB. They are recovered and
    kept, and the one ``corrupt_file`` reject counts them among the lines of the member."""
    before = b"".join(b'{"text": "a%d"}\n' % i for i in range(2000))  # 30 KB: within one call
    after = b"".join(b'{"text": "b%d"}\n' % i for i in range(2000))
    deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    body = deflate.compress(before) + deflate.flush(zlib.Z_FULL_FLUSH)
    assert body.endswith(b"\x00\x00\xff\xff")  # a full flush ends with an empty stored block
    body = body[:-4] + b"\x00\x00\xfe\xff" + deflate.compress(after) + deflate.flush()
    damaged = (
        b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"
        + body
        + struct.pack("<II", zlib.crc32(before + after), len(before + after))
    )
    sound = b"".join(b'{"text": "s%d"}\n' % i for i in range(10))
    data = gzip.compress(sound) + damaged
    (tmp_path / "d.jsonl.gz").write_bytes(data)
    kept, rejects = read(tmp_path / "d.jsonl.gz")
    assert kept["text"].to_pylist() == [f"s{i}" for i in range(10)] + [f"a{i}" for i in range(2000)]
    assert reasons(rejects) == [(2011, CORRUPT_FILE)]
    value = rejects["value"][0].as_py()
    assert value.startswith(
        "Error -3 while decompressing data: invalid stored block lengths: gzip member 2 is"
        " damaged; its records read before this reject (lines 11-2010, 2000 lines)"
    )
    reference, raised = _gzip_module_lines(data)
    assert raised and len(reference) < kept.num_rows


@pytest.mark.parametrize("seed", range(40))
def test_gzip_damaged_anywhere_keeps_every_record_the_gzip_module_reads(tmp_path, seed):
    """A byte of a gzip file flipped, deleted or inserted at random, in members of random
    sizes, compression levels and strategies: every record the gzip module reads before it
    raises is kept at its line (a first version of the member reader lost up to 64 KiB of them
    when zlib found the damage inside the deflate data), and the file has a ``corrupt_file`` or
    ``truncated_file`` reject exactly when the gzip module raises."""
    rng = random.Random(seed)
    raw = b"".join(
        b'{"text": "%s %d"}\n' % (b"w" * rng.choice([1, 10, 100]), i) for i in range(3000)
    )
    cuts = sorted(rng.sample(range(1, len(raw)), rng.choice([0, 1, 3, 10])))
    data = bytearray()
    for start, end in zip([0, *cuts], [*cuts, len(raw)], strict=True):
        strategy = rng.choice([zlib.Z_DEFAULT_STRATEGY, zlib.Z_FIXED, zlib.Z_RLE])
        member = zlib.compressobj(rng.choice([0, 1, 6, 9]), zlib.DEFLATED, 31, 8, strategy)
        data += member.compress(raw[start:end]) + member.flush()  # wbits 31: a gzip member
    where = rng.randrange(10, len(data) - 8)
    change = rng.choice(["flip", "delete", "insert"])
    if change == "flip":
        data[where] ^= 1 << rng.randrange(8)
    elif change == "delete":
        del data[where]
    else:
        data[where:where] = bytes([rng.randrange(256)])
    (tmp_path / "d.jsonl.gz").write_bytes(data)
    kept, rejects = read(tmp_path / "d.jsonl.gz")
    reference, raised = _gzip_module_lines(bytes(data))
    texts = dict(zip(kept["source_line"].to_pylist(), kept["text"].to_pylist(), strict=True))
    for line_no, line in enumerate(reference, 1):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("text"), str):
            assert texts.get(line_no) == record["text"], (change, where, line_no)
    fatal = set(rejects["reason"].to_pylist()) & {CORRUPT_FILE, TRUNCATED_FILE}
    assert bool(fatal) == raised


def test_many_one_line_gzip_members_are_all_read_in_order(tmp_path):
    """20,000 one-line members, each its own gzip member: every record kept at its line. (Each
    member used to copy what was left of the 1 MiB input buffer three times: 100,000 such
    members took 8.7 s against 0.54 s for the gzip module; walked with an offset now, 0.55 s.
    Speed is measured outside the tests; this checks the offset walk loses nothing.)"""
    path = tmp_path / "tiny.jsonl.gz"
    path.write_bytes(
        b"".join(gzip.compress(b'{"text": "doc %d"}\n' % i, mtime=0) for i in range(20_000))
    )
    kept, rejects = read(path)
    assert kept["text"].to_pylist() == [f"doc {i}" for i in range(20_000)]
    assert kept["source_line"].to_pylist() == list(range(1, 20_001))
    assert rejects.num_rows == 0


def test_a_missing_text_field_names_the_fields_the_record_has(tmp_path):
    """A ``text_field`` that matches no field is rejected with the fields each record (CSV and
    Parquet: file) does have, so the reject says what to set (before: the value ``absent``,
    naming neither the field looked for nor the fields there were)."""
    (tmp_path / "a.jsonl").write_text(
        '{"document": {"text": "nested"}, "id": 1}\n{"text": "ok"}\n{}\n'
        + json.dumps({f"f{i}": i for i in range(20)})
        + "\n"
    )
    kept, rejects = read(tmp_path / "a.jsonl")
    assert kept["text"].to_pylist() == ["ok"]
    assert rejects["reason"].to_pylist() == [MISSING_TEXT] * 3
    assert rejects["value"].to_pylist() == [
        "no field 'text' (fields: document, id)",
        "no field 'text' (fields: none)",
        "no field 'text' (fields: f0, f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, "
        "... (20 in all))",
    ]
    pq.write_table(pa.table({"content": ["x"], "url": ["u"]}), tmp_path / "c.parquet")
    value = "no column 'text' (columns: content, url)"
    assert read(tmp_path / "c.parquet")[1]["value"].to_pylist() == [value]
    (tmp_path / "c.csv").write_text("title,body\nt,b\n")
    spec = IngestSpec(text_field="text")
    assert read(tmp_path / "c.csv", spec)[1]["value"].to_pylist() == [
        "no column 'text' (columns: title, body)"
    ]


@pytest.mark.parametrize("suffix", [".json", ".json.gz", ".json.zst"])
def test_json_files_are_json_lines_and_an_array_is_one_reject_saying_so(tmp_path, suffix):
    """``.json`` files are read as JSON Lines (what ``Dataset.to_json`` writes by default; before,
    every ``.json`` file failed the run as an unsupported type). A file holding one JSON array
    is one ``corrupt_file`` reject saying how to convert it; a damaged one gives the same rejects
    as the same bytes named ``.jsonl``."""
    compress = {
        ".json": lambda b: b,
        ".json.gz": gzip.compress,
        ".json.zst": zstandard.ZstdCompressor().compress,
    }[suffix]
    lines = b"\n".join(LINES * 3) + b"\n"
    (tmp_path / f"lines{suffix}").write_bytes(compress(lines))
    kept, rejects = read(tmp_path / f"lines{suffix}")
    assert kept.num_rows == 6 and rejects.num_rows == 0
    array = b'\xef\xbb\xbf \n[\n  {"text": "a"},\n  {"text": "b"}\n]\n'
    (tmp_path / f"array{suffix}").write_bytes(compress(array))
    kept, rejects = read(tmp_path / f"array{suffix}")
    assert kept.num_rows == 0 and reasons(rejects) == [(1, CORRUPT_FILE)]
    assert "JSON array, not JSON Lines" in rejects["value"][0].as_py()
    if suffix != ".json":
        whole = compress(b"\n".join(LINES * 500) + b"\n")
        for name in (f"cut{suffix}", f"cut{suffix}".replace(".json", ".jsonl")):
            (tmp_path / name).write_bytes(whole[: len(whole) // 2])
        as_json = read(tmp_path / f"cut{suffix}")
        as_jsonl = read(tmp_path / f"cut{suffix}".replace(".json", ".jsonl"))
        assert as_json[0].num_rows == as_jsonl[0].num_rows
        assert reasons(as_json[1]) == reasons(as_jsonl[1]) != []


UNICODE_CODECS = ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"]
_BOMS = {
    "utf-16-le": b"\xff\xfe",
    "utf-16-be": b"\xfe\xff",
    "utf-32-le": b"\xff\xfe\x00\x00",
    "utf-32-be": b"\x00\x00\xfe\xff",
}


def _encoded(text: str, codec: str) -> bytes:
    """``text`` as a Windows program writes it: the byte-order mark, then the encoding."""
    return _BOMS[codec] + text.encode(codec)


@pytest.mark.parametrize("codec", UNICODE_CODECS)
@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".jsonl.gz", ".jsonl.zst", ".csv", ".txt"])
def test_utf16_and_utf32_files_with_a_byte_order_mark_read_as_their_utf8_copy(
    tmp_path, codec, suffix
):
    """PowerShell's ``>`` and Excel's "Unicode Text" write UTF-16 with a byte-order mark: such
    a file (and UTF-32) gives the documents, lines and ids of the same file in UTF-8."""
    texts = ["première ligne, déjà", "二行目 🎉", 'quote " and \\ backslash']
    if suffix.startswith((".jsonl", ".json")):
        body = "".join(
            json.dumps({"text": t, "n": i}, ensure_ascii=False) + "\r\n"
            for i, t in enumerate(texts)
        )
    elif suffix == ".csv":
        body = "text,n\r\n" + "".join(
            f'"{t.replace(chr(34), chr(34) * 2)}",{i}\r\n' for i, t in enumerate(texts)
        )
    else:
        body = "".join(f"{t}\n\n" for t in texts)
    raw = _encoded(body, codec)
    utf8 = body.encode("utf-8")
    if suffix.endswith(".gz"):
        raw, utf8 = gzip.compress(raw), gzip.compress(utf8)
    elif suffix.endswith(".zst"):
        raw, utf8 = zstandard.compress(raw), zstandard.compress(utf8)
    (tmp_path / "wide").mkdir()
    (tmp_path / "narrow").mkdir()
    (tmp_path / "wide" / f"docs{suffix}").write_bytes(raw)
    (tmp_path / "narrow" / f"docs{suffix}").write_bytes(utf8)
    kept, rejects = read(tmp_path / "wide" / f"docs{suffix}")
    expected, _ = read(tmp_path / "narrow" / f"docs{suffix}")
    assert rejects.num_rows == 0
    assert kept["text"].to_pylist() == texts
    assert kept.to_pylist() == expected.to_pylist()
    assert file_encoding(str(tmp_path / "wide" / f"docs{suffix}")) == codec
    assert file_encoding(str(tmp_path / "narrow" / f"docs{suffix}")) is None


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".txt"])
def test_utf16_that_does_not_decode_rejects_only_its_line(tmp_path, suffix):
    """A lone surrogate (a program that cut a string inside a pair) and a last byte of half a
    character are ``invalid_utf8`` rejects of their line, as undecodable UTF-8 is; the other
    lines are kept."""
    if suffix == ".jsonl":
        lines = [json.dumps({"text": t}) for t in ("good one", "BROKEN", "good two")]
        header = ""
    elif suffix == ".csv":
        lines, header = ["good one", "BROKEN", "good two"], "text\n"
    else:
        lines, header = ["good one\n", "BROKEN\n", "good two\n"], ""
    body = _encoded(header + "\n".join(lines) + "\n", "utf-16-le")
    lone_high = b"\x00\xd8"  # U+D800 with no low surrogate after it
    broken = "BROKEN".encode("utf-16-le")
    path = tmp_path / f"docs{suffix}"
    path.write_bytes(body.replace(broken, lone_high + broken) + b"\x41")  # + half a character
    kept, rejects = read(path)
    assert kept["text"].to_pylist() == ["good one", "good two"]
    rows = list(zip(rejects["source_line"].to_pylist(), rejects["reason"].to_pylist(), strict=True))
    broken_at = {".jsonl": 2, ".csv": 2, ".txt": 3}[suffix]  # CSV: record; TXT: paragraph line
    last = {".jsonl": 4, ".csv": 4, ".txt": 7}[suffix]
    assert rows == [(broken_at, INVALID_UTF8), (last, INVALID_UTF8)]
    # The value says what is wrong in the file's encoding (not a UTF-8 byte it does not hold).
    expected = "not valid UTF-16-LE: a lone surrogate, or a character cut off at the end"
    assert all(value.startswith(expected) for value in rejects["value"].to_pylist())
