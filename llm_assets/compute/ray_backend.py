"""Run tasks as Ray tasks: on a local Ray started once per run, or on an existing cluster.

Ray costs seconds and about half a gigabyte to start, so the backend starts it lazily on the first
``run`` and keeps it for the backend's life (one Dagster run), then shuts down only what it
started. Each task is one remote call per *shard*; the worker reads and writes Parquet itself, so
only task specs and small stats cross the object store.

On a cluster, every node must have this package installed and see the warehouse path (a shared
filesystem); see the README.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from llm_assets.compute.base import ComputeBackend, OnResult, R, ShardTaskFailed, T, task_key

RAY_ADDRESS_ENV = "RAY_ADDRESS"
_WORKER_ENV = {"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "RAYON_NUM_THREADS": "1"}


def _call(fn: Callable[[Any], Any], task: Any) -> Any:
    """The remote function: one shard task in a Ray worker."""
    return fn(task)


class RayBackend(ComputeBackend):
    """Ray tasks with Ray's own retries (worker death and exceptions) and a per-task timeout."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        num_cpus: int = 0,
        object_store_mb: int = 256,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.address = address or os.environ.get(RAY_ADDRESS_ENV) or None
        self.num_cpus = num_cpus if num_cpus > 0 else (os.cpu_count() or 1)
        self.object_store_mb = object_store_mb
        self._started_here = False
        self._remote: Any = None

    @property
    def parallelism(self) -> int:
        if self._remote is not None:
            import ray

            return max(1, int(ray.cluster_resources().get("CPU", self.num_cpus)))
        return self.num_cpus

    def _ensure_started(self) -> Any:
        import ray

        if self._remote is not None:
            return self._remote
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if not ray.is_initialized():
            started = time.monotonic()
            if self.address:
                self.log.info(f"connecting to the Ray cluster at {self.address}")
                ray.init(
                    address=self.address,
                    runtime_env={"env_vars": _WORKER_ENV},
                    logging_level="WARNING",
                )
            else:
                self.log.info(f"starting a local Ray with {self.num_cpus} CPU(s)")
                ray.init(
                    num_cpus=self.num_cpus,
                    object_store_memory=self.object_store_mb * 1024 * 1024,
                    include_dashboard=False,
                    runtime_env={"env_vars": _WORKER_ENV},
                    logging_level="WARNING",
                    log_to_driver=True,
                )
            self._started_here = True
            self.log.info(f"Ray ready in {time.monotonic() - started:.1f} s")
        self._remote = ray.remote(
            num_cpus=1, max_retries=self.max_attempts - 1, retry_exceptions=True
        )(_call)
        return self._remote

    def run(
        self,
        fn: Callable[[T], R],
        tasks: Sequence[T],
        on_result: OnResult | None = None,
    ) -> list[R]:
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        if not tasks:
            return []
        remote = self._ensure_started()
        # Keep only as many tasks in flight as there are CPUs, so a timeout measures running time
        # (not time spent queued) and the driver's memory holds few references.
        window = max(1, self.parallelism)
        queue = list(range(len(tasks)))[::-1]
        in_flight: dict[Any, tuple[int, float]] = {}
        results: dict[int, R] = {}
        while queue or in_flight:
            while queue and len(in_flight) < window:
                index = queue.pop()
                in_flight[remote.remote(fn, tasks[index])] = (index, time.monotonic())
            done, _ = ray.wait(list(in_flight), num_returns=1, timeout=0.5)
            for ref in done:
                index, _started = in_flight.pop(ref)
                try:
                    results[index] = ray.get(ref)
                except (RayError, GetTimeoutError) as exc:
                    self._cancel(in_flight)
                    cause = getattr(exc, "cause", None) or exc
                    error = f"{type(cause).__name__}: {cause}"
                    raise ShardTaskFailed(task_key(tasks[index]), self.max_attempts, error) from exc
                if on_result is not None:
                    on_result(index, results[index])
            if self.task_timeout_s is not None:
                now = time.monotonic()
                for index, started in list(in_flight.values()):
                    if now - started > self.task_timeout_s:
                        self._cancel(in_flight)
                        raise ShardTaskFailed(
                            task_key(tasks[index]), 1, f"timed out after {self.task_timeout_s:g} s"
                        )
        return [results[i] for i in range(len(tasks))]

    @staticmethod
    def _cancel(in_flight: dict[Any, tuple[int, float]]) -> None:
        import ray

        for ref in in_flight:
            ray.cancel(ref, force=True)

    def worker_pids(self) -> list[int]:
        """Pids of this node's Ray processes (workers and daemons): all count towards memory."""
        if not self._started_here:
            return []
        import psutil

        me = psutil.Process()
        return [p.pid for p in me.children(recursive=True)]

    def close(self) -> None:
        if self._started_here:
            import ray

            self.log.info("shutting down Ray")
            ray.shutdown()
            self._started_here = False
        self._remote = None
