"""Reading input files (:func:`~llm_assets.kernels.ingest.read.read_documents`): every format,
stable locations and ids, and the bad input every format shares.

The invariant checked throughout: every record (non-blank JSONL line, CSV record, TXT paragraph,
Parquet row) is either kept or rejected with a reason and its location; nothing raises past the
reject path except an unsupported file type (the run fails early, naming the file).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_assets.kernels.ingest.formats import UnsupportedFileError
from llm_assets.kernels.ingest.read import IngestSpec, read_documents
from llm_assets.kernels.ingest.records import (
    CORRUPT_FILE,
    EMPTY_FILE,
    MISSING_TEXT,
    RAGGED_ROW,
    TRUNCATED_FILE,
)

LINES = [
    b'{"text": "first doc", "title": "a", "rating": 5}',
    b'{"text": "second doc"}',
]


def read(path: Path, spec: IngestSpec | None = None, **kw) -> tuple[pa.Table, pa.Table]:
    results = list(read_documents(str(path), path.name, spec or IngestSpec(), **kw))
    kept = pa.concat_tables([r.kept for r in results])
    rejects = pa.concat_tables([r.rejects for r in results])
    return kept, rejects


def reasons(rejects: pa.Table) -> list[tuple[int, str]]:
    return list(zip(rejects["source_line"].to_pylist(), rejects["reason"].to_pylist(), strict=True))


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


FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
FORMATS = [".csv", ".txt", ".jsonl.gz", ".jsonl.zst", ".parquet"]


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


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_suffixed_key_never_takes_another_columns_name(tmp_path, suffix):
    """Columns ``m,m,m#2``: the second ``m`` gets the next free suffix, not ``m#2``, which the
    third column's name would overwrite, silently losing a value."""
    path = tmp_path / f"c{suffix}"
    if suffix == ".csv":
        path.write_text("text,m,m,m#2\nT,1,2,3\n")
    else:
        columns = [pa.array(["T"]), pa.array(["1"]), pa.array(["2"]), pa.array(["3"])]
        pq.write_table(pa.Table.from_arrays(columns, ["text", "m", "m", "m#2"]), path)
    kept, _ = read(path)
    assert json.loads(kept["metadata"][0].as_py()) == {"m": "1", "m#3": "2", "m#2": "3"}


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".txt", ".parquet"])
def test_batches_are_bounded_by_input_bytes_as_well_as_rows(tmp_path, suffix):
    """Batches of 8,192 records however large made 2,200 one-MB documents peak at 5.6 GB in a
    worker: a batch is also flushed once it holds ``batch_bytes`` of input, so memory follows
    the bytes, not rows x document size; the rows and their order are the same."""
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


def test_a_missing_text_field_names_the_fields_the_record_has(tmp_path):
    """A ``text_field`` that matches no field is rejected with the fields each record (CSV and
    Parquet: file) does have, so the reject says what to set, naming the field looked for and
    the fields there are."""
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
