"""Driver side of ``training_batches``: how many shuffle buckets."""

from __future__ import annotations

import os

import pyarrow as pa

from llm_assets.stages.training_batches import driver
from llm_assets.stages.training_batches.driver import shuffle_bucket_count
from llm_assets.warehouse.shards import AtomicParquetWriter


def _filtered_shard(path, rows: int, text_chars: int, codec: str) -> str:
    ids = pa.array([list(range(100))] * rows, pa.list_(pa.uint16()))
    doc_ids = [f"{i:016x}" for i in range(rows)]
    table = pa.table({"doc_id": doc_ids, "text": ["x" * text_chars] * rows, "input_ids": ids})
    writer = AtomicParquetWriter(path, table.schema, compression=codec)
    writer.write(table)
    return writer.commit().path


def test_shuffle_buckets_follow_the_token_ids_not_the_file_size(tmp_path, monkeypatch):
    monkeypatch.setattr(driver, "SHUFFLE_BUCKET_BYTES", 1_000_000)
    # 2 x 5,000 rows x 100 ids = 4 MB of INT32 values + 0.16 MB of ids: 5 buckets of 1 MB.
    small = [_filtered_shard(tmp_path / f"a{i}.parquet", 5_000, 10, "lz4") for i in range(2)]
    assert shuffle_bucket_count(small) == 5
    # The same rows with a 1,000-character text (which the shuffle never reads), uncompressed:
    # files 10x the size, the same buckets.
    wide = [_filtered_shard(tmp_path / f"b{i}.parquet", 5_000, 1_000, "none") for i in range(2)]
    assert sum(map(os.path.getsize, wide)) > 5 * sum(map(os.path.getsize, small))
    assert shuffle_bucket_count(wide) == 5
    assert shuffle_bucket_count(wide, minimum=8) == 8
    assert shuffle_bucket_count(wide[:1]) == 3
    # Padded to 4,096 tokens, 10,000 rows are 41 M padded tokens: buckets of at most 4 Mi.
    assert shuffle_bucket_count(wide, padded_len=4096) == 10
    assert shuffle_bucket_count(wide, padded_len=16) == 5  # the token bytes dominate
    # augment reads the text too (10 MB more: 14.2 MB, 15 buckets), and holds each document
    # augment_copies + 1 times (found by review: an augment gather held twice the bound).
    assert shuffle_bucket_count(wide, text=True) == 15
    assert shuffle_bucket_count(wide, text=True, repeat=3) == 43  # 3 x 14.2 MB
    assert shuffle_bucket_count(wide, padded_len=4096, repeat=2) == 20
