"""The reader's one step from a warehouse to its current batches, on a warehouse the pipeline
materialized: the folder the catalog names, read-only, with a clear error when there are no
batches yet or a run holds the catalog."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS
from llm_assets.compute.resource import ComputeResource
from llm_assets.constants import CATALOG_FILE, TRAINING_BATCHES
from llm_assets.reader import (
    IterableTokenBatches,
    NoBatchesError,
    TokenBatchDataset,
    current_batches,
)
from llm_assets.warehouse.catalog import CatalogLockedError
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.conftest import SAMPLE_DIR, pipeline_run_config


def _materialize(input_dir: Path, root: Path, assets=PIPELINE_ASSET_DEFS) -> dg.MaterializeResult:
    config = pipeline_run_config(input_dir)
    config["ops"] = {
        name: op for name, op in config["ops"].items() if name in {a.op.name for a in assets}
    }
    result = dg.materialize(
        assets,
        resources={"compute": ComputeResource(), "warehouse": WarehouseResource(root=str(root))},
        run_config=config,
    )
    assert result.success
    return result


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> tuple[Path, Path]:
    """(a warehouse the whole pipeline materialized from the sample, its batches folder)."""
    base = tmp_path_factory.mktemp("reader_warehouse")
    shutil.copytree(SAMPLE_DIR, base / "input")
    result = _materialize(base / "input", base / "wh")
    (event,) = result.asset_materializations_for_node(TRAINING_BATCHES)
    return base / "wh", Path(event.metadata["folder"].value)


def test_current_batches_is_the_folder_the_run_wrote(warehouse):
    root, folder = warehouse
    assert current_batches(root) == folder.resolve()
    assert current_batches(str(root)).is_absolute()


def test_a_relative_warehouse_resolves_against_the_working_directory(warehouse, monkeypatch):
    root, folder = warehouse
    monkeypatch.chdir(root.parent)
    assert current_batches(root.name) == folder.resolve()


def test_from_warehouse_reads_the_current_batches(warehouse):
    root, folder = warehouse
    for split in ("train", "validation"):
        expected = TokenBatchDataset(folder, split=split)
        ds = TokenBatchDataset.from_warehouse(root, split=split, columns=["input_ids"])
        assert len(ds) == len(expected) > 0
        assert (ds[0]["input_ids"] == expected[0]["input_ids"]).all()
        assert list(ds[0]) == ["input_ids"]
    assert len(IterableTokenBatches.from_warehouse(root)) == len(TokenBatchDataset(folder))


def test_no_catalog_names_the_path_and_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(NoBatchesError) as info:
        current_batches("nowhere")
    message = str(info.value)
    assert str(tmp_path / "nowhere" / CATALOG_FILE) in message and str(tmp_path) in message
    assert not (tmp_path / "nowhere").exists()  # nothing created by looking


def test_a_warehouse_without_batches_says_to_materialize_them(tmp_path):
    shutil.copytree(SAMPLE_DIR, tmp_path / "input")
    _materialize(tmp_path / "input", tmp_path / "wh", PIPELINE_ASSET_DEFS[:1])
    with pytest.raises(NoBatchesError, match=f"no current {TRAINING_BATCHES}: materialize it"):
        TokenBatchDataset.from_warehouse(tmp_path / "wh")


def test_a_catalog_held_by_a_run_is_a_clear_error_not_a_hang(warehouse):
    root, _ = warehouse
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; con = duckdb.connect(sys.argv[1]); print('held', "
            "flush=True); time.sleep(60)",
            str(root / CATALOG_FILE),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        start = time.monotonic()
        with pytest.raises(CatalogLockedError, match="A pipeline run holds it while it writes"):
            current_batches(root, lock_timeout_s=0.5)
        assert time.monotonic() - start < 10
    finally:
        holder.kill()
        holder.wait()
