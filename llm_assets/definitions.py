"""The one ``dg.Definitions`` of the project: assets, checks, jobs, schedules, sensors and
resources."""

from __future__ import annotations

import dagster as dg

from llm_assets.assets.benchmark import benchmark_report
from llm_assets.assets.maintenance import prune_warehouse
from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS
from llm_assets.compute.resource import ComputeResource
from llm_assets.constants import BENCHMARK_JOB, BENCHMARK_REPORT, PIPELINE_ASSETS, PIPELINE_JOB
from llm_assets.orchestration.config_errors import install_config_error_hook
from llm_assets.orchestration.console import console_logger
from llm_assets.orchestration.schedules import nightly_pipeline, weekly_benchmark
from llm_assets.orchestration.sensors import input_folder_sensor
from llm_assets.warehouse.resource import WarehouseResource

CONSOLE_AT_INFO = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}
"""The default run config of the jobs: our console logger (which Dagster uses only when the run
config names it) at INFO. A run config's own ``loggers`` replaces it (DEBUG: every event)."""

# The pipeline runs its steps in one process: parallelism lives in the compute backend, and a
# process per step would pay imports (and a Ray start) once per step.
llm_pipeline = dg.define_asset_job(
    PIPELINE_JOB,
    selection=dg.AssetSelection.assets(*PIPELINE_ASSETS),
    executor_def=dg.in_process_executor,
    description="raw -> normalized -> tokenized -> filtered -> training batches",
    config=CONSOLE_AT_INFO,
)

# The benchmark starts its own workers and local Rays: one process, nothing else running beside it.
benchmark = dg.define_asset_job(
    BENCHMARK_JOB,
    selection=dg.AssetSelection.assets(BENCHMARK_REPORT),
    executor_def=dg.in_process_executor,
    description="the study's workload on every compute backend and several data sizes",
    config=CONSOLE_AT_INFO,
)

defs = dg.Definitions(
    assets=[*PIPELINE_ASSET_DEFS, benchmark_report],
    jobs=[llm_pipeline, benchmark, prune_warehouse],
    schedules=[nightly_pipeline, weekly_benchmark],
    sensors=[input_folder_sensor],
    resources={"compute": ComputeResource(), "warehouse": WarehouseResource()},
    executor=dg.in_process_executor,
    loggers={"console": console_logger},
)

# `dagster job execute` loads this module in its own process: a misspelt run config key is
# printed there as one line with its fix, not as Dagster's traceback and schema.
install_config_error_hook(defs)
