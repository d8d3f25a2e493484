"""A batches folder is read only when complete: ``training_batches`` writes its completion marker
last (after every file is written and recorded) and removes it before writing into the folder,
the reader refuses a folder without it, and a complete folder of before the markers is marked by
the next run without recomputing it. Materialized for real on the shipped sample."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import pyarrow.parquet as pq
import pytest

from llm_assets.constants import TRAINING_BATCHES
from llm_assets.reader import (
    COMPLETE_MARKER,
    IncompleteBatchesError,
    IterableTokenBatches,
    TokenBatchDataset,
    batch_files,
    megatron_prefixes,
)
from llm_assets.stages.training_batches import driver as batches_driver
from llm_assets.stages.training_batches.gather import run_gather
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.assets.test_pipeline import materializations, materialize


@pytest.fixture
def two_buckets(monkeypatch):
    """The sample is under one 8 MB shuffle bucket: 2 buckets per split, so 4 batch files, as
    in the reported case (a run killed in the gather after 3 of them)."""
    monkeypatch.setattr(batches_driver, "SHUFFLE_BUCKET_BYTES", 400_000)


def _rows(root: Path) -> dict[str, int]:
    current = WarehouseResource(root=str(root)).catalog().current_shards(TRAINING_BATCHES)
    return {
        split: sum(s.rows_out for s in current if f"/part-{split}-" in s.path)
        for split in ("train", "validation")
    }


def _folder_bytes(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_a_folder_a_gather_stopped_in_is_refused_until_a_run_completes_it(
    sample_input, tmp_path, two_buckets, monkeypatch
):
    """A run killed in the gather leaves 3 of the folder's 4 batch files (53 validation rows of
    105) and no marker: the folder has none until the run that completes it, so the reader refuses
    it, and the next run writes the missing file and the marker, byte for byte the first run's."""
    root = tmp_path / "wh"
    batches = {"megatron": True}
    first = materialize(sample_input, root, training_batches=batches)
    assert first.success
    meta = materializations(first)[TRAINING_BATCHES]
    folder = Path(meta["folder"].value)
    complete = _folder_bytes(folder)
    rows = _rows(root)
    # The marker lists exactly the catalog's files, with their rows and checksums, and the export.
    marker = json.loads((folder / COMPLETE_MARKER).read_text())
    current = WarehouseResource(root=str(root)).catalog().current_shards(TRAINING_BATCHES)
    assert marker["files"] == {
        Path(s.path).name: {
            "rows": s.rows_out,
            "bytes": Path(s.path).stat().st_size,
            "checksum": s.checksum,
        }
        for s in current
    }
    assert len(marker["files"]) == 4
    assert marker["source_fingerprint"] == meta["source_fingerprint"].value
    assert marker["fingerprint"] == folder.name
    assert megatron_prefixes(folder) == meta["megatron"].value
    assert {s: len(TokenBatchDataset(folder, s)) for s in rows} == rows

    # A run that writes into a complete folder (one file lost) removes the marker first: this
    # one fails in the gather, and leaves the folder unmarked, not marked over a missing file.
    lost = folder / "part-validation-00001.parquet"
    lost.unlink()
    with pytest.raises(IncompleteBatchesError, match=r"missing: part-validation-00001\.parquet"):
        TokenBatchDataset(folder, "train")

    def stopped(task):
        raise RuntimeError("stopped in the gather")

    gather = run_gather
    monkeypatch.setattr(batches_driver, "run_gather", stopped)
    failed = materialize(sample_input, root, training_batches=batches)
    assert not failed.success
    monkeypatch.setattr(batches_driver, "run_gather", gather)
    # What a killed gather leaves: 3 of the 4 files, no marker.
    assert len(list(folder.glob("part-*.parquet"))) == 3
    assert not (folder / COMPLETE_MARKER).exists()
    incomplete = rf"{folder} is incomplete: it has no completion marker.*training_batches again"
    for read in (
        lambda: TokenBatchDataset(folder, "validation"),
        lambda: TokenBatchDataset(folder, "train"),
        lambda: IterableTokenBatches(folder, "train"),
        lambda: batch_files(folder, "validation"),
        lambda: megatron_prefixes(folder),
    ):
        with pytest.raises(IncompleteBatchesError, match=incomplete):
            read()
    # The files themselves, passed explicitly, are read as given (no check).
    assert (
        len(TokenBatchDataset(sorted(folder.glob("part-validation-*")), "validation"))
        < rows["validation"]
    )

    again = materialize(sample_input, root, training_batches=batches)
    assert again.success
    assert materializations(again)[TRAINING_BATCHES]["shards_computed"].value == 1
    assert _folder_bytes(folder) == complete  # the marker included
    assert {s: len(TokenBatchDataset(folder, s)) for s in rows} == rows


def test_a_complete_folder_without_marker_is_marked_by_the_next_run_without_recomputing(
    sample_input, tmp_path, two_buckets
):
    """A folder an earlier release wrote (complete, but no marker): refused by the reader, and
    the next run, which finds it complete in the catalog, only writes its marker: no shuffle, no
    gather, every batch file untouched."""
    root = tmp_path / "wh"
    first = materialize(sample_input, root)
    assert first.success
    folder = Path(materializations(first)[TRAINING_BATCHES]["folder"].value)
    complete = _folder_bytes(folder)
    stats = {p: p.stat().st_mtime_ns for p in folder.glob("part-*.parquet")}
    (folder / COMPLETE_MARKER).unlink()
    shutil.rmtree(root / TRAINING_BATCHES / "_scatter")  # a reuse does not need it
    with pytest.raises(IncompleteBatchesError, match="no completion marker"):
        TokenBatchDataset(folder, "train")
    instance = dg.DagsterInstance.ephemeral()
    again = materialize(sample_input, root, instance=instance)
    assert again.success
    meta = materializations(again)[TRAINING_BATCHES]
    assert meta["shards_computed"].value == 0 and meta["scatter_seconds"].value == 0
    assert not (root / TRAINING_BATCHES / "_scatter").exists()
    assert {p: p.stat().st_mtime_ns for p in folder.glob("part-*.parquet")} == stats
    assert _folder_bytes(folder) == complete  # the marker written again, the same bytes
    logs = [e.user_message for e in instance.all_logs(again.run_id)]
    assert any(f"{folder} marked complete ({COMPLETE_MARKER})" in m for m in logs)
    rows = _rows(root)
    assert {s: len(TokenBatchDataset(folder, s)) for s in rows} == rows
    assert sum(pq.read_metadata(p).num_rows for p in batch_files(folder)) == sum(rows.values())
    # A reuse of a marked folder leaves the marker as it is (no write at all).
    mtime = (folder / COMPLETE_MARKER).stat().st_mtime_ns
    assert materialize(sample_input, root).success
    assert (folder / COMPLETE_MARKER).stat().st_mtime_ns == mtime
