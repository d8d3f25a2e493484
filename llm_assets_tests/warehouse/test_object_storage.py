"""The warehouse in object storage: the pipeline writes its shards to a bucket of the loopback S3
server, the catalog stays a local file, the SQL views and the reader read the bucket, a run
interrupted mid-way leaves nothing that is read, and a re-run gives the same bytes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
import yaml

from llm_assets import storage
from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS
from llm_assets.compute.resource import ComputeResource
from llm_assets.constants import PIPELINE_ASSETS, TOKENIZED_DOCUMENTS, TRAINING_BATCHES
from llm_assets.reader import IncompleteBatchesError, TokenBatchDataset, current_batches
from llm_assets.warehouse.catalog import Catalog
from llm_assets.warehouse.resource import WarehouseConfigError, WarehouseResource
from llm_assets.warehouse.shards import file_checksum
from llm_assets_tests.assets.test_cli import _env, _job_command
from llm_assets_tests.conftest import REPO, SAMPLE_DIR, pipeline_run_config
from llm_assets_tests.s3 import S3


def _run(input_dir: Path, warehouse: WarehouseResource, backend: str = "in_process"):
    result = dg.materialize(
        PIPELINE_ASSET_DEFS,
        resources={"compute": ComputeResource(backend=backend, workers=2), "warehouse": warehouse},
        run_config=pipeline_run_config(input_dir),
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    return result


def current_checksums(catalog: Catalog) -> dict[str, list[tuple[str, str]]]:
    """Asset -> [(file name, checksum)] of its current output files, in catalog order."""
    return {
        asset: [
            (storage.location_path(s.path).name, s.checksum) for s in catalog.current_shards(asset)
        ]
        for asset in PIPELINE_ASSETS
    }


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory) -> dict[str, list[tuple[str, str]]]:
    """The checksums of the sample's outputs in a local warehouse (the in-process reference)."""
    base = tmp_path_factory.mktemp("local_reference")
    shutil.copytree(SAMPLE_DIR, base / "input")
    warehouse = WarehouseResource(root=str(base / "warehouse"))
    _run(base / "input", warehouse)
    return current_checksums(warehouse.catalog())


@dataclass
class BucketRun:
    """The sample run through ``dagster job execute`` with the warehouse in a bucket."""

    s3: S3
    warehouse: WarehouseResource
    base: Path
    output: str


