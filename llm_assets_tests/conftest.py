"""Shared fixtures: the shipped sample, temporary warehouses, run config builders."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO / "data" / "sample"

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

pytest_plugins = ["llm_assets_tests.s3"]


SERIAL_FILES = (
    "compute/test_ray_backend.py",
    "compute/test_ray_cluster.py",
    "compute/test_ray_two_nodes.py",
    "compute/test_backends.py",
    "test_faults.py",
    "orchestration/test_runs.py",
    "assets/test_cli.py",
    "orchestration/test_cli_output.py",
    "kernels/filters/test_plugin.py",
    "test_ui_browser.py",
    "bench/test_benchmark_asset.py",
    "warehouse/test_object_storage.py",
)
"""Test files that start clusters, daemons, webservers or CLI runs, install a package, or time
what they wait for: with ``pytest -n 2`` (scripts/test.sh) they all run on one worker, one at a
time, while the other worker runs the rest, so no two of them compete for the two cores."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.path.as_posix()
        if any(path.endswith(f"llm_assets_tests/{name}") for name in SERIAL_FILES):
            item.add_marker(pytest.mark.xdist_group("serial"))


@pytest.fixture(autouse=True, scope="session")
def data_root_is_the_test_temp_folder(tmp_path_factory):
    """Tests put inputs and warehouses in different temporary folders: make pytest's base temp
    folder the data root (tests of the data root itself unset or override it)."""
    from llm_assets.paths import DATA_ROOT_ENV

    previous = os.environ.get(DATA_ROOT_ENV)
    os.environ[DATA_ROOT_ENV] = str(tmp_path_factory.getbasetemp())
    yield
    if previous is None:
        os.environ.pop(DATA_ROOT_ENV, None)
    else:
        os.environ[DATA_ROOT_ENV] = previous


@pytest.fixture
def sample_input(tmp_path: Path) -> Path:
    """A private copy of the shipped sample corpus (tests may add files to it)."""
    target = tmp_path / "input"
    shutil.copytree(SAMPLE_DIR, target)
    return target


def docs_table(
    texts: list[str],
    *,
    prefix: str = "d",
    width: int = 0,
    source: str = "f.jsonl",
    metadata: bool | list[str | None] = False,
) -> pa.Table:
    """A batch of documents as kernels see it: ids ``d0``, ``d1``, … (digits zero-padded to
    ``width``), one source file, 1-based lines; optionally a metadata column (``True``: null;
    a list: those JSON texts)."""
    n = len(texts)
    columns = {
        "doc_id": pa.array([f"{prefix}{i:0{width}d}" for i in range(n)], pa.string()),
        "source_file": pa.array([source] * n, pa.string()),
        "source_line": pa.array(range(1, n + 1), pa.int64()),
        "text": pa.array(texts, pa.string()),
    }
    if metadata is not False:
        values = [None] * n if metadata is True else metadata
        columns["metadata"] = pa.array(values, pa.string())
    return pa.table(columns)


def pipeline_run_config(input_dir: Path, rows_per_shard: int = 1000, **ops: dict) -> dict:
    """Run config for the pipeline job: input folder and shard size, plus per-op overrides."""
    config = {
        "ops": {
            "raw_documents": {
                "config": {"input_dir": str(input_dir), "rows_per_shard": rows_per_shard}
            },
            "training_batches": {"config": {"seq_len": 256}},
        }
    }
    for op, op_config in ops.items():
        config["ops"].setdefault(op, {"config": {}})["config"].update(op_config)
    return config


def gpt2_folder(folder: Path, added: list[str], *, special: bool) -> Path:
    """GPT-2 saved as a tokenizer folder with ``added`` tokens (special or not), offline: a
    tokenizer folder with chat markup of its own, as models ship them. A folder that holds one
    already gets the tokens added to its own (special ones, then others)."""
    from transformers import AutoTokenizer

    from llm_assets.kernels.tokenize.gpt2 import gpt2_hf_tokenizer

    if (folder / "tokenizer.json").exists():
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    else:
        tok = gpt2_hf_tokenizer()
    tok.add_tokens(added, special_tokens=special)
    tok.save_pretrained(folder)
    return folder
