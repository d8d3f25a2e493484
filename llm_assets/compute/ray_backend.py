"""Run tasks as Ray tasks: on a local Ray started once per run, or on an existing cluster.

Ray costs seconds and a few hundred megabytes to start, so the backend starts it lazily on the
first ``run`` and keeps it for the backend's life (one Dagster run), then shuts down only what it
started. Each task is one remote call per *shard* (:mod:`~llm_assets.compute.ray_shard_call`,
sent and retried by :mod:`~llm_assets.compute.ray_dispatch`); the worker reads and writes Parquet
itself, so only task specs and small stats cross the object store.

A local Ray is started lean (:mod:`~llm_assets.compute.ray_local`), its worker environment
through the raylet's. On an existing cluster (:mod:`~llm_assets.compute.ray_cluster`) a
``runtime_env`` is the only way to reach remote workers, so it is used there.

A local Ray starts in a background thread, and until it is ready the run's own process works
through the shards itself (:meth:`RayBackend.run`), then hands the rest to Ray: on two cores the
start takes 2-3 s, as long as a 30K-row job takes in one process, and waiting for it made Ray the
slowest backend for small inputs. Shards run that way get what the in-process backend gives them
(no timeout, no process of their own); a shard that raises there is left to Ray, which retries it.
``work_while_starting=False`` waits for Ray instead and sends every shard to it.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from llm_assets.compute.base import (
    ComputeBackend,
    OnResult,
    R,
    T,
    describe_error,
    task_key,
)
from llm_assets.compute.ray_cluster import check_cluster_answers, connect_to_cluster
from llm_assets.compute.ray_dispatch import ShardDispatch
from llm_assets.compute.ray_local import (
    BACKGROUND_NICE,
    lower_this_threads_priority,
    quiet_thread_warning,
    start_local_ray,
    stop_node,
    warm_workers,
)
from llm_assets.compute.ray_shard_call import code_identity, shard_call

RAY_ADDRESS_ENV = "RAY_ADDRESS"


class RayBackend(ComputeBackend):
    """Ray tasks with a per-task timeout, retried by the driver (not by Ray, so that every
    failed attempt is counted and logged): a task that raised, whose worker or node died, or
    that timed out runs again, up to ``max_attempts`` in all. On a cluster, each task first
    checks that its node runs the driver's llm_assets (:mod:`~llm_assets.compute.ray_shard_call`),
    and a cluster that stops answering fails the run within seconds (:meth:`_check_cluster`)."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        num_cpus: int = 0,
        object_store_mb: int = 256,
        work_while_starting: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.address = address or os.environ.get(RAY_ADDRESS_ENV) or None
        self.num_cpus = num_cpus if num_cpus > 0 else (os.cpu_count() or 1)
        self.object_store_mb = object_store_mb
        self.work_while_starting = work_while_starting
        self.shards_run_in_driver = 0
        """Shards this process ran itself while the local Ray started (see the module doc)."""
        self._started_here = False
        self._node: Any = None
        self._remote: Any = None
        self._starter: threading.Thread | None = None
        self._ready = threading.Event()  # the background start ended (started or failed)
        self._release = threading.Event()  # the starting thread may end: Ray is stopped
        self._start_began = 0.0
        self._start_error: BaseException | None = None
        self._cluster_cpus = 0
        """The cluster's CPUs, read once after connecting: ``ray.cluster_resources()`` on a
        cluster that has stopped blocks, then aborts the process."""

    @property
    def parallelism(self) -> int:
        return self._cluster_cpus or self.num_cpus

    def _ensure_started(self) -> Any:
        if self._remote is not None:
            return self._remote
        if self._starter is not None:
            self._finish_background_start()
        else:
            self._start()
        import ray

        # No retries by Ray: the driver retries (see run), so it counts and logs every attempt.
        self._remote = ray.remote(num_cpus=1, max_retries=0, retry_exceptions=False)(shard_call)
        return self._remote

    def _start(self) -> None:
        """Connect to the cluster, or start a local Ray and connect to it, unless Ray is up."""
        import ray

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if ray.is_initialized():
            return
        started = time.monotonic()
        if self.address:
            self.log.info(f"connecting to the Ray cluster at {self.address}")
            self._cluster_cpus = connect_to_cluster(self.address)
        else:
            self.log.info(f"starting a local Ray with {self.num_cpus} CPU(s)")
            self._start_local()
        self._started_here = True
        atexit.register(self.close)
        self.ready_seconds = time.monotonic() - started
        self.log.info(f"Ray ready in {self.ready_seconds:.1f} s")

    def _can_work_while_starting(self) -> bool:
        """Start in the background: a local Ray not started yet, with the option on."""
        if not self.work_while_starting or self.address or self._remote is not None:
            return False
        if self._starter is not None:
            return True  # a start under way since an earlier stage: its thread may be importing
        ray = sys.modules.get("ray")  # importing Ray costs ~0.5 s: that is the thread's job too
        return ray is None or not ray.is_initialized()

    def _begin_background_start(self, warm_module: str) -> None:
        """Start the local Ray (import, node, connect) in a thread; :meth:`_ensure_started`
        waits for it.

        Ray counts as ready once every worker has imported ``warm_module`` (the task function's
        module: pyarrow, the kernels) and pandas
        (:func:`~llm_assets.compute.ray_local.warm_workers`), ~0.7 s per worker: until then this
        process is faster.

        The thread then lives until :meth:`close`: Ray starts its daemons with the kernel's
        parent-death signal, which fires when the *thread* that started them ends.
        """
        if self._starter is not None:
            return
        self.log.info(
            f"starting a local Ray with {self.num_cpus} CPU(s); this process works on shards "
            "until it is ready"
        )
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        self._start_began = time.monotonic()
        self._ready.clear()
        self._release.clear()

        def start() -> None:
            lower_this_threads_priority(BACKGROUND_NICE)
            try:
                import ray

                quiet_thread_warning()
                if not ray.is_initialized():
                    self._start_local()
                    self._started_here = True
                warm_workers(warm_module, self.num_cpus)
                self.ready_seconds = time.monotonic() - self._start_began
            except BaseException as exc:  # handed to the driver thread by _ensure_started
                self._start_error = exc
                return
            finally:
                self._ready.set()
            self._release.wait()

        self._starter = threading.Thread(target=start, name="llm-assets-ray-start", daemon=True)
        self._starter.start()

    def _finish_background_start(self) -> None:
        """Wait for the background start; raise what it raised."""
        assert self._starter is not None
        self._ready.wait()
        error, self._start_error = self._start_error, None
        if error is not None:
            self._starter.join()
            self._starter = None
            raise error
        if self._started_here:
            atexit.register(self.close)
        self.log.info(
            f"Ray ready in {self.ready_seconds or 0:.1f} s; this process ran "
            f"{self.shards_run_in_driver} shard(s) meanwhile"
        )

    def _run_in_driver_while_starting(
        self,
        fn: Callable[[T], R],
        tasks: Sequence[T],
        on_result: OnResult | None,
        results: dict[int, R],
        used: list[int],
    ) -> None:
        """Run tasks here, in order, until the background start ends; fill ``results``.

        A task that raises is left for Ray (its own process, its retries), not retried here;
        that attempt counts in ``used``. (A task that crashes this
        process, as a segfault in native code would, takes the run with it: what the in-process
        backend gives too.)
        """
        for index, task in enumerate(tasks):
            if self._ready.is_set():
                return
            # No heartbeat reaches this process while it computes: say what it is on.
            self.log.info(f"shard {task_key(task)}: running in this process while Ray starts")
            try:
                results[index] = fn(task)
            except Exception as exc:
                used[index] += 1
                self.log.warning(
                    f"shard {task_key(task)} failed in this process while Ray started "
                    f"({describe_error(exc)}); Ray will run it"
                )
                continue
            self.shards_run_in_driver += 1
            if on_result is not None:
                on_result(index, results[index])

    def _start_local(self) -> None:
        """Start a lean local Ray and connect to it (:func:`start_local_ray`)."""
        object_store_bytes = self.object_store_mb * 1024 * 1024
        self._node = start_local_ray(self.num_cpus, object_store_bytes, self.log)

    def run(
        self,
        fn: Callable[[T], R],
        tasks: Sequence[T],
        on_result: OnResult | None = None,
    ) -> list[R]:
        if not tasks:
            return []
        if self._remote is not None and self.address:
            self._check_cluster()  # stopped since the last stage? Ray would hang, then abort
        results: dict[int, R] = {}
        if self._can_work_while_starting():
            self._begin_background_start(getattr(fn, "__module__", None) or __name__)
        # Attempts each shard has used: one in this process while Ray started, if it raised
        # there; each attempt in Ray that raised, died or timed out.
        used = [0] * len(tasks)
        if self._remote is None and self._starter is not None:
            self._run_in_driver_while_starting(fn, tasks, on_result, results, used)
            if len(results) == len(tasks):
                return [results[i] for i in range(len(tasks))]
        remote = self._ensure_started()
        ShardDispatch(
            remote,
            fn,
            tasks,
            on_result,
            results=results,
            used=used,
            # Nodes of a cluster may run another llm_assets: each task checks its node's against
            # this one (a local Ray's workers run this machine's installed package: not checked).
            expected=code_identity() if self.address else None,
            check_cluster=self._check_cluster if self.address else None,
            slots=max(1, self.parallelism),
            max_attempts=self.max_attempts,
            task_timeout_s=self.task_timeout_s,
            log=self.log,
            heartbeat_s=self.heartbeat_s,
        ).run()
        return [results[i] for i in range(len(tasks))]

    def _check_cluster(self) -> None:
        """Raise :class:`~llm_assets.compute.ray_cluster.RayClusterError` unless the cluster at
        ``self.address`` still answers."""
        check_cluster_answers(self.address or "")

    def worker_pids(self) -> list[int]:
        """Pids of this node's Ray processes (workers and daemons): all count towards memory."""
        if not self._started_here:
            return []
        import psutil

        me = psutil.Process()
        return [p.pid for p in me.children(recursive=True)]

    def close(self) -> None:
        if self._starter is not None:
            self._ready.wait()  # a start under way: let it finish, then stop what it started
            if self._start_error is not None:  # every shard ran here before it failed
                self.log.warning(f"the local Ray failed to start: {self._start_error!r}")
                self._start_error = None
        if self._started_here:
            import ray

            if self.address:  # a cluster this run did not start: it stays up
                self.log.info(f"disconnecting from the Ray cluster at {self.address}")
            else:
                self.log.info("shutting down the local Ray")
            ray.shutdown()
            if self._node is not None:
                stop_node(self._node)
                self._node = None
            self._started_here = False
            self._cluster_cpus = 0
            atexit.unregister(self.close)
        if self._starter is not None:
            self._release.set()
            self._starter.join()
            self._starter = None
        self._remote = None
