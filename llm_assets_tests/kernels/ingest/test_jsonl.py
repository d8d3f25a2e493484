"""The JSON Lines reader: kept records, each bad line's reject, byte ranges."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_assets.kernels.ingest.read import IngestSpec, read_documents
from llm_assets.kernels.ingest.records import (
    CORRUPT_FILE,
    EMPTY_FILE,
    INVALID_JSON,
    INVALID_UTF8,
    MISSING_TEXT,
    NON_STRING_TEXT,
    NOT_AN_OBJECT,
)
from llm_assets.kernels.schema import make_doc_id
from llm_assets.stages.raw_documents import line_ranges
from llm_assets_tests.kernels.ingest.test_read import LINES, read, reasons


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
    """orjson reads 300 nested lists but cannot write them back as metadata: the record is a
    reject, and the encoder's error does not crash the shard (and every retry of it)."""
    path = tmp_path / "deep.jsonl"
    path.write_text('{"text": "deep", "m": ' + "[" * 300 + "]" * 300 + '}\n{"text": "next"}\n')
    kept, rejects = read(path)
    assert kept["text"].to_pylist() == ["next"]
    assert reasons(rejects) == [(1, "malformed_record")]
    assert "cannot be stored as metadata" in rejects["value"][0].as_py()


def test_a_blank_jsonl_file_read_in_ranges_is_one_empty_file_reject(tmp_path):
    """Only blank lines, split into several byte ranges: the first range reports the file as
    ``empty_file`` (so the file appears in the rejects); a file whose records all lie after a
    blank first range gives no such reject."""
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


@pytest.mark.parametrize("suffix", [".json", ".json.gz", ".json.zst"])
def test_json_files_are_json_lines_and_an_array_is_one_reject_saying_so(tmp_path, suffix):
    """``.json`` files are read as JSON Lines (what ``Dataset.to_json`` writes by default). A
    file holding one JSON array is one ``corrupt_file`` reject saying how to convert it; a
    damaged one gives the same rejects as the same bytes named ``.jsonl``."""
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
