"""Start a lean local single-node Ray, and the pieces a background start needs.

A local Ray is started lean (:func:`start_local_ray`): the GCS, the raylet (with the two agents
it cannot run without) and the workers, but not the dashboard server, the autoscaler monitor nor
the log monitor that ``ray.init`` adds. On two cores those three Python processes cost ~1.5 s of
start-up (``ray.init`` waits for the dashboard server) and ~170 MB of memory, and a run of shard
tasks on one machine uses none of them. The worker environment (no extra threads per worker)
reaches the workers through the raylet's environment, which they inherit: asking for it as a
``runtime_env`` instead makes Ray discard its prestarted workers and start new ones for that
environment (~1.5 s more before the first task).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from llm_assets.compute.base import Logger

WORKER_ENV = {"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "RAYON_NUM_THREADS": "1"}
"""Every worker's environment: parallelism comes from Ray, libraries add no threads of their own."""
CONNECT_RETRY = {
    "raylet_client_connect_timeout_milliseconds": 20,
    "raylet_client_num_connect_attempts": 500,
}
"""Ray settings (``_system_config``) for a local start: Ray's processes connect to sockets that
may not listen yet (the raylet to its own object store) and retry 1 s apart by default, so a
start that just misses the first try waits a whole second: one start in two or three on two
busy cores (ready after 3.1-3.2 s instead of 2.2-2.4 s at 200K rows). Retrying every 20 ms, 500
times, keeps Ray's 10 s limit."""
BACKGROUND_NICE = 10
"""How much nicer than the driver a local Ray started in the background runs (the ``nice``
command's default): its start (~4 CPU-s over seven processes) then takes only the CPU that the
shards the driver runs meanwhile leave over. It applies to the GCS, the raylet and its agents;
Ray already runs its workers 15 nicer than the raylet (``worker_niceness``), so they end at 19."""


@contextlib.contextmanager
def _environ(updates: dict[str, str]) -> Iterator[None]:
    """Set environment variables for the duration of the block (processes started in it inherit
    them), then restore the previous values."""
    saved = {name: os.environ.get(name) for name in updates}
    os.environ.update(updates)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _start_lean_node(num_cpus: int, object_store_bytes: int) -> Any:
    """Start a local single-node Ray without the processes a run of shard tasks does not use.

    Returns the started ``ray._private.node.Node`` (connect with ``ray.init(address=...)``, stop
    with :func:`stop_node`). This is what ``ray.init`` does for a local start, minus the
    dashboard server, the autoscaler monitor and the log monitor: ``ray.init`` cannot leave them
    out, so this builds the node from Ray's private ``Node``/``RayParams`` (the way
    ``ray.cluster_utils.Cluster`` does). Raises ``ImportError``, ``AttributeError`` or
    ``TypeError`` if a Ray version changed them; the caller then falls back to ``ray.init``.
    Worker output is not forwarded to the driver (that is the log monitor's job); it stays in
    the session's log folder (``/tmp/ray/session_latest/logs``).
    """
    from ray._private.node import Node
    from ray._private.parameter import RayParams

    starting: list[Any] = []  # the node while its constructor runs, to clean up if it fails

    class _LeanHeadNode(Node):
        def start_head_processes(self) -> None:
            starting.append(self)
            super().start_head_processes()

        def start_api_server(self, **kwargs: Any) -> None:
            """No dashboard server: nothing here serves HTTP, and ``ray.init`` would wait for it."""

        def start_ray_processes(self) -> None:
            """Start the raylet, then wait for it to register in short steps: ``Node`` asks the
            GCS next through a call that sleeps a whole second when the raylet is not there yet
            (it registers once its agents are up, ~1 s), which costs ~0.7 s on average."""
            super().start_ray_processes()
            _wait_for_registration(self.gcs_address, self.node_id)

    params = RayParams(
        num_cpus=num_cpus,
        object_store_memory=object_store_bytes,
        include_dashboard=False,
        no_monitor=True,
        include_log_monitor=False,
        env_vars=dict(WORKER_ENV),  # the raylet's environment, inherited by every worker
        # Any free port for the dashboard agent's HTTP server: with the fixed default (52365)
        # taken, e.g. by another Ray on this machine, it retries for ~3 s and the raylet waits.
        dashboard_agent_listen_port=0,
        min_worker_port=0,
        max_worker_port=0,
        _system_config=dict(CONNECT_RETRY),
    )
    try:
        # spawn_reaper: the daemons die with this process (kernel fate sharing) if it dies unclean.
        return _LeanHeadNode(params, head=True, shutdown_at_exit=False, spawn_reaper=True)
    except BaseException:
        for node in starting:  # e.g. the raylet never registered: stop what did start
            with contextlib.suppress(Exception):
                stop_node(node)
        raise


