"""Worker-side tasks on real Parquet: the scatter/gather protocol of ``training_batches``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from llm_assets.lib.batching import BatchSpec, assign_buckets, assign_splits, shuffle_keys
from llm_assets.lib.schema import DOC_ID, INPUT_IDS
from llm_assets.tasks import (
    SCATTER_FILE,
    SCATTER_MANIFEST,
    SPLITS,
    ScatterTask,
    read_scatter_bucket,
    run_scatter,
    scatter_done,
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
        run_scatter(task)
        assert scatter_done(out, f"fp{shard}") and not scatter_done(out, "other input")
        # One data file per shard, whatever the number of buckets (no temporary folder left).
        assert sorted(p.name for p in out.iterdir()) == sorted([SCATTER_FILE, SCATTER_MANIFEST])
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
