"""The Dagster resource through which assets reach a compute backend.

Run config chooses the backend (``resources: {compute: {config: {backend: ray}}}``): Dagster run
config can set a resource's fields but not swap its class, so one resource holds the choice and
builds the matching :class:`ComputeBackend` lazily, once per run, and closes it at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import dagster as dg
from pydantic import PrivateAttr

from llm_assets.compute.base import ComputeBackend, Logger, OnResult, R, T

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
    """Build a backend by name (also used outside Dagster: benchmarks and tests)."""
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


class ComputeResource(dg.ConfigurableResource):
    """Where the per-shard work of every stage runs: in-process, a process pool, or Ray."""

    backend: BackendName = "in_process"
    workers: int = 0
    """Worker processes (multiprocess) or CPUs (local Ray); 0 means every core."""
    ray_address: str | None = None
    """Address of an existing Ray cluster; unset means ``RAY_ADDRESS`` or a local Ray."""
    ray_work_while_starting: bool = True
    """Local Ray only: while Ray starts (2-3 s on two cores) this process runs shards itself, then
    hands the rest to Ray. Off: every shard waits for Ray and runs in a Ray worker (its own
    process, with the timeout)."""
    max_attempts: int = 3
    """Attempts per shard before the run fails (a worker that dies or raises is retried)."""
    task_timeout_s: float | None = 3600.0
    """A shard running longer than this is killed and retried (multiprocess and Ray)."""
    benchmark_catalog: str | None = None
    """Catalog holding ``benchmark_results`` for backend ``auto``; unset means the default
    warehouse's catalog (``data/warehouse/catalog.duckdb``)."""

    _backend: ComputeBackend | None = PrivateAttr(default=None)
    _logger: Logger | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        # Built lazily in get_backend(): Dagster may initialise resources more than once per run,
        # and only the steps that compute should pay for workers or Ray.
        self._backend = None
        self._logger = context.log

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self.close()

    def get_backend(self) -> ComputeBackend:
        """The backend for this run, started on first use."""
        if self._backend is None:
            self._backend = make_backend(
                self.backend,
                workers=self.workers,
                ray_address=self.ray_address,
                ray_work_while_starting=self.ray_work_while_starting,
                max_attempts=self.max_attempts,
                task_timeout_s=self.task_timeout_s,
                logger=self._logger,
                benchmark_catalog=self.benchmark_catalog,
            )
        return self._backend

    def run(
        self, fn: Callable[[T], R], tasks: Sequence[T], on_result: OnResult | None = None
    ) -> list[R]:
        """Run ``fn`` on every task with the configured backend; results in task order."""
        return self.get_backend().run(fn, tasks, on_result)

    def close(self) -> None:
        """Stop what the backend started (workers, a local Ray)."""
        if self._backend is not None:
            self._backend.close()
            self._backend = None
