"""Schedules: a nightly refresh of the pipeline from the watched folder, a weekly benchmark.

Both are off by default: turn them on in the UI (*Automation*) or with
``dagster schedule start nightly_pipeline``.
"""

from __future__ import annotations

import dagster as dg

from llm_assets.constants import BENCHMARK_JOB, PIPELINE_JOB
from llm_assets.orchestration.run_config import pipeline_run_config, watched_folder


@dg.schedule(
    name="nightly_pipeline",
    job_name=PIPELINE_JOB,
    cron_schedule="0 2 * * *",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Refresh the pipeline every night at 02:00 from the watched input folder "
    "(finished shards are reused)",
)
def nightly_pipeline(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
    """The watched folder (:func:`watched_folder`), like the sensor: not the job's default."""
    return dg.RunRequest(run_config=pipeline_run_config(watched_folder()))


weekly_benchmark = dg.ScheduleDefinition(
    name="weekly_benchmark",
    job_name=BENCHMARK_JOB,
    cron_schedule="0 3 * * 0",
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Re-measure every backend on Sundays at 03:00 (history in benchmark_results)",
)
