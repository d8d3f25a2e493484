"""Shared fixtures: the shipped sample, temporary warehouses, run config builders."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE_DIR = REPO / "data" / "sample"

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


@pytest.fixture
def sample_input(tmp_path: Path) -> Path:
    """A private copy of the shipped sample corpus (tests may add files to it)."""
    target = tmp_path / "input"
    shutil.copytree(SAMPLE_DIR, target)
    return target


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
