"""Locations: local paths and URLs; object-storage errors name the bucket and key."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_assets.storage import (
    UPLOAD_BLOCK_BYTES,
    ObjectWriter,
    StorageError,
    exists,
    file_sizes,
    filesystem,
    is_remote,
    parquet_file,
    parquet_metadata,
    parquet_schema,
    query_filesystem,
    read_bytes,
    read_parquet,
    remove,
    storage_error,
    write_bytes,
)
from llm_assets.warehouse.shards import CHECKSUM_ALGORITHM, file_checksum


def test_local_paths_and_file_urls_are_local_and_s3_is_remote():
    assert not is_remote("/data/in")
    assert not is_remote("relative/in")
    assert not is_remote("file:///data/in")
    assert is_remote("s3://bucket/prefix")
    assert is_remote("gs://bucket/prefix")


def test_an_unknown_scheme_is_a_storage_error_naming_it():
    with pytest.raises(StorageError, match="nosuchfs"):
        filesystem("nosuchfs://bucket/x")


def test_a_missing_bucket_is_named_with_its_key(s3):
    fs, path = filesystem("s3://no-such-bucket-here/corpus/a.jsonl")
    with pytest.raises(FileNotFoundError) as caught:
        fs.open(path).read()
    message = str(storage_error(caught.value, "s3://no-such-bucket-here/corpus/a.jsonl"))
    assert "'no-such-bucket-here'" in message
    assert "'corpus/a.jsonl'" in message
    assert "no such bucket" in message


def test_an_unreachable_endpoint_says_so(monkeypatch, s3):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    import fsspec

    fs = fsspec.filesystem(
        "s3", skip_instance_cache=True, config_kwargs={"retries": {"max_attempts": 1}}
    )
    with pytest.raises(Exception) as caught:
        fs.ls(s3.bucket)
    message = str(storage_error(caught.value, f"s3://{s3.bucket}/x"))
    assert "unreachable" in message and "AWS_ENDPOINT_URL" in message


def test_an_object_appears_whole_at_commit_and_never_when_discarded(s3, tmp_path):
    data = os.urandom(UPLOAD_BLOCK_BYTES + 123)  # two parts: a multipart upload
    writer = ObjectWriter(s3.url("big.bin"))
    writer.write(data[:1000])
    writer.write(data[1000:])
    assert not exists(s3.url("big.bin"))  # uploading: nothing visible yet
    writer.commit()
    assert read_bytes(s3.url("big.bin")) == data
    (tmp_path / "copy.bin").write_bytes(data)
    assert (writer.size, f"{CHECKSUM_ALGORITHM}:{writer.hexdigest}") == (
        len(data),
        file_checksum(tmp_path / "copy.bin"),
    )
    abandoned = ObjectWriter(s3.url("gone.bin"))
    abandoned.write(data)
    abandoned.discard()
    assert s3.keys() == ["big.bin"]


def test_sizes_of_many_files_come_from_one_listing_per_folder(s3, tmp_path):
    for name in ("a/x.bin", "a/y.bin", "b/z.bin"):
        write_bytes(s3.url(name), name.encode())
    (tmp_path / "l.bin").write_bytes(b"12345")
    wanted = [s3.url("a/x.bin"), s3.url("a/y.bin"), s3.url("a/nope"), s3.url("b/z.bin")]
    wanted += [s3.url("c/none"), str(tmp_path / "l.bin"), str(tmp_path / "missing")]
    assert file_sizes(wanted) == dict(zip(wanted, [7, 7, None, 7, None, 5, None], strict=True))


def test_a_parquet_footer_is_read_from_the_end_of_an_object(s3, tmp_path):
    table = pa.table({"x": list(range(50_000)), "s": [str(i) for i in range(50_000)]})
    pq.write_table(
        table.replace_schema_metadata({"k": "v"}), tmp_path / "t.parquet", row_group_size=1000
    )
    url = s3.url("t.parquet")
    write_bytes(url, (tmp_path / "t.parquet").read_bytes())
    local = pq.read_metadata(tmp_path / "t.parquet")
    remote = parquet_metadata(url)
    assert (remote.num_rows, remote.num_row_groups, remote.metadata) == (
        local.num_rows,
        local.num_row_groups,
        local.metadata,
    )
    assert parquet_schema(url).equals(pq.read_schema(tmp_path / "t.parquet"), check_metadata=True)
    assert parquet_file(url).read().equals(pq.read_table(tmp_path / "t.parquet"))
    assert read_parquet(url, columns=["x"]).column("x").to_pylist() == list(range(50_000))


def test_a_local_write_is_complete_or_absent(tmp_path):
    write_bytes(tmp_path / "sub" / "f.json", b"{}")
    assert (tmp_path / "sub" / "f.json").read_bytes() == b"{}"
    assert os.listdir(tmp_path / "sub") == ["f.json"]  # no temporary left beside it
    remove(tmp_path / "sub" / "f.json")
    remove(tmp_path / "sub" / "f.json")  # gone already: nothing to do
    assert not exists(tmp_path / "sub" / "f.json")


def test_a_query_filesystem_looks_each_object_up_once(s3):
    write_bytes(s3.url("o.bin"), b"abc")
    fs = query_filesystem(s3.url())
    assert fs.info(s3.url("o.bin"))["size"] == 3
    s3.client.delete_object(Bucket=s3.bucket, Key="o.bin")
    assert fs.info(s3.url("o.bin"))["size"] == 3  # remembered for the connection's life
    assert query_filesystem(s3.url()).exists(s3.url("o.bin")) is False  # a new one asks
