"""Atomic shard files: complete or absent, with their input fingerprint in the footer."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash

from llm_assets.warehouse.shards import (
    INPUT_FINGERPRINT,
    TMP_MARKER,
    AtomicParquetWriter,
    atomic_parquet_writer,
    completed_input_fingerprint,
    decoded_column_bytes,
    file_checksum,
    fingerprint,
    is_temporary,
    read_footer_metadata,
    remove_stale_temporaries,
    temporary_path,
)

SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.string())])


def test_fingerprint_is_stable_and_order_insensitive_for_dicts():
    assert fingerprint({"x": 1, "y": [1, 2]}) == fingerprint({"y": [1, 2], "x": 1})
    assert fingerprint({"x": 1}) != fingerprint({"x": 2})
    assert len(fingerprint("a")) == 16


def test_file_checksum_names_its_algorithm_and_sees_every_byte(tmp_path):
    """XXH3-128 over the whole file, read in 1 MB blocks: a file of several blocks hashes as its
    bytes in one piece would, and changing one byte anywhere changes the checksum."""
    data = bytearray(os.urandom(3 * (1 << 20) + 17))
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    checksum = file_checksum(path)
    assert checksum == f"xxh3_128:{xxhash.xxh3_128(bytes(data)).hexdigest()}"
    assert len(checksum) == len("xxh3_128:") + 32
    data[(1 << 20) + 5] ^= 1  # in the second block
    path.write_bytes(data)
    assert file_checksum(path) != checksum


def test_commit_renames_into_place_with_footer_and_checksum(tmp_path):
    path = tmp_path / "s" / "part-a.parquet"
    writer = AtomicParquetWriter(path, SCHEMA, metadata={"llm_assets.kind": "test"})
    writer.write(pa.table({"b": ["x", "y"], "a": [1, 2]}))  # columns in another order
    assert not path.exists()
    written = writer.commit({INPUT_FINGERPRINT: "abc"})
    assert path.exists() and written.rows == 2
    assert written.checksum == file_checksum(path)
    assert pq.read_table(path).column_names == ["a", "b"]
    meta = read_footer_metadata(path)
    assert meta == {"llm_assets.kind": "test", INPUT_FINGERPRINT: "abc"}
    assert completed_input_fingerprint(path) == "abc"
    assert not [p for p in path.parent.iterdir() if TMP_MARKER in p.name]


def test_a_tables_own_bookkeeping_keys_are_not_stored_as_this_files(tmp_path):
    """A table read from the stage before brings that shard's keys in its schema (input fingerprint,
    row counts); they are not written into this file's Arrow schema. Other schema metadata is
    kept."""
    upstream = SCHEMA.with_metadata(
        {INPUT_FINGERPRINT: "the input's", "llm_assets.rows_rejected": "0", "other": "kept"}
    )
    path = tmp_path / "part-a.parquet"
    writer = AtomicParquetWriter(path, upstream, metadata={"llm_assets.kind": "test"})
    writer.write(pa.table({"a": [1], "b": ["x"]}))
    writer.commit({INPUT_FINGERPRINT: "this file's", "llm_assets.rows_rejected": "3"})
    schema_meta = {k.decode(): v.decode() for k, v in pq.read_schema(path).metadata.items()}
    assert schema_meta.get(INPUT_FINGERPRINT) in (None, "this file's")
    assert schema_meta.get("llm_assets.rows_rejected") in (None, "3")
    assert schema_meta["other"] == "kept" and schema_meta["llm_assets.kind"] == "test"
    assert read_footer_metadata(path)[INPUT_FINGERPRINT] == "this file's"


def test_same_rows_give_byte_identical_files(tmp_path):
    table = pa.table({"a": list(range(1000)), "b": [str(i) for i in range(1000)]})
    sums = []
    for name in ("one", "two"):
        writer = AtomicParquetWriter(tmp_path / f"{name}.parquet", SCHEMA)
        writer.write(table)
        sums.append(writer.commit({INPUT_FINGERPRINT: "f"}).checksum)
    assert sums[0] == sums[1]


def test_error_inside_block_leaves_nothing(tmp_path):
    path = tmp_path / "part-x.parquet"
    with pytest.raises(RuntimeError), atomic_parquet_writer(path, SCHEMA) as writer:
        writer.write(pa.table({"a": [1], "b": ["x"]}))
        raise RuntimeError("worker died")
    assert list(tmp_path.iterdir()) == []
    assert completed_input_fingerprint(path) is None


def test_leftover_temporaries_of_a_killed_run_are_removed(tmp_path):
    """Files and (scatter) folders named by temporary_path go; a finished shard whose name holds
    ``.tmp-`` (from an input file such as ``export.tmp-2024.jsonl``) stays."""
    (tmp_path / "rejects").mkdir()
    temporary_path(tmp_path / "part-a.parquet").write_bytes(b"half")
    temporary_path(tmp_path / "rejects" / "part-a.parquet").write_bytes(b"half")
    scatter = temporary_path(tmp_path / "shard-0123456789abcdef")
    scatter.mkdir()
    (scatter / "scatter.arrow").write_bytes(b"half")
    keep = ["part-b.parquet", f"part-export{TMP_MARKER}2024.jsonl-6659f5-00000.parquet"]
    for name in keep:
        (tmp_path / name).write_bytes(b"keep")
        (tmp_path / "rejects" / name).write_bytes(b"keep")
    assert remove_stale_temporaries(tmp_path) == 3
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == sorted(keep)
    assert sorted(p.name for p in (tmp_path / "rejects").iterdir()) == sorted(keep)
    assert not scatter.exists()
    assert is_temporary(temporary_path(Path("x.parquet")).name)
    assert not is_temporary("export.tmp-2024.jsonl")


def test_unreadable_file_is_not_complete(tmp_path):
    path = tmp_path / "part-bad.parquet"
    path.write_bytes(b"not parquet")
    assert completed_input_fingerprint(path) is None


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_decoded_column_bytes_count_only_the_named_columns_whatever_the_codec(tmp_path, codec):
    ids = pa.array([[i % 7] * 40 for i in range(2_000)], pa.list_(pa.uint16()))
    table = pa.table({"ids": ids, "text": ["the same words again " * 20] * 2_000})

    def write(name: str, compression: str) -> str:
        writer = AtomicParquetWriter(
            tmp_path / name, table.schema, compression=compression, row_group_rows=500
        )
        writer.write(table)  # 4 row groups
        return writer.commit().path

    path = write(f"{codec}.parquet", codec)
    ids_bytes = decoded_column_bytes(path, ["ids"])
    # 80,000 values stored as Parquet INT32, plus the list levels: at least 320,000 bytes.
    assert 320_000 <= ids_bytes < 420_000
    # The same as uncompressed, to within the page headers' few bytes.
    plain = decoded_column_bytes(write("plain.parquet", "none"), ["ids"])
    assert ids_bytes == pytest.approx(plain, rel=0.001)
    both = decoded_column_bytes(path, ["ids", "text"])
    assert both - ids_bytes > 2_000 * 400  # the text column, decoded
    assert decoded_column_bytes(path, ["missing"]) == 0
