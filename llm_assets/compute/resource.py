"""The Dagster resource through which assets reach a compute backend.

Run config chooses the backend (``resources: {compute: {config: {backend: ray}}}``): Dagster run
config can set a resource's fields but not swap its class, so one resource holds the choice and
builds the matching :class:`ComputeBackend` lazily, once per run, and closes it at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import dagster as dg
from pydantic import PrivateAttr

from llm_assets.compute.backends import (
    BackendName,
    check_backend_settings,
    cluster_address,
    make_backend,
)
from llm_assets.compute.base import ComputeBackend, Logger, OnResult, R, T


class ComputeResource(dg.ConfigurableResource):
    """Where the per-shard work of every stage runs: in-process, a process pool, or Ray."""

    backend: BackendName = "in_process"
    """Where shards run: this process, a process pool, Ray, or ``auto`` (the benchmark's winner
    for the data size on this machine)."""
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
    """Catalog holding ``benchmark_results`` for backend ``auto``; unset means the catalog of the
    run's warehouse (where ``benchmark_report`` records them), or ``data/warehouse``'s outside
    the pipeline's assets."""

    _backend: ComputeBackend | None = PrivateAttr(default=None)
    _warehouse_catalog: str | None = PrivateAttr(default=None)
    _logger: Logger | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        # Built lazily in get_backend(): Dagster may initialise resources more than once per run,
        # and only the steps that compute should pay for workers or Ray.
        self._backend = None
        self._logger = context.log
        cluster = cluster_address(self.backend, self.ray_address)
        check_backend_settings(
            self.workers, self.max_attempts, self.task_timeout_s, on_cluster=cluster is not None
        )
        if cluster and self.workers:
            context.log.info(
                f"compute: workers {self.workers} is not used on the Ray cluster at {cluster}, "
                "which runs one task per CPU it has"
            )

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        self.close()

    def use_warehouse_catalog(self, path: str) -> None:
        """The catalog of the run's warehouse: where backend ``auto`` reads the benchmark results
        unless ``benchmark_catalog`` names another."""
        self._warehouse_catalog = path

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
                benchmark_catalog=self.benchmark_catalog or self._warehouse_catalog,
            )
        return self._backend

    def run(
        self, fn: Callable[[T], R], tasks: Sequence[T], on_result: OnResult | None = None
    ) -> list[R]:
        """Run ``fn`` on every task with the configured backend; results in task order."""
        return self.get_backend().run(fn, tasks, on_result)

    def take_backend_choices(self) -> list[tuple[int | None, str]] | None:
        """Backend ``auto`` only: the (estimated input rows, chosen backend) of every run since
        the last call, so each stage's asset metadata can say what ran it; None otherwise."""
        from llm_assets.compute.auto import AutoBackend

        if isinstance(self._backend, AutoBackend):
            return self._backend.take_choices()
        return [] if self.backend == "auto" else None

    def close(self) -> None:
        """Stop what the backend started (workers, a local Ray)."""
        if self._backend is not None:
            self._backend.close()
            self._backend = None
