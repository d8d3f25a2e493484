"""The Run summary: logged once, by the run's last step, with each stage's rows and reasons read
from the catalog, the batches' folder and the Python that opens it."""

from __future__ import annotations

import logging
from pathlib import Path

import dagster as dg

from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS
from llm_assets.compute.resource import ComputeResource
from llm_assets.constants import (
    FILTERED_DOCUMENTS,
    PIPELINE_ASSETS,
    RAW_DOCUMENTS,
    TOKENIZED_DOCUMENTS,
    TRAINING_BATCHES,
)
from llm_assets.orchestration.summary import StageSummary, format_summary, last_step
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.conftest import pipeline_run_config


def _summaries(instance: dg.DagsterInstance, run_id: str) -> list[tuple[str | None, str]]:
    """(step, message) of every Run summary logged in the run."""
    return [
        (entry.step_key, entry.user_message)
        for entry in instance.all_logs(run_id)
        if entry.level == logging.INFO and entry.user_message.startswith("Run summary")
    ]


def test_the_last_step_is_the_latest_pipeline_asset_of_the_run():
    assert last_step(PIPELINE_ASSETS) == TRAINING_BATCHES
    assert last_step({RAW_DOCUMENTS, TOKENIZED_DOCUMENTS}) == TOKENIZED_DOCUMENTS
    assert last_step({"benchmark_report"}) is None


def test_the_summary_names_rows_reasons_folder_and_reader():
    stages = [
        StageSummary(FILTERED_DOCUMENTS, 3634, 1421, 2213, [("too_few_tokens", 786)]),
        StageSummary(TRAINING_BATCHES, 1421, 185, 0),
    ]
    text = format_summary(stages, Path("/w"), Path("/w/training_batches/fp"))
    lines = text.splitlines()
    assert lines[0] == "Run summary"
    assert "3,634" in lines[2] and "2,213 (61%)" in lines[2] and "too_few_tokens 786" in lines[2]
    assert lines[-3:] == [
        "Open them in Python:",
        "    from llm_assets.reader import TokenBatchDataset",
        '    ds = TokenBatchDataset.from_warehouse("/w", split="train")',
    ]
    assert "Batches: /w/training_batches/fp" in lines
    empty = format_summary(stages[:1], Path("/w"), None)
    assert empty.splitlines()[-1] == f"Batches: none yet in /w (materialize {TRAINING_BATCHES})"


def test_a_run_logs_its_summary_once_from_its_last_step(sample_input, tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    root = tmp_path / "wh"
    resources = {"compute": ComputeResource(), "warehouse": WarehouseResource(root=str(root))}
    result = dg.materialize(
        PIPELINE_ASSET_DEFS,
        resources=resources,
        run_config=pipeline_run_config(sample_input),
        instance=instance,
    )
    assert result.success
    ((step, text),) = _summaries(instance, result.run_id)
    assert step == TRAINING_BATCHES
    rows = {line.split()[0]: line for line in text.splitlines()[2:7]}
    assert list(rows) == list(PIPELINE_ASSETS)
    assert "missing_text" in rows[RAW_DOCUMENTS] and "too_few_tokens" in rows[FILTERED_DOCUMENTS]
    (event,) = result.asset_materializations_for_node(TRAINING_BATCHES)
    assert f"Batches: {event.metadata['folder'].value}" in text

    # A run of the first two steps: its last is normalized_documents; the batches are still there.
    config = pipeline_run_config(sample_input)
    del config["ops"][TRAINING_BATCHES]
    again = dg.materialize(
        PIPELINE_ASSET_DEFS[:2], resources=resources, run_config=config, instance=instance
    )
    ((step, text),) = _summaries(instance, again.run_id)
    assert step == "normalized_documents"
    assert [line.split()[0] for line in text.splitlines()[2:4]] == list(PIPELINE_ASSETS[:2])
    assert f"Batches: {event.metadata['folder'].value}" in text
