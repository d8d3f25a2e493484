"""Run tasks as Ray tasks: on a local Ray started once per run, or on an existing cluster.

Ray costs seconds and a few hundred megabytes to start, so the backend starts it lazily on the
first ``run`` and keeps it for the backend's life (one Dagster run), then shuts down only what it
started. Each task is one remote call per *shard*; the worker reads and writes Parquet itself, so
only task specs and small stats cross the object store.

A local Ray is started lean (:func:`_start_lean_node`): the GCS, the raylet (with the two agents
it cannot run without) and the workers, but not the dashboard server, the autoscaler monitor nor
the log monitor that ``ray.init`` adds. On two cores those three Python processes cost ~1.5 s of
start-up (``ray.init`` waits for the dashboard server) and ~170 MB of memory, and a run of shard
tasks on one machine uses none of them. The worker environment (no extra threads per worker)
reaches the workers through the raylet's environment, which they inherit: asking for it as a
``runtime_env`` instead makes Ray discard its prestarted workers and start new ones for that
environment (~1.5 s more before the first task). On an existing cluster the ``runtime_env`` is the
only way to reach remote workers, so it stays there.

A local Ray starts in a background thread, and until it is ready the run's own process works
through the shards itself (:meth:`RayBackend.run`), then hands the rest to Ray: on two cores the
start takes 2-3 s, as long as a 30K-row job takes in one process, and waiting for it made Ray the
slowest backend for small inputs. Shards run that way get what the in-process backend gives them
(no timeout, no process of their own); a shard that raises there is left to Ray, which retries it.
``work_while_starting=False`` waits for Ray instead and sends every shard to it.

On a cluster, every node must have this package installed and see the warehouse path (a shared
filesystem); see the README.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from llm_assets.compute.base import (
    ComputeBackend,
    Heartbeat,
    OnResult,
    R,
    ShardTaskFailed,
    T,
    describe_error,
    task_key,
)

RAY_ADDRESS_ENV = "RAY_ADDRESS"
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


CLUSTER_CHECK_S = 5.0
"""On a cluster, how long ``ray.wait`` may return nothing before the backend checks that the
cluster still answers (:meth:`RayBackend._check_cluster`). Ray itself notices a stopped cluster
only after 60 s of reconnecting at full CPU, and then ends the whole process."""

# What the shard wrapper returns, with the shard's result, its error or the node's mismatch.
_DONE, _RAISED, _OTHER_CODE = 0, 1, 2


def _make_shard_call() -> tuple[Callable[..., tuple[int, Any]], Callable[[Any], str]]:
    """Build the remote function that runs one shard task in a Ray worker, and the function
    that computes a package's code identity.

    Both are nested functions on purpose: cloudpickle then ships their *code* to the worker
    (a module-level function it ships by name, and the worker runs its own installed copy). So
    the check below runs on a node whose llm_assets is older or newer than the driver's, even
    one that predates the check, and before anything of llm_assets is unpickled there (the
    shard function and task travel as bytes, loaded after the check).
    """

    def identity_of(package: Any) -> str:
        """SHA-256 over what a wheel of the package holds: its ``.py`` files and its ``.txt``
        data (``lib/flagged_words_en.txt``, read by the flagged-words filter), in sorted
        relative-path order, each as path, length and bytes. Not other files an editable
        checkout may hold (editor backups, ``__pycache__``)."""
        import hashlib
        import os

        file = getattr(package, "__file__", None)
        root = os.path.dirname(file) if file else next(iter(package.__path__))
        paths = []
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            paths += [os.path.join(folder, f) for f in files if f.endswith((".py", ".txt"))]
        digest = hashlib.sha256()
        for relative in sorted(os.path.relpath(p, root).replace(os.sep, "/") for p in paths):
            with open(os.path.join(root, relative), "rb") as handle:
                data = handle.read()
            digest.update(relative.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
        return digest.hexdigest()

    def other_code(expected: str) -> str | None:
        """None if this worker's llm_assets has the driver's identity ``expected``, else why not.

        The worker's identity is computed once per worker process (kept on the package module)."""
        import socket

        try:
            import ray

            node = f"node {ray.get_runtime_context().get_node_id()} ({socket.gethostname()})"
        except Exception:
            node = f"node {socket.gethostname()}"
        try:
            import llm_assets as package
        except Exception as exc:
            return (
                f"llm_assets cannot be imported on Ray {node} ({type(exc).__name__}: {exc}); "
                "install the same llm_assets version as the driver's on every node of the Ray "
                "cluster"
            )
        mine = getattr(package, "_ray_code_identity", None)
        if mine is None:
            mine = identity_of(package)
            package._ray_code_identity = mine
        if mine == expected:
            return None
        where = getattr(package, "__file__", None) or next(iter(package.__path__))
        return (
            f"Ray {node} runs other llm_assets code than this run's driver: its package at "
            f"{where} has code identity {mine[:16]}, the driver's is {expected[:16]} (SHA-256 "
            "over the package's files). Its shards would be computed with that code but "
            "recorded under the driver's code version, and reused by later runs; nothing was "
            "computed there. Install the same llm_assets version on every node of the Ray "
            "cluster (and the driver), then run again"
        )

    def call(payload: bytes, expected: str | None) -> tuple[int, Any]:
        """One shard task in a Ray worker: ``(_DONE, result)``, ``(_RAISED, error)`` if the
        task raised (the driver retries it, logging the attempt), or ``(_OTHER_CODE, why)`` if
        this node's llm_assets is not the driver's (``expected``; None: not checked, for a local
        Ray, whose workers run this machine's installed package).

        Unlike a multiprocess worker, a Ray worker keeps the memory a shard freed (Arrow's pool
        and glibc hold it) for the next shard instead of handing it back to the OS after each
        one: the next shard then reuses those pages instead of faulting in fresh zeroed ones.
        Ray's memory budget has the room (peak 920-980 MB over all processes at 200K-1M rows on
        2 cores, target 1.5 GB, against 860-880 MB with the give-back); the multiprocess
        backend's 600 MB does not. Still bounded: a worker's heap is its largest shard's,
        whatever the corpus size. 200K rows, alternating: 6.64-7.09 s instead of 7.14-7.62 s (4
        pairs, each faster); 1M: 25.4 s, 26.7 s.
        """
        import pickle
        import traceback

        if expected is not None:
            why = other_code(expected)
            if why is not None:
                return 2, why  # _OTHER_CODE
        try:
            fn, task = pickle.loads(payload)
            return 0, fn(task)  # _DONE
        except Exception as exc:
            frames = traceback.extract_tb(exc.__traceback__)
            where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
            return 1, f"{type(exc).__name__}: {exc}{where}"  # _RAISED

    # What Ray shows as the worker's process title (``ray::shard_task``) while it runs a shard.
    # No module attribute has this name, so cloudpickle still ships the function by value.
    call.__name__ = call.__qualname__ = "shard_task"
    return call, identity_of


