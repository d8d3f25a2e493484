"""Worker side of the one-to-one stages on real Parquet: rejects, timing, batch sizes."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from llm_assets.kernels.filters.length import LengthFilterSpec, filter_length
from llm_assets.kernels.schema import (
    DOC_ID,
    N_TOKENS,
    SOURCE_FILE,
    SOURCE_LINE,
    TEXT,
    StageResult,
)
from llm_assets.stages.map_stage import MapTask, run_map
from llm_assets.stages.shard_io import PARTS


def _length_task(tmp_path: Path, n_tokens: list[int]) -> MapTask:
    rows = len(n_tokens)
    pq.write_table(
        pa.table(
            {
                DOC_ID: [f"d{i}" for i in range(rows)],
                SOURCE_FILE: ["f.jsonl"] * rows,
                SOURCE_LINE: pa.array(range(1, rows + 1), pa.int64()),
                TEXT: [f"text {i}" for i in range(rows)],
                N_TOKENS: pa.array(n_tokens, pa.int32()),
            }
        ),
        tmp_path / "in.parquet",
    )
    return MapTask(
        key="s0",
        input_path=str(tmp_path / "in.parquet"),
        output_path=str(tmp_path / "out" / "part-s0.parquet"),
        rejects_path=str(tmp_path / "out" / "rejects" / "part-s0.parquet"),
        input_fingerprint="in-fp",
        kernel=filter_length,
        spec=LengthFilterSpec(min_tokens=10),
        batch_rows=2,
    )


def test_a_shard_without_rejects_writes_no_rejects_file_and_removes_a_stale_one(tmp_path):
    """Rejects go to their own file only when there are any; a rejects file a killed attempt
    left at the path is removed when the retry rejects nothing (so no stale rejects remain)."""
    task = _length_task(tmp_path, [12, 3, 40, 9, 10])
    stats = run_map(task)
    assert (stats.rows_in, stats.rows_out, stats.rows_rejected) == (5, 3, 2)
    assert stats.rejects_path == task.rejects_path
    rejects = pq.read_table(task.rejects_path)
    assert rejects[DOC_ID].to_pylist() == ["d1", "d3"]
    assert set(rejects["reason"].to_pylist()) == {"too_few_tokens"}

    clean = _length_task(tmp_path, [12, 30, 40])
    stats = run_map(clean)
    assert (stats.rows_in, stats.rows_out, stats.rows_rejected) == (3, 3, 0)
    assert stats.rejects_path is None
    assert not Path(clean.rejects_path).exists()
    assert pq.read_table(clean.output_path).num_rows == 3
    assert not list((tmp_path / "out").rglob("*.tmp-*"))


def _slow_length_filter(table: pa.Table, spec: LengthFilterSpec) -> StageResult:
    time.sleep(0.05)
    return filter_length(table, spec)


def test_a_task_splits_its_time_into_read_compute_write_and_commit(tmp_path):
    """The kernel's time is compute, not read: the batches' reads are timed on their own, inside
    the pulls that also run the kernel. The parts happen in turn, within the task's time."""
    task = replace(_length_task(tmp_path, [12, 3, 40, 9, 10]), kernel=_slow_length_filter)
    stats = run_map(task)  # 3 batches of at most 2 rows
    assert list(stats.parts) == list(PARTS)
    assert stats.parts["compute"] >= 0.15
    assert 0 < stats.parts["read"] < 0.1
    assert stats.parts["write"] > 0 and stats.parts["commit"] > 0
    assert sum(stats.parts.values()) <= stats.seconds


_SEEN_BATCHES: list[int] = []


def _recording_kernel(table: pa.Table, spec: object) -> StageResult:
    """Keeps every row and notes the size of the batch it was given."""
    _SEEN_BATCHES.append(table.num_rows)
    return StageResult(table, table.slice(0, 0))


def _own(tmp_path: Path) -> Path:
    folder = tmp_path / "length"
    folder.mkdir()
    return folder


def test_a_stage_reads_wide_rows_in_batches_bounded_by_bytes(tmp_path, monkeypatch):
    """A shard of large documents is read in batches of at most BATCH_BYTES. Rows of a few KiB still
    come 8,192 at a time."""
    from llm_assets.stages import map_stage

    monkeypatch.setattr(map_stage, "BATCH_BYTES", 64 * 1024)
    rows = 60
    texts = [os.urandom(5_000).hex() for _ in range(rows)]  # 10,000 characters, no dictionary
    table = pa.table({DOC_ID: [f"d{i}" for i in range(rows)], TEXT: texts})
    pq.write_table(table, tmp_path / "in.parquet", row_group_size=25)
    task = replace(_length_task(_own(tmp_path), [1]), kernel=_recording_kernel, batch_rows=8192)
    task = replace(task, input_path=str(tmp_path / "in.parquet"))
    _SEEN_BATCHES.clear()
    stats = run_map(task)
    assert stats.rows_out == rows
    assert sum(_SEEN_BATCHES) == rows and max(_SEEN_BATCHES) <= 64 * 1024 // 10_000
