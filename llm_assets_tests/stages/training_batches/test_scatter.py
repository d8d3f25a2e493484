"""Worker side of the shuffle on real Parquet: the scatter of ``training_batches``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llm_assets.kernels.batching.shuffle import assign_buckets, assign_splits, shuffle_keys
from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.schema import (
    DOC_ID,
    INPUT_IDS,
    TEXT,
)
from llm_assets.stages.shard_io import PARTS
from llm_assets.stages.training_batches.scatter import (
    SCATTER_FILE,
    SCATTER_MANIFEST,
    SPLITS,
    ScatterTask,
    read_scatter_bucket,
    read_scatter_manifest,
    read_scatter_pieces,
    run_scatter,
    scatter_done,
    scatter_pieces,
)

SPEC = BatchSpec(seed=3, validation_fraction=0.2)


N_BUCKETS = 5


def _shard(path: Path, first: int, n: int) -> dict[str, list[int]]:
    docs = {f"doc-{i:05d}": list(range(i % 7 + 1)) for i in range(first, first + n)}
    table = pa.table(
        {
            DOC_ID: pa.array(list(docs)),
            INPUT_IDS: pa.array(list(docs.values()), pa.list_(pa.uint16())),
        }
    )
    pq.write_table(table, path)
    return docs


def test_scatter_writes_one_file_per_shard_and_every_bucket_reads_back_whole(tmp_path):
    docs: dict[str, list[int]] = {}
    dirs = []
    for shard, (first, n) in enumerate([(0, 300), (300, 250), (550, 1)]):
        source = tmp_path / f"in-{shard}.parquet"
        docs |= _shard(source, first, n)
        out = tmp_path / "scatter" / f"s{shard}"
        task = ScatterTask(f"s{shard}", str(source), str(out), f"fp{shard}", SPEC, N_BUCKETS)
        assert not scatter_done(out, f"fp{shard}")
        parts = run_scatter(task)["parts"]
        assert list(parts) == list(PARTS) and all(v > 0 for v in parts.values())
        assert scatter_done(out, f"fp{shard}") and not scatter_done(out, "other input")
        # One data file per shard, whatever the number of buckets (no temporary folder left).
        assert sorted(p.name for p in out.iterdir()) == sorted([SCATTER_FILE, SCATTER_MANIFEST])
        # The manifest counts documents per token count (the asset's length histogram).
        shard_lengths = Counter(len(v) for k, v in docs.items() if first <= int(k[4:]) < first + n)
        assert read_scatter_manifest(out)["lengths"] == {
            str(k): v for k, v in sorted(shard_lengths.items())
        }
        dirs.append(str(out))
    assert len(list((tmp_path / "scatter").iterdir())) == 3

    ids = list(docs)
    keys = shuffle_keys(ids, SPEC.seed)
    validation = assign_splits(ids, SPEC.seed, SPEC.validation_fraction)
    buckets = assign_buckets(keys, N_BUCKETS)
    seen = 0
    for split_index, split in enumerate(SPLITS):
        for bucket in range(N_BUCKETS):
            want = {
                d: (docs[d], int(k))
                for d, k, v, b in zip(ids, keys, validation, buckets, strict=True)
                if v == bool(split_index) and b == bucket
            }
            table = read_scatter_bucket(dirs, split, bucket)
            if not want:
                assert table is None
                continue
            got = {
                d: (i, k)
                for d, i, k in zip(
                    table[DOC_ID].to_pylist(),
                    table[INPUT_IDS].to_pylist(),
                    table["shuffle_key"].to_pylist(),
                    strict=True,
                )
            }
            assert got == want and table.num_rows == len(want)
            seen += table.num_rows
    assert seen == len(docs)
    assert np.any(validation) and not np.all(validation)


def test_scatter_pieces_are_the_ipc_files_batches_and_a_short_file_is_an_error(tmp_path):
    """Each (split, bucket) is read from two known byte ranges; the file stays a plain Arrow IPC
    file any reader opens. A file cut short fails naming it; a shard without rows has no
    pieces."""
    _shard(tmp_path / "in.parquet", 0, 400)
    out = tmp_path / "scatter" / "s0"
    run_scatter(ScatterTask("s0", str(tmp_path / "in.parquet"), str(out), "fp", SPEC, N_BUCKETS))
    pieces = scatter_pieces([str(out)])
    whole = pa.ipc.open_file(str(out / SCATTER_FILE))
    assert whole.num_record_batches == len(pieces) > N_BUCKETS  # both splits
    for index, key in enumerate(read_scatter_manifest(out)["pieces"]):  # in write order
        expected = pa.Table.from_batches([whole.get_batch(index)])
        assert len(pieces[key]) == 1  # one chunk: a shard of ordinary size
        assert read_scatter_pieces(pieces[key]).equals(expected)

    size = (out / SCATTER_FILE).stat().st_size
    with open(out / SCATTER_FILE, "r+b") as handle:
        handle.truncate(size // 2)
    last = max(pieces.values(), key=lambda p: p[0][3])
    with pytest.raises(ValueError, match="shorter than its manifest says"):
        read_scatter_pieces(last)

    _shard(tmp_path / "empty.parquet", 0, 0)
    empty = tmp_path / "scatter" / "s1"
    run_scatter(ScatterTask("s1", str(tmp_path / "empty.parquet"), str(empty), "fp", SPEC, 3))
    assert read_scatter_manifest(empty)["pieces"] == {}
    assert scatter_pieces([str(empty)]) == {}
    assert read_scatter_bucket([str(empty)], "train", 0) is None


def test_a_large_shard_is_scattered_chunk_by_chunk_with_the_same_buckets(tmp_path, monkeypatch):
    """A shard over ``SCATTER_CHUNK_BYTES`` is scattered a few row groups at a time. Every (split,
    bucket) then has a batch per chunk, and holds the same documents, with the same manifest counts
    and length histogram, as a scatter of the whole shard."""
    from llm_assets.stages.training_batches import scatter

    docs = {f"doc-{i:05d}": list(range(i % 9 + 1)) for i in range(900)}
    table = pa.table(
        {
            DOC_ID: pa.array(list(docs)),
            INPUT_IDS: pa.array(list(docs.values()), pa.list_(pa.uint16())),
            TEXT: pa.array(["x" * 50] * len(docs)),
        }
    )
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=100)
    whole, chunked = tmp_path / "whole", tmp_path / "chunked"
    run_scatter(ScatterTask("s", str(tmp_path / "in.parquet"), str(whole), "fp", SPEC, N_BUCKETS))
    monkeypatch.setattr(scatter, "SCATTER_CHUNK_BYTES", 1)  # one row group per chunk
    stats = run_scatter(
        ScatterTask("s", str(tmp_path / "in.parquet"), str(chunked), "fp", SPEC, N_BUCKETS)
    )
    assert stats["rows"] == 900 and scatter_done(chunked, "fp")
    one, many = read_scatter_manifest(whole), read_scatter_manifest(chunked)
    assert one["counts"] == many["counts"] and one["lengths"] == many["lengths"]
    assert all(len(ranges) == 1 for ranges in one["pieces"].values())
    assert max(len(ranges) for ranges in many["pieces"].values()) == 9  # 9 row groups
    for split in SPLITS:
        for bucket in range(N_BUCKETS):
            a = read_scatter_bucket([str(whole)], split, bucket)
            b = read_scatter_bucket([str(chunked)], split, bucket)
            assert (a is None) == (b is None)
            if a is not None:
                assert a.sort_by(DOC_ID).equals(b.sort_by(DOC_ID))