_shard_call, _identity_of = _make_shard_call()


@functools.cache
def code_identity() -> str:
    """This process's llm_assets code identity (see :func:`_make_shard_call`), computed once."""
    import llm_assets

    return _identity_of(llm_assets)


class RayCodeMismatchError(RuntimeError):
    """A node of the Ray cluster runs another llm_assets than the driver (or none)."""


_RETRIED_RAY_ERRORS = ("WorkerCrashedError", "NodeDiedError", "OutOfMemoryError", "RayTaskError")
"""The Ray errors (in ``ray.exceptions``) that end one attempt: the worker or its node died
(e.g. killed for memory), or the wrapper itself raised. The driver tries the shard again, up to
``max_attempts``. Any other Ray error (the driver's own raylet died, the task was cancelled, its
runtime environment failed) is final: Ray would not have retried it either."""


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
    with :func:`_stop_node`). This is what ``ray.init`` does for a local start, minus the
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
                _stop_node(node)
        raise


def _lower_this_threads_priority(increment: int) -> None:
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
    on 2 cores: 32K rows 2.54-2.60 s instead of 2.86-2.96 s (the last stages' few shards no
    longer wait for a worker that is still importing); 200K rows ~0.1 s slower (5.97-6.46 s
    against 5.84-6.23 s: Ray is ready ~0.2 s later)."""
    import pyarrow as pa

    importlib.import_module(name)
    pa.array(["warm"])
    return os.getpid()


def _warm_workers(module: str, workers: int) -> None:
    """Have ``workers`` Ray workers warm up (:func:`_warm_up`) at once, and wait for them."""
    import ray

    warm = ray.remote(num_cpus=1)(_warm_up)
    ray.get([warm.remote(module) for _ in range(workers)])


@functools.cache
def _quiet_thread_warning() -> None:
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


def _stop_node(node: Any) -> None:
    """Stop every process of a node started by :func:`_start_lean_node` (what ``ray.shutdown``
    does for a node ``ray.init`` started)."""
    with contextlib.suppress(Exception):
        node.destroy_external_storage()
    node.kill_all_processes(check_alive=False, allow_graceful=True)


class RayClusterError(ConnectionError):
    """The Ray cluster named by ``ray_address`` is not there, is not a Ray cluster, or cannot
    run a task."""


PROBE_TIMEOUT_S = 5.0
"""How long the address check waits to connect and for the server's first HTTP/2 frame."""
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_HTTP2_SETTINGS = 0x4


