"""The schedules exist, are off until someone turns them on, and read the watched folder."""

from __future__ import annotations

import dagster as dg

from llm_assets.constants import DEFAULT_INPUT_DIR, PIPELINE_JOB
from llm_assets.definitions import defs
from llm_assets.orchestration.run_config import INPUT_DIR_ENV, watched_folder
from llm_assets.orchestration.schedules import nightly_pipeline


def test_nightly_schedule_reads_the_watched_folder(tmp_path, monkeypatch):
    """The nightly run reads ``$LLM_ASSETS_INPUT_DIR``, the sensor's folder, not the job's
    default ``data/sample``; an empty variable counts as unset."""
    monkeypatch.setenv(INPUT_DIR_ENV, str(tmp_path))
    request = nightly_pipeline(dg.build_schedule_context())
    assert request.run_config["ops"]["raw_documents"]["config"]["input_dir"] == str(tmp_path)
    monkeypatch.setenv(INPUT_DIR_ENV, "")
    assert watched_folder() == DEFAULT_INPUT_DIR


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
