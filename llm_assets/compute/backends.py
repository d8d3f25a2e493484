"""Build a compute backend by name: what the Dagster resource, the benchmark and the tests share.

Kept apart from :mod:`llm_assets.compute.resource` so that code driving the stages without Dagster
(the benchmark's measured runs, scripts, notebooks) does not import Dagster: ~40 MB of the driver's
memory and half a second of start-up.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from llm_assets.compute.base import ComputeBackend, Logger

BackendName = Literal["in_process", "multiprocess", "ray", "auto"]
BACKENDS: tuple[str, ...] = ("in_process", "multiprocess", "ray")
AUTO = "auto"
"""Per stage, the backend that won the latest benchmark at the nearest size (see compute.auto)."""


WORKERS_PER_CORE_LIMIT = 8
"""``workers`` above this many per core is refused: far past any gain (the work is CPU-bound), and
a typo such as 100000 would spawn that many processes."""


def cluster_address(backend: str, ray_address: str | None) -> str | None:
    """The existing Ray cluster the backend runs on (``ray_address``, else ``RAY_ADDRESS``), or
    None: another backend, or a local Ray."""
    if backend != "ray":
        return None
    return ray_address or os.environ.get("RAY_ADDRESS") or None


def check_backend_settings(
    workers: int,
    max_attempts: int,
    task_timeout_s: float | None,
    *,
    on_cluster: bool = False,
    cores: int | None = None,
) -> None:
    """Refuse settings no backend can run with, naming the setting: called when a run's compute
    resource is set up, so a bad value fails at the first step even when every shard is already
    complete and no backend would be built. ``on_cluster``: Ray on an existing cluster, which
    does not use ``workers``, so this machine's cores do not bound it."""
    cores = cores or os.cpu_count() or 1
    if workers < 0:
        raise ValueError(f"workers must be >= 0 (0: every core), got {workers}")
    if not on_cluster and workers > WORKERS_PER_CORE_LIMIT * cores:
        raise ValueError(
            f"workers {workers} is more than {WORKERS_PER_CORE_LIMIT} per core of this machine's "
            f"{cores} (at most {WORKERS_PER_CORE_LIMIT * cores}; 0 means one per core)"
        )
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    if task_timeout_s is not None and task_timeout_s <= 0:
        raise ValueError(f"task_timeout_s must be > 0 or None, got {task_timeout_s}")


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
    means every core; a negative count is refused rather than read as 0, and so is one beyond
    :data:`WORKERS_PER_CORE_LIMIT` per core."""
    on_cluster = cluster_address(backend, ray_address) is not None
    check_backend_settings(workers, max_attempts, task_timeout_s, on_cluster=on_cluster)
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
        from llm_assets.compute.auto import AutoBackend
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