@pytest.fixture(scope="module")
def bucket_run(s3_module, tmp_path_factory) -> BucketRun:
    """The issue's check: the sample through ``dagster job execute`` with the shipped
    multiprocess config, the warehouse root ``s3://<bucket>/warehouse/`` and a local
    ``catalog_path``, from a working directory of its own (to show nothing is written there)."""
    base = tmp_path_factory.mktemp("bucket_run")
    shutil.copytree(SAMPLE_DIR, base / "input")
    (base / "work").mkdir()
    warehouse = WarehouseResource(
        root=s3_module.url("warehouse/"), catalog_path=str(base / "catalog" / "catalog.duckdb")
    )
    config = pipeline_run_config(base / "input")
    config["resources"] = {
        "warehouse": {"config": {"root": warehouse.root, "catalog_path": warehouse.catalog_path}}
    }
    (base / "run.yaml").write_text(yaml.safe_dump(config))
    command = _job_command([REPO / "configs" / "multiprocess.yaml", base / "run.yaml"])
    env = {**_env(base), "LLM_ASSETS_CACHE_DIR": str(base / "cache")}
    done = subprocess.run(
        command, cwd=base / "work", env=env, capture_output=True, text=True, timeout=600
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    return BucketRun(s3_module, warehouse, base, output)


@pytest.mark.slow
def test_the_pipeline_writes_its_shards_to_the_bucket_and_reads_them_back(
    bucket_run, local_reference, tmp_path, monkeypatch
):
    s3, warehouse, base = bucket_run.s3, bucket_run.warehouse, bucket_run.base
    monkeypatch.setenv("LLM_ASSETS_CACHE_DIR", str(base / "cache"))
    assert "on multiprocess" in bucket_run.output
    catalog = warehouse.catalog()
    # Nothing local but the catalog (and DuckDB's spill folder for the dedup step, empty): no
    # warehouse folder in the working directory or beside the catalog.
    assert os.listdir(base / "work") == []
    assert sorted(os.listdir(base / "catalog")) == [".duckdb_tmp", "catalog.duckdb"]
    assert os.listdir(base / "catalog" / ".duckdb_tmp") == []
    # Byte for byte the local warehouse's outputs (checksums hashed as they were uploaded).
    assert current_checksums(catalog) == local_reference
    folder = current_batches(warehouse.location, catalog_path=warehouse.catalog_file)
    assert str(folder).startswith(f"s3://{s3.bucket}/warehouse/training_batches/")
    keys = s3.keys(str(folder).removeprefix(f"s3://{s3.bucket}/"))
    assert [k.rsplit("/", 1)[1] for k in keys] == [
        "_COMPLETE.json",
        "part-train-00000.parquet",
        "part-validation-00000.parquet",
    ]
    for shard in catalog.current_shards(TRAINING_BATCHES):
        local = tmp_path / "copy.parquet"
        storage.download_file(shard.path, local)
        assert file_checksum(local) == shard.checksum
    # The SQL views read the Parquet in the bucket.
    for asset in PIPELINE_ASSETS:
        (rows,) = catalog.query(f"SELECT count(*) FROM {asset}")[0]
        assert rows == sum(s.rows_out for s in catalog.current_shards(asset)) > 0
    assert catalog.query("SELECT count(*) FROM rejects")[0][0] > 0
    # The reader: the current batches folder, checked and cached locally.
    ds = TokenBatchDataset(str(folder), "train")
    marker = json.loads(storage.read_text(f"{folder}/_COMPLETE.json"))
    assert len(ds) == marker["files"]["part-train-00000.parquet"]["rows"]
    again = TokenBatchDataset.from_warehouse(
        warehouse.location, "train", catalog_path=warehouse.catalog_file
    )
    assert (again[3]["input_ids"] == ds[3]["input_ids"]).all()
    assert list((base / "cache").rglob("*.parquet"))  # validation stayed in the bucket
    assert not list((base / "cache").rglob("part-validation-*"))


@pytest.mark.slow
def test_a_remote_folder_without_its_marker_or_with_a_file_missing_is_refused(bucket_run):
    s3, warehouse = bucket_run.s3, bucket_run.warehouse
    folder = str(current_batches(warehouse.location, catalog_path=warehouse.catalog_file))
    copy = s3.url("copy")
    for name in ("part-train-00000.parquet", "part-validation-00000.parquet"):
        storage.write_bytes(f"{copy}/{name}", storage.read_bytes(f"{folder}/{name}"))
    with pytest.raises(IncompleteBatchesError, match="no completion marker"):
        TokenBatchDataset(copy, "train")
    storage.write_bytes(f"{copy}/_COMPLETE.json", storage.read_bytes(f"{folder}/_COMPLETE.json"))
    assert len(TokenBatchDataset(copy, "validation")) > 0
    storage.remove(f"{copy}/part-train-00000.parquet")
    with pytest.raises(IncompleteBatchesError, match=r"missing: part-train-00000\.parquet"):
        TokenBatchDataset(copy, "train")


@pytest.mark.slow
def test_what_an_interrupted_run_left_is_never_read_and_a_rerun_is_identical(bucket_run):
    """What a run killed mid-way leaves: shards uploaded but not recorded (here: garbage at
    their keys, which a reader would choke on), the batches folder without its marker, a
    scatter folder without its manifest. The next run records nothing it did not write, reads
    none of it, and gives the same bytes."""
    s3, warehouse = bucket_run.s3, bucket_run.warehouse
    catalog = warehouse.catalog()
    before = current_checksums(catalog)
    folder = current_batches(warehouse.location, catalog_path=warehouse.catalog_file)
    batch_files = {
        name: storage.read_bytes(f"{folder}/{name}")
        for name in ("_COMPLETE.json", "part-train-00000.parquet")
    }
    tokenized = catalog.current_shards(TOKENIZED_DOCUMENTS)
    unrecorded = tokenized[:2]
    with catalog.connect() as con:
        for shard in unrecorded:
            con.execute(
                "DELETE FROM shards WHERE asset = ? AND shard = ?",
                [TOKENIZED_DOCUMENTS, shard.shard],
            )
    for shard in unrecorded:
        storage.write_bytes(shard.path, b"half a shard")
    storage.remove(f"{folder}/_COMPLETE.json")
    (scatter,) = [k for k in s3.keys("warehouse/training_batches/_scatter/") if "manifest" in k][:1]
    s3.client.delete_object(Bucket=s3.bucket, Key=scatter)
    with pytest.raises(IncompleteBatchesError):
        TokenBatchDataset(str(folder), "train")

    _run(bucket_run.base / "input", warehouse)
    assert current_checksums(catalog) == before
    for name, data in batch_files.items():
        assert storage.read_bytes(f"{folder}/{name}") == data, name
    recomputed = {
        shard: run
        for shard, run in catalog.query(
            "SELECT shard, run_id FROM shards WHERE asset = ?", [TOKENIZED_DOCUMENTS]
        )
    }
    first_run = recomputed[tokenized[-1].shard]
    assert all(recomputed[s.shard] != first_run for s in unrecorded)


def test_a_url_root_needs_a_local_catalog_path(s3, tmp_path):
    with pytest.raises(WarehouseConfigError, match="catalog_path is required"):
        WarehouseResource(root=s3.url("wh")).catalog()
    with pytest.raises(WarehouseConfigError, match="local file"):
        WarehouseResource(root=s3.url("wh"), catalog_path=s3.url("c.duckdb")).catalog()
    local = WarehouseResource(root=str(tmp_path / "wh"))
    assert local.catalog_file == (tmp_path / "wh" / "catalog.duckdb").resolve()


def test_a_missing_bucket_fails_the_first_step_naming_it(s3, sample_input, tmp_path):
    warehouse = WarehouseResource(
        root="s3://no-such-bucket-of-ours/wh", catalog_path=str(tmp_path / "c.duckdb")
    )
    result = dg.materialize(
        PIPELINE_ASSET_DEFS[:1],
        resources={"compute": ComputeResource(), "warehouse": warehouse},
        run_config={
            "ops": {"raw_documents": pipeline_run_config(sample_input)["ops"]["raw_documents"]}
        },
        instance=dg.DagsterInstance.ephemeral(),
        raise_on_error=False,
    )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = str(failure.event_specific_data.error)
    assert "'no-such-bucket-of-ours'" in message and "no such bucket" in message