def lower_this_threads_priority(increment: int) -> None:
    """Make the calling thread, and every process it starts from now on, ``increment`` nicer.

    On Linux niceness belongs to a thread and a child inherits its creator's. Elsewhere a thread
    id is not a valid ``setpriority`` target, so this does nothing there (nor when refused).
    """
    if sys.platform != "linux":
        return
    thread = threading.get_native_id()
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, thread, os.getpriority(os.PRIO_PROCESS, thread) + increment)


def _warm_up(name: str) -> int:
    """Ray task: pay a worker's one-time costs ahead of the shard tasks: import the task module
    and build one Arrow array from a Python list, the first of which imports pandas in any
    process that has pyarrow (0.2 s; nearly every shard task builds such arrays).

    Paid here, before Ray counts as ready, the first shard on each worker runs at full speed,
    and the cost overlaps the shards this process runs meanwhile. Measured in alternating runs
    on 2 cores: 32K rows 2.54-2.60 s instead of 2.86-2.96 s (the last stages' few shards do not
    wait for a worker that is still importing); 200K rows ~0.1 s slower (5.97-6.46 s
    against 5.84-6.23 s: Ray is ready ~0.2 s later)."""
    import pyarrow as pa

    importlib.import_module(name)
    pa.array(["warm"])
    return os.getpid()


def warm_workers(module: str, workers: int) -> None:
    """Have ``workers`` Ray workers warm up (:func:`_warm_up`) at once, and wait for them."""
    import ray

    warm = ray.remote(num_cpus=1)(_warm_up)
    ray.get([warm.remote(module) for _ in range(workers)])


@functools.cache
def quiet_thread_warning() -> None:
    """Drop Ray's warning that a driver connected outside the main thread has no SIGTERM handler
    of Ray's: the background start does that on purpose (SIGTERM keeps its default, or Dagster's,
    handler). Once per process."""
    logging.getLogger("ray._private.worker").addFilter(
        lambda record: "SIGTERM handler is not set" not in record.getMessage()
    )


def _wait_for_registration(gcs_address: str, node_id: str, timeout_s: float = 30.0) -> None:
    """Poll the GCS every 20 ms until the node ``node_id`` (hex) is registered alive.

    Only a shortcut: on any error or at the deadline it returns, and Ray's own wait takes over.
    """
    try:
        from ray._private.services import _get_gcs_client_options
        from ray._private.state import GlobalState

        state = GlobalState()
        state._initialize_global_state(_get_gcs_client_options(gcs_address))
    except Exception:
        return
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if any(n.get("NodeID") == node_id and n.get("Alive") for n in state.node_table()):
                return
            time.sleep(0.02)
    except Exception:
        return
    finally:
        with contextlib.suppress(Exception):
            state.disconnect()


def stop_node(node: Any) -> None:
    """Stop every process of a node started by :func:`_start_lean_node` (what ``ray.shutdown``
    does for a node ``ray.init`` started)."""
    with contextlib.suppress(Exception):
        node.destroy_external_storage()
    node.kill_all_processes(check_alive=False, allow_graceful=True)


def start_local_ray(num_cpus: int, object_store_bytes: int, log: Logger) -> Any:
    """Start a lean local Ray and connect to it; plain ``ray.init`` if that is impossible.

    Returns the node to stop with :func:`stop_node` after ``ray.shutdown``, or None if
    ``ray.init`` started Ray (``ray.shutdown`` then stops it all)."""
    import ray

    try:
        node = _start_lean_node(num_cpus, object_store_bytes)
    except (ImportError, AttributeError, TypeError) as exc:
        log.warning(f"lean Ray start unavailable ({exc!r}); using ray.init")
        # Workers inherit the environment of the raylet, which inherits it from here. "local":
        # a Ray of this run's own, even when another cluster runs on the machine (without it
        # ray.init joins that one, and refuses num_cpus).
        with _environ(WORKER_ENV):
            ray.init(
                address="local",
                num_cpus=num_cpus,
                object_store_memory=object_store_bytes,
                include_dashboard=False,
                logging_level="WARNING",
                _system_config=dict(CONNECT_RETRY),
            )
        return None
    try:
        ray.init(address=node.address, logging_level="WARNING", log_to_driver=False)
    except BaseException:
        stop_node(node)
        raise
    return node