def probe_cluster_address(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail fast, naming the address, unless a gRPC server (a Ray GCS or Ray Client server)
    answers at ``address`` (``host:port`` or ``ray://host:port``; ``auto`` and other forms are
    left to Ray). Ray itself waits ~14 minutes for a port where nothing listens, and as long for
    one where another server does (an HTTP server, a database): a typo in ``ray_address`` hung
    the run. The check connects and sends the HTTP/2 client preface; a gRPC server answers with
    a SETTINGS frame, anything else with something else or nothing. With Ray's TLS on
    (``RAY_USE_TLS``) the server speaks TLS first, so only the connection is checked."""
    import socket

    target = address.removeprefix("ray://")
    host, sep, port_text = target.rpartition(":")
    if not sep or not port_text.isdigit() or not host:
        return  # "auto", "local", a bare host: Ray resolves those itself, quickly
    host = host.strip("[]")
    tls = os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true")  # Ray's own rule
    try:
        with socket.create_connection((host, int(port_text)), timeout=timeout_s) as sock:
            if tls:
                return
            sock.settimeout(timeout_s)
            sock.sendall(_HTTP2_PREFACE + bytes([0, 0, 0, _HTTP2_SETTINGS, 0, 0, 0, 0, 0]))
            head = b""
            while len(head) < 9:
                chunk = sock.recv(9 - len(head))
                if not chunk:
                    break
                head += chunk
    except OSError as exc:
        raise RayClusterError(
            f"no Ray cluster answers at ray_address {address!r}: {exc.strerror or exc}; start one "
            "(ray start --head) or correct the address (the head's GCS port, 6379 by default)"
        ) from exc
    if len(head) < 9 or head[3] != _HTTP2_SETTINGS:
        raise RayClusterError(
            f"ray_address {address!r} is not a Ray cluster: the server there does not speak "
            f"gRPC (it answered {head[:40]!r}); give the head's GCS address (port 6379 by "
            "default) or a Ray Client address (ray://host:10001)"
        )


def _auth_message(address: str) -> str:
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "token":
        return (
            f"the Ray cluster at {address} refused this run's authentication token: the token "
            "this process has (RAY_AUTH_TOKEN, else the file RAY_AUTH_TOKEN_PATH names, else "
            "~/.ray/auth_token) is missing or is not the cluster's; give it the token of the "
            "cluster's head node (`ray get-auth-token` there prints it)"
        )
    return (
        f"the Ray cluster at {address} requires token authentication: set RAY_AUTH_MODE=token "
        "in the run's environment, with the cluster's token in ~/.ray/auth_token, the file "
        "RAY_AUTH_TOKEN_PATH names, or RAY_AUTH_TOKEN (`ray get-auth-token` on the head node "
        "prints it; `ray start` turns token authentication on when the head has a token, e.g. "
        "~/.ray/auth_token, unless RAY_AUTH_MODE=disabled)"
    )


def _is_auth_error(exc: BaseException) -> bool:
    """Whether Ray's connection error comes from a refused token (Ray formats the
    ``AuthenticationError`` into a RuntimeError's text, so the class is not always there)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__name__ == "AuthenticationError" or any(
            marker in str(current) for marker in ("InvalidAuthToken", "AuthenticationError")
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


def check_cluster_authentication(address: str) -> None:
    """Fail at once, saying what to set, if the GCS at ``address`` (``host:port``) refuses this
    process's authentication. ``ray.init`` would retry for ~20 s, logging a warning a second,
    then raise a bare ``ConnectionError``. One GCS client call (~10 ms); any other error is left
    to ``ray.init``, and so are ``ray://`` addresses."""
    host, sep, port_text = address.rpartition(":")
    if address.startswith("ray://") or not sep or not host or not port_text.isdigit():
        return
    try:
        from ray._raylet import GcsClient
        from ray.exceptions import AuthenticationError
    except ImportError:
        return
    try:
        GcsClient(address=address)
    except AuthenticationError as exc:
        raise RayClusterError(_auth_message(address)) from exc
    except Exception:
        return


class RayBackend(ComputeBackend):
    """Ray tasks with a per-task timeout, retried by the driver (not by Ray, so that every
    failed attempt is counted and logged): a task that raised, whose worker or node died, or
    that timed out runs again, up to ``max_attempts`` in all. On a cluster, each task first
    checks that its node runs the driver's llm_assets (:func:`_make_shard_call`), and a cluster
    that stops answering fails the run within seconds (:meth:`_check_cluster`)."""

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
        self._remote = ray.remote(num_cpus=1, max_retries=0, retry_exceptions=False)(_shard_call)
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
            probe_cluster_address(self.address)
            check_cluster_authentication(self.address)
            try:
                ray.init(
                    address=self.address,
                    runtime_env={"env_vars": WORKER_ENV},
                    logging_level="WARNING",
                )
            except ConnectionError as exc:
                if _is_auth_error(exc):
                    raise RayClusterError(_auth_message(self.address)) from exc
                raise
            cpus = ray.cluster_resources().get("CPU", 0)
            if cpus < 1:
                resources = ray.cluster_resources()
                ray.shutdown()
                raise RayClusterError(
                    f"the Ray cluster at {self.address} has {cpus:g} CPUs (resources: "
                    f"{resources}): no shard task could ever be scheduled; give its nodes CPUs "
                    "(ray start --num-cpus N) or leave ray_address empty for a local Ray"
                )
            self._cluster_cpus = int(cpus)
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
        ray = sys.modules.get("ray")  # importing Ray costs ~0.5 s: that is the thread's job too
        return ray is None or not ray.is_initialized()

    def _begin_background_start(self, warm_module: str) -> None:
        """Start the local Ray (import, node, connect) in a thread; :meth:`_ensure_started`
        waits for it.

        Ray counts as ready once every worker has imported ``warm_module`` (the task function's
        module: pyarrow, the kernels) and pandas (:func:`_warm_up`), ~0.7 s per worker: until
        then this process is faster.

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
            _lower_this_threads_priority(BACKGROUND_NICE)
            try:
                import ray

                _quiet_thread_warning()
                if not ray.is_initialized():
                    self._start_local()
                    self._started_here = True
                _warm_workers(warm_module, self.num_cpus)
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
        errors: list[str],
    ) -> None:
        """Run tasks here, in order, until the background start ends; fill ``results``.

        A task that raises is left for Ray (its own process, its retries), not retried here;
        that attempt counts in ``used`` (its error in ``errors``). (A task that crashes this
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
                errors[index] = describe_error(exc)
                self.log.warning(
                    f"shard {task_key(task)} failed in this process while Ray started "
                    f"({describe_error(exc)}); Ray will run it"
                )
                continue
            self.shards_run_in_driver += 1
            if on_result is not None:
                on_result(index, results[index])

    def _start_local(self) -> None:
        """Start a lean local Ray and connect to it; plain ``ray.init`` if that is impossible."""
        import ray

        object_store_bytes = self.object_store_mb * 1024 * 1024
        try:
            node = _start_lean_node(self.num_cpus, object_store_bytes)
        except (ImportError, AttributeError, TypeError) as exc:
            self.log.warning(f"lean Ray start unavailable ({exc!r}); using ray.init")
            # Workers inherit the environment of the raylet, which inherits it from here.
            with _environ(WORKER_ENV):
                ray.init(
                    num_cpus=self.num_cpus,
                    object_store_memory=object_store_bytes,
                    include_dashboard=False,
                    logging_level="WARNING",
                    _system_config=dict(CONNECT_RETRY),
                )
            return
        self._node = node
        try:
            ray.init(address=node.address, logging_level="WARNING", log_to_driver=False)
        except BaseException:
            self._node = None
            _stop_node(node)
            raise

    def run(
        self,
        fn: Callable[[T], R],
        tasks: Sequence[T],
        on_result: OnResult | None = None,
    ) -> list[R]:
        import ray
        from ray import cloudpickle
        from ray.exceptions import RayError

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
        errors = [""] * len(tasks)
        if self._remote is None and self._starter is not None:
            self._run_in_driver_while_starting(fn, tasks, on_result, results, used, errors)
            if len(results) == len(tasks):
                return [results[i] for i in range(len(tasks))]
        remote = self._ensure_started()
        # Nodes of a cluster may run another llm_assets: each task checks its node's against
        # this one (a local Ray's workers run this machine's installed package: not checked).
        expected = code_identity() if self.address else None
        slots = max(1, self.parallelism)
        retried = tuple(getattr(ray.exceptions, name) for name in _RETRIED_RAY_ERRORS)
        # Two tasks per CPU in flight: a worker that finishes a shard starts the next one at once
        # instead of waiting for the driver to see the result, run ``on_result`` and submit. More
        # would only hold references. Ray runs a node's tasks in submission order, so the clock
        # of a queued task starts when an earlier one finishes: the timeout measures running time.
        queue = deque(i for i in range(len(tasks)) if i not in results)
        in_flight: dict[Any, int] = {}
        running_since: dict[Any, float] = {}
        waiting: deque[Any] = deque()
        last_news = time.monotonic()
        beat = Heartbeat(self.log, len(tasks), self.heartbeat_s)

        def attempt_failed(index: int, error: str) -> None:
            """Count a failed attempt of shard ``index``: retry it, or fail the run."""
            used[index] += 1
            errors[index] = error
            key = task_key(tasks[index])
            if used[index] >= self.max_attempts:
                self._cancel(in_flight)
                raise ShardTaskFailed(key, used[index], error)
            self.log.warning(
                f"shard {key}: attempt {used[index]} of {self.max_attempts} failed ({error}); "
                "retrying"
            )
            queue.appendleft(index)

        while queue or in_flight:
            while queue and len(in_flight) < 2 * slots:
                index = queue.popleft()
                payload = cloudpickle.dumps((fn, tasks[index]))
                ref = remote.remote(payload, expected)
                in_flight[ref] = index
                waiting.append(ref)
            now = time.monotonic()
            while waiting and len(running_since) < slots:
                running_since[waiting.popleft()] = now
            done, _ = ray.wait(list(in_flight), num_returns=1, timeout=0.5)
            if done:
                last_news = time.monotonic()
            elif self.address and time.monotonic() - last_news >= CLUSTER_CHECK_S:
                self._check_cluster()
                last_news = time.monotonic()
            for ref in done:
                index = in_flight.pop(ref)
                if running_since.pop(ref, None) is None:
                    waiting.remove(ref)
                try:
                    status, value = ray.get(ref)
                except RayError as exc:
                    if self.address:  # a node or raylet that died: is it the whole cluster?
                        self._check_cluster()
                    cause = getattr(exc, "cause", None) or exc
                    error = f"{type(cause).__name__}: {cause}"
                    if isinstance(exc, retried):
                        attempt_failed(index, error)
                        continue
                    self._cancel(in_flight)
                    used[index] += 1
                    raise ShardTaskFailed(
                        task_key(tasks[index]), used[index], f"Ray gave up, no retry: {error}"
                    ) from exc
                if status == _OTHER_CODE:
                    self._cancel(in_flight)
                    raise RayCodeMismatchError(f"shard {task_key(tasks[index])}: {value}")
                if status == _RAISED:
                    attempt_failed(index, value)
                    continue
                results[index] = value
                beat.finished()
                if on_result is not None:
                    on_result(index, value)
            beat.tick(
                len(results),
                {task_key(tasks[in_flight[r]]): began for r, began in running_since.items()},
            )
            if self.task_timeout_s is not None:
                now = time.monotonic()
                late = [
                    r for r, began in running_since.items() if now - began > self.task_timeout_s
                ]
                for ref in late:
                    index = in_flight.pop(ref)
                    del running_since[ref]
                    ray.cancel(ref, force=True)  # kills the worker running it
                    attempt_failed(index, f"timed out after {self.task_timeout_s:g} s")
        return [results[i] for i in range(len(tasks))]

    def _check_cluster(self) -> None:
        """Raise :class:`RayClusterError` unless the cluster at ``self.address`` still answers
        (:func:`probe_cluster_address`: a connect and one gRPC frame, ~1 ms)."""
        try:
            probe_cluster_address(self.address or "")
        except RayClusterError as exc:
            reason = exc.__cause__ or exc
            raise RayClusterError(
                f"the Ray cluster at {self.address} stopped answering "
                f"({getattr(reason, 'strerror', None) or reason}); shards already finished are "
                "kept: start the cluster again and rerun"
            ) from exc

    @staticmethod
    def _cancel(in_flight: dict[Any, int]) -> None:
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
                _stop_node(self._node)
                self._node = None
            self._started_here = False
            self._cluster_cpus = 0
            atexit.unregister(self.close)
        if self._starter is not None:
            self._release.set()
            self._starter.join()
            self._starter = None
        self._remote = None
