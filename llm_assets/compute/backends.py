"""Build a compute backend by name: what the Dagster resource, the benchmark and the tests share.

Kept apart from :mod:`llm_assets.compute.resource` so that code driving the stages without Dagster
(the benchmark's measured runs, scripts, notebooks) does not import Dagster: ~40 MB of the driver's
memory and half a second of start-up.
"""

from __future__ import annotations

from typing import Any, Literal

from llm_assets.compute.base import ComputeBackend, Logger

BackendName = Literal["in_process", "multiprocess", "ray", "auto"]
BACKENDS: tuple[str, ...] = ("in_process", "multiprocess", "ray")
AUTO = "auto"
"""Per stage, the backend that won the latest benchmark at the nearest size (see bench.auto)."""


def make_backend(
    backend: str,
    *,
    workers: int = 0,
    ray_address: str | None = None,
    ray_work_while_starting: bool = True,
    max_attempts: int = 3,
    task_timeout_s: float | None = None,
    logger: Logger | None = None,
    benchmark_catalog: str | None = None,
) -> ComputeBackend:
    """Build a backend by name (also used outside Dagster: benchmarks and tests). ``workers``: 0
    means every core; a negative count is refused rather than read as 0."""
    if workers < 0:
        raise ValueError(f"workers must be >= 0 (0: every core), got {workers}")
    common: dict[str, Any] = {
        "max_attempts": max_attempts,
        "task_timeout_s": task_timeout_s,
        "logger": logger,
    }
    if backend == "in_process":
        from llm_assets.compute.in_process import InProcessBackend

        return InProcessBackend(**common)
    if backend == "multiprocess":
        from llm_assets.compute.multiprocess_pool import MultiprocessBackend

        return MultiprocessBackend(workers=workers, **common)
    if backend == "ray":
        from llm_assets.compute.ray_backend import RayBackend

        return RayBackend(
            address=ray_address,
            num_cpus=workers,
            work_while_starting=ray_work_while_starting,
            **common,
        )
    if backend == AUTO:
        from llm_assets.bench.auto import AutoBackend
        from llm_assets.constants import CATALOG_FILE, DEFAULT_WAREHOUSE_DIR

        def make(name: str) -> ComputeBackend:
            return make_backend(
                name,
                workers=workers,
                ray_address=ray_address,
                ray_work_while_starting=ray_work_while_starting,
                max_attempts=max_attempts,
                task_timeout_s=task_timeout_s,
                logger=logger,
            )

        catalog = benchmark_catalog or f"{DEFAULT_WAREHOUSE_DIR}/{CATALOG_FILE}"
        return AutoBackend(catalog, make=make, **common)
    raise ValueError(
        f"unknown compute backend {backend!r}; choose one of {', '.join(BACKENDS)}, {AUTO}"
    )
