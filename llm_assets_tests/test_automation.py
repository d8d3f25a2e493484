"""Sensor and schedules: a new file starts exactly one run that computes only what is new, an
unchanged folder is skipped, and the schedules exist but are off until someone turns them on."""

from __future__ import annotations

import json
import shutil

import dagster as dg

from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS
from llm_assets.automation import build_input_folder_sensor, changed_files
from llm_assets.compute.resource import ComputeResource
from llm_assets.constants import PIPELINE_JOB
from llm_assets.definitions import defs
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.conftest import SAMPLE_DIR


def _run(request: dg.RunRequest, root) -> dg.ExecuteInProcessResult:
    """Execute a sensor's run request the way the daemon would, with its run config."""
    config = dict(request.run_config)
    config.setdefault("ops", {}).setdefault("training_batches", {"config": {"seq_len": 256}})
    return dg.materialize(
        PIPELINE_ASSET_DEFS,
        resources={"compute": ComputeResource(), "warehouse": WarehouseResource(root=str(root))},
        run_config=config,
        instance=dg.DagsterInstance.ephemeral(),
        tags=request.tags,
    )


def _computed(result) -> dict[str, int]:
    return {
        e.asset_key.to_user_string(): e.materialization.metadata["shards_computed"].value
        for e in result.get_asset_materialization_events()
    }


def test_sensor_runs_once_per_change_and_only_new_shards_are_computed(tmp_path):
    input_dir = tmp_path / "input"
    input_dir.mkdir()
    shutil.copy(SAMPLE_DIR / "wiki_sample.jsonl", input_dir)
    root = tmp_path / "warehouse"
    sensor = build_input_folder_sensor(str(input_dir))
    instance = dg.DagsterInstance.ephemeral()

    first = sensor(dg.build_sensor_context(instance=instance, cursor=None))
    assert len(first.run_requests) == 1
    request = first.run_requests[0]
    assert request.run_config["ops"]["raw_documents"]["config"]["input_dir"] == str(input_dir)
    assert _run(request, root).success

    # Same folder again: a skip with a reason, and the cursor survives as plain JSON.
    again = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor))
    assert isinstance(again, dg.SkipReason) and "no new or changed files" in again.skip_message
    assert json.loads(first.cursor) == {
        "wiki_sample.jsonl": json.loads(first.cursor)["wiki_sample.jsonl"]
    }

    shutil.copy(SAMPLE_DIR / "reviews.csv", input_dir)
    second = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor))
    (request2,) = second.run_requests
    assert request2.run_key != request.run_key
    # The same change seen twice gives the same run key: Dagster starts it once.
    repeat = sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor))
    assert repeat.run_requests[0].run_key == request2.run_key
    result = _run(request2, root)
    assert result.success
    computed = _computed(result)
    assert computed["raw_documents"] == 1  # only reviews.csv; wiki_sample's shard reused
    assert computed["normalized_documents"] == 1 and computed["tokenized_documents"] == 1


def test_sensor_skips_a_missing_folder_with_its_reason(tmp_path):
    sensor = build_input_folder_sensor(str(tmp_path / "nowhere"))
    skipped = sensor(dg.build_sensor_context(instance=dg.DagsterInstance.ephemeral()))
    assert isinstance(skipped, dg.SkipReason) and "nowhere" in skipped.skip_message


def test_changed_files_sees_new_and_modified_only():
    assert changed_files({"a": "1:1", "b": "2:2"}, {"a": "1:1", "b": "2:3", "c": "5:5"}) == {
        "b": "2:3",
        "c": "5:5",
    }


def test_schedules_and_sensor_are_registered_and_off_by_default():
    repo = defs.get_repository_def()
    assert repo.get_sensor_def("input_folder_sensor").job_name == PIPELINE_JOB
    assert (
        repo.get_sensor_def("input_folder_sensor").default_status == dg.DefaultSensorStatus.STOPPED
    )
    for name, cron in (("nightly_pipeline", "0 2 * * *"), ("weekly_benchmark", "0 3 * * 0")):
        schedule = repo.get_schedule_def(name)
        assert schedule.cron_schedule == cron
        assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
