"""Sensors and schedules: runs that start themselves.

- :func:`input_folder_sensor`: watches the input folder; a new or changed file (path, size,
  mtime) starts one ``llm_pipeline`` run that computes only the new shards (the stages reuse every
  shard whose input fingerprint is unchanged). The run key is derived from the changed files'
  fingerprints, so the same change never starts two runs; the cursor (file -> fingerprint, JSON)
  lives in Dagster's storage and survives restarts of the daemon.
- A nightly refresh of the pipeline and a weekly benchmark report.

All of them are off by default: turn them on in the UI (*Automation*) or with
``dagster sensor start input_folder_sensor`` / ``dagster schedule start nightly_pipeline``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import dagster as dg

from llm_assets.constants import BENCHMARK_JOB, DEFAULT_INPUT_DIR, PIPELINE_JOB, RAW_DOCUMENTS
from llm_assets.stages import StageInputError, list_input_files

INPUT_DIR_ENV = "LLM_ASSETS_INPUT_DIR"
"""Environment variable naming the folder the sensor watches (default ``data/sample``)."""
SENSOR_INTERVAL_SECONDS = 30


def snapshot(input_dir: str | Path) -> dict[str, str]:
    """Relative path -> ``size:mtime_ns`` of every input file (what the sensor compares)."""
    files = {}
    for path, rel in list_input_files(input_dir):
        stat = path.stat()
        files[rel] = f"{stat.st_size}:{stat.st_mtime_ns}"
    return files


def changed_files(before: dict[str, str], now: dict[str, str]) -> dict[str, str]:
    """Files that are new or whose size or mtime changed since ``before``."""
    return {name: fp for name, fp in now.items() if before.get(name) != fp}


def build_input_folder_sensor(
    input_dir: str | None = None,
    *,
    name: str = "input_folder_sensor",
    run_config: dict | None = None,
    default_status: dg.DefaultSensorStatus = dg.DefaultSensorStatus.STOPPED,
) -> dg.SensorDefinition:
    """A sensor that starts ``llm_pipeline`` on new or changed files under ``input_dir`` (default:
    ``$LLM_ASSETS_INPUT_DIR`` or ``data/sample``). ``run_config`` is merged into each run's
    config (e.g. a warehouse root)."""

    @dg.sensor(
        name=name,
        job_name=PIPELINE_JOB,
        minimum_interval_seconds=SENSOR_INTERVAL_SECONDS,
        default_status=default_status,
        description="New or changed input files start a run that computes only what is new",
    )
    def _sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult | dg.SkipReason:
        folder = input_dir or os.environ.get(INPUT_DIR_ENV, DEFAULT_INPUT_DIR)
        try:
            now = snapshot(folder)
        except StageInputError as err:
            return dg.SkipReason(f"input folder not usable: {err}")
        before = json.loads(context.cursor) if context.cursor else {}
        changed = changed_files(before, now)
        if not changed:
            return dg.SkipReason(f"no new or changed files in {folder} ({len(now)} known)")
        run_key = hashlib.sha256(json.dumps(sorted(changed.items())).encode()).hexdigest()[:24]
        config = {"ops": {RAW_DOCUMENTS: {"config": {"input_dir": str(folder)}}}}
        for key, value in (run_config or {}).items():
            config.setdefault(key, {}).update(value)
        context.log.info(f"{len(changed)} new or changed file(s): {sorted(changed)[:10]}")
        return dg.SensorResult(
            run_requests=[
                dg.RunRequest(
                    run_key=run_key,
                    run_config=config,
                    tags={"llm_assets/changed_files": str(len(changed))},
                )
            ],
            cursor=json.dumps(now, sort_keys=True),
        )

    return _sensor


input_folder_sensor = build_input_folder_sensor()

nightly_pipeline = dg.ScheduleDefinition(
    name="nightly_pipeline",
    job_name=PIPELINE_JOB,
    cron_schedule="0 2 * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Refresh the pipeline every night at 02:00 (finished shards are reused)",
)

weekly_benchmark = dg.ScheduleDefinition(
    name="weekly_benchmark",
    job_name=BENCHMARK_JOB,
    cron_schedule="0 3 * * 0",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Re-measure every backend on Sundays at 03:00 (history in benchmark_results)",
)
