"""Hugging Face datasets where they already are: a ``save_to_disk`` folder, the same folder in a
bucket, and a dataset in the local cache are inputs like any other, built here with
``datasets`` (offline: nothing is downloaded)."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import datasets
import pytest

from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS
from llm_assets.compute.resource import ComputeResource
from llm_assets.constants import RAW_DOCUMENTS
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.assets.test_object_storage_input import ingest_config

ROWS = 2500
TRAIN = "train/data-00000-of-00001.arrow"
TEST = "test/data-00000-of-00001.arrow"


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _ingest(input_dir: str, root: Path, **settings):
    """``raw_documents`` alone on ``input_dir``: its materialization metadata and current rows."""
    result = dg.materialize(
        PIPELINE_ASSET_DEFS,
        resources={"compute": ComputeResource(), "warehouse": WarehouseResource(root=str(root))},
        run_config=ingest_config(input_dir, **settings),
        selection=[RAW_DOCUMENTS],
    )
    metadata = result.asset_materializations_for_node(RAW_DOCUMENTS)[0].metadata
    rows = (
        WarehouseResource(root=str(root))
        .catalog()
        .query(
            f"SELECT source_file, source_line, text, metadata FROM {RAW_DOCUMENTS} "
            "ORDER BY source_file, source_line"
        )
    )
    return metadata, rows


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A DatasetDict saved to disk: ``train`` (2,500 rows in record batches of 1,000) and
    ``test``, each with a text column and two others."""
    folder = tmp_path_factory.mktemp("hf") / "saved"
    rows = {
        "text": [f"document number {i}" for i in range(ROWS)],
        "label": [i % 3 for i in range(ROWS)],
        "meta": [{"n": i} for i in range(ROWS)],
    }
    train = datasets.Dataset.from_dict(rows)
    datasets.DatasetDict({"train": train, "test": train.select(range(10))}).save_to_disk(folder)
    return folder


def test_a_saved_dataset_is_read_by_record_batches_with_its_columns_as_metadata(saved, tmp_path):
    metadata, rows = _ingest(str(saved), tmp_path, rows_per_shard=1000)
    assert metadata["shards_computed"].value == 3 + 1  # train by record batches, test whole
    assert sorted(metadata["ignored_inputs"].value) == [
        "dataset_dict.json",
        "test/dataset_info.json",
        "test/state.json",
        "train/dataset_info.json",
        "train/state.json",
    ]
    train = [row for row in rows if row[0] == TRAIN]
    assert [row[1] for row in train] == list(range(1, ROWS + 1))
    assert train[1233][2] == "document number 1233"
    assert json.loads(train[1233][3]) == {"label": 1233 % 3, "meta": {"n": 1233}}
    assert len([row for row in rows if row[0] == TEST]) == 10


def test_a_saved_dataset_in_a_bucket_gives_the_same_rows(saved, s3, tmp_path):
    url = s3.upload_folder(saved, "datasets/saved")
    _, local = _ingest(str(saved), tmp_path / "local", rows_per_shard=1000)
    metadata, remote = _ingest(url, tmp_path / "remote", rows_per_shard=1000)
    assert metadata["shards_computed"].value == 4
    assert remote == local


def test_a_dataset_in_the_hugging_face_cache_is_read_from_its_arrow_files(tmp_path):
    source = tmp_path / "corpus.jsonl"
    source.write_text("".join(json.dumps({"text": f"line {i}", "id": i}) + "\n" for i in range(50)))
    cache = tmp_path / "hf-cache"
    datasets.load_dataset("json", data_files=str(source), cache_dir=str(cache))
    # The builder's folder, as users find it: lock files and dataset_info.json beside the data.
    metadata, rows = _ingest(str(cache / "json"), tmp_path / "warehouse")
    assert [row[2] for row in rows] == [f"line {i}" for i in range(50)]
    assert {row[0].rsplit("/", 1)[-1] for row in rows} == {"json-train.arrow"}
    assert json.loads(rows[7][3]) == {"id": 7}
    assert any(name.endswith(".lock") for name in metadata["ignored_inputs"].value)
