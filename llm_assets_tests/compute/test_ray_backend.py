"""The Ray backend on a real local Ray: what it starts, what workers see, what close() stops.

Each test starts Ray (seconds), so there are few and they check several things at once. Tasks are
standard-library functions (``os.getenv``, ``time.sleep``): Ray pickles them by name and every
worker can import them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from llm_assets.compute.base import ShardTaskFailed
from llm_assets.compute.ray_backend import RayBackend
from llm_assets.compute.ray_dispatch import CLUSTER_CHECK_S
from llm_assets.compute.ray_local import BACKGROUND_NICE, CONNECT_RETRY, WORKER_ENV
from llm_assets.compute.testing import ProbeTask, run_probe

pytestmark = pytest.mark.slow

# Python daemons that ray.init starts and a lean local start leaves out (script names).
_LEFT_OUT = ("dashboard/dashboard.py", "autoscaler/_private/monitor.py", "log_monitor.py")


def _descendants() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def test_local_ray_is_lean_passes_the_environment_times_out_and_stops_all(monkeypatch):
    import ray

    for name in WORKER_ENV:  # the driver's own values must not be what the workers report
        monkeypatch.delenv(name, raising=False)
    before = {p.pid for p in _descendants()}  # e.g. a resource tracker left by other tests
    backend = RayBackend(num_cpus=2, task_timeout_s=2.0, max_attempts=1, work_while_starting=False)
    try:
        names = sorted(WORKER_ENV)
        assert backend.run(os.getenv, names) == [WORKER_ENV[n] for n in names]
        assert backend._node is not None, "the lean start fell back to ray.init"
        # Not the fixed default port, which another Ray on the machine may hold (3 s of retries).
        assert backend._node.dashboard_agent_listen_port not in (0, 52365)
        started = [p for p in _descendants() if p.pid not in before]
        commands = [_cmdline(p) for p in started]
        assert not [c for c in commands if any(script in c for script in _LEFT_OUT)]
        assert any("raylet" in c for c in commands)
        # Ray's own connects retry every 20 ms, not every second: the GCS got the settings (it
        # hands them to the raylet).
        (gcs,) = [c for c in commands if "gcs_server" in c.split(" ")[0]]
        (config,) = [a.split("=", 1)[1] for a in gcs.split(" ") if a.startswith("--config_list=")]
        assert json.loads(base64.b64decode(config)).items() >= CONNECT_RETRY.items()
        assert all(os.environ.get(n) is None for n in WORKER_ENV), "driver environment changed"

        # Four 1.5 s tasks on two CPUs: the two queued behind the first take 3 s from submission,
        # yet run 1.5 s each, which is all the timeout measures.
        assert backend.run(time.sleep, [1.5] * 4) == [None] * 4
        with pytest.raises(ShardTaskFailed, match="timed out after 2 s"):
            backend.run(time.sleep, [60])
    finally:
        backend.close()
    assert not ray.is_initialized()
    _, alive = psutil.wait_procs(started, timeout=10)
    assert not alive, f"still running after close(): {[_cmdline(p) for p in alive]}"
    backend.close()  # twice is fine


def test_existing_cluster_gets_the_environment_and_is_left_running(monkeypatch):
    import ray
    from ray.cluster_utils import Cluster

    for name in WORKER_ENV:  # the cluster must not inherit the values from this process
        monkeypatch.delenv(name, raising=False)
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    try:
        raylet = cluster.head_node.all_processes["raylet"][0].process
        backend = RayBackend(address=cluster.address)
        try:
            names = sorted(WORKER_ENV)
            # Not this process's environment: the cluster's workers get it from the runtime_env.
            assert backend.run(os.getenv, names) == [WORKER_ENV[n] for n in names]
            assert backend.parallelism == 1
        finally:
            backend.close()
        assert not ray.is_initialized()
        assert raylet.poll() is None, "close() stopped a cluster it did not start"
    finally:
        cluster.shutdown()


def test_plain_ray_init_fallback_still_gives_workers_their_environment(monkeypatch):
    """If Ray's private node API changes, the backend falls back to ``ray.init`` (full start)."""
    import ray

    from llm_assets.compute import ray_local

    def unavailable(*args, **kwargs):
        raise AttributeError("no Node here")

    monkeypatch.setattr(ray_local, "_start_lean_node", unavailable)
    for name in WORKER_ENV:
        monkeypatch.delenv(name, raising=False)
    backend = RayBackend(num_cpus=1, work_while_starting=False)
    try:
        names = sorted(WORKER_ENV)
        assert backend.run(os.getenv, names) == [WORKER_ENV[n] for n in names]
        assert backend._node is None
        assert all(os.environ.get(n) is None for n in WORKER_ENV), "driver environment changed"
    finally:
        backend.close()
    assert not ray.is_initialized()


def test_a_local_start_that_fails_midway_leaves_no_process(monkeypatch):
    import ray

    from llm_assets.compute import ray_local

    def never_registers(*args, **kwargs):
        raise RuntimeError("the raylet never registered")

    monkeypatch.setattr(ray_local, "_wait_for_registration", never_registers)
    before = {p.pid for p in _descendants()}
    backend = RayBackend(num_cpus=1, work_while_starting=False)
    with pytest.raises(RuntimeError, match="never registered"):
        backend.run(os.getenv, ["HOME"])
    assert not ray.is_initialized()
    _, alive = psutil.wait_procs([p for p in _descendants() if p.pid not in before], timeout=10)
    assert not alive, f"left running: {[_cmdline(p) for p in alive]}"
    backend.close()


def test_shards_run_here_while_ray_starts_then_in_ray_workers(tmp_path):
    """The default local start: the driver works through shards in order until Ray is up, then
    Ray runs the rest. A shard that raises here is not retried here but left to Ray."""
    me = os.getpid()
    backend = RayBackend(num_cpus=2, max_attempts=2)
    flaky = ProbeTask("flaky", 0, str(tmp_path), fail_times=1, mode="raise")
    tasks = [flaky] + [ProbeTask(f"t{i}", i, sleep_s=0.1) for i in range(1, 150)]
    seen: list[int] = []
    before = {p.pid for p in _descendants()}
    try:
        results = backend.run(run_probe, tasks, lambda i, r: seen.append(i))
        here = backend.shards_run_in_driver
        later = backend.run(run_probe, [ProbeTask(f"u{i}", i) for i in range(4)])
        # Ray's processes run nicer than this one (their start must not slow the shards run
        # here): the daemons by BACKGROUND_NICE, the workers by Ray's own worker_niceness too.
        started = [p for p in _descendants() if p.pid not in before]
        nice = {_cmdline(p).split()[0].rsplit("/", 1)[-1]: p.nice() for p in started}
        assert nice["raylet"] == nice["gcs_server"] == os.nice(0) + BACKGROUND_NICE, nice
        assert min(nice.values()) >= os.nice(0) + BACKGROUND_NICE, nice
    finally:
        backend.close()
    assert [r["value"] for r in results] == [i * i for i in range(150)]
    assert sorted(seen) == list(range(150))
    pids = [r["pid"] for r in results]
    assert 0 < here < 149, "Ray took 15 s to start, or no shard ran here"
    assert pids[1 : here + 1] == [me] * here  # the first shards, in order, here
    assert me not in pids[here + 1 :]
    assert pids[0] != me and len(list(tmp_path.glob("flaky.*"))) == 2  # raised here, then Ray
    assert me not in {r["pid"] for r in later}
    assert backend.shards_run_in_driver == here
    assert backend.ready_seconds is not None and backend.ready_seconds > 0.3
    assert not ray_is_initialized()


def test_close_while_ray_is_still_starting_stops_everything():
    before = {p.pid for p in _descendants()}
    backend = RayBackend(num_cpus=1)
    assert backend.run(run_probe, [ProbeTask("quick", 3)]) == [{"value": 9, "pid": os.getpid()}]
    backend.close()  # Ray is still starting: close waits for it, then stops it
    assert not ray_is_initialized()
    _, alive = psutil.wait_procs([p for p in _descendants() if p.pid not in before], timeout=10)
    assert not alive, f"left running: {[_cmdline(p) for p in alive]}"


def test_a_background_start_that_fails_is_raised_by_the_run_waiting_for_it(monkeypatch):
    from llm_assets.compute import ray_local

    def never_registers(*args, **kwargs):
        raise RuntimeError("the raylet never registered")

    monkeypatch.setattr(ray_local, "_wait_for_registration", never_registers)
    before = {p.pid for p in _descendants()}
    backend = RayBackend(num_cpus=1)
    tasks = [ProbeTask(f"t{i}", i, sleep_s=0.1) for i in range(600)]
    with pytest.raises(RuntimeError, match="never registered"):
        backend.run(run_probe, tasks)
    assert 0 < backend.shards_run_in_driver < 600
    assert not ray_is_initialized()
    _, alive = psutil.wait_procs([p for p in _descendants() if p.pid not in before], timeout=10)
    assert not alive, f"left running: {[_cmdline(p) for p in alive]}"
    backend.close()


def ray_is_initialized() -> bool:
    import ray

    return ray.is_initialized()


def test_a_shard_that_times_out_is_retried_and_attempts_are_counted(tmp_path):
    """A Ray shard over ``task_timeout_s`` is retried, as multiprocess retries it (the setting
    promises it), and a shard that raised in the driver while Ray started counts those attempts:
    max_attempts in all, not max_attempts more in Ray."""
    backend = RayBackend(num_cpus=2, task_timeout_s=3.0, max_attempts=2, work_while_starting=False)
    try:
        slow_once = ProbeTask("slow-once", 2, str(tmp_path), fail_times=1, mode="hang")
        results = backend.run(run_probe, [slow_once, ProbeTask("fine", 3)])
        assert [r["value"] for r in results] == [4, 9]
        assert len(list(tmp_path.glob("slow-once.*"))) == 2
        always = ProbeTask("always-slow", 1, str(tmp_path), fail_times=9, mode="hang")
        with pytest.raises(ShardTaskFailed, match=r"always-slow.*timed out after 3 s") as info:
            backend.run(run_probe, [always])
        assert info.value.attempts == 2 and len(list(tmp_path.glob("always-slow.*"))) == 2
    finally:
        backend.close()
    starting = RayBackend(num_cpus=1, max_attempts=2)  # the doomed shard runs here first
    try:
        doomed = ProbeTask("doomed", 1, str(tmp_path), fail_times=9, mode="raise")
        with pytest.raises(ShardTaskFailed, match="doomed") as info:
            starting.run(run_probe, [doomed])
        assert info.value.attempts == 2 and len(list(tmp_path.glob("doomed.*"))) == 2
    finally:
        starting.close()
    assert not ray_is_initialized()


def test_a_ray_address_with_no_cluster_behind_it_fails_in_seconds():
    """A port where nothing listens, or where another kind of server does, fails in seconds
    (``ray.init`` alone waits ~14 minutes)."""
    import http.server
    import socket
    import threading

    from llm_assets.compute.ray_cluster import RayClusterError

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cases = {
            f"127.0.0.1:{port}": "no Ray cluster answers",
            f"ray://127.0.0.1:{port}": "no Ray cluster answers",
            f"127.0.0.1:{server.server_address[1]}": "is not a Ray cluster",
        }
        for address, message in cases.items():
            began = time.monotonic()
            with pytest.raises(RayClusterError, match=message) as info:
                RayBackend(address=address).run(os.getenv, ["HOME"])
            assert time.monotonic() - began < 10
            assert address in str(info.value)
    finally:
        server.shutdown()
    assert not ray_is_initialized()


def test_a_cluster_without_cpus_is_refused_naming_it():
    """A cluster with no CPU is refused naming it, rather than waiting for ever while Ray's
    autoscaler repeats that no node can fulfil {'CPU': 1}."""
    from ray.cluster_utils import Cluster

    from llm_assets.compute.ray_cluster import RayClusterError

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False}
    )
    try:
        with pytest.raises(RayClusterError, match="has 0 CPUs"):
            RayBackend(address=cluster.address).run(os.getenv, ["HOME"])
        assert not ray_is_initialized()
    finally:
        cluster.shutdown()


# --- Clusters started with `ray start`, as a user's would be ----------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _stop_processes_mentioning(*marks: str) -> None:
    """Stop the processes whose command line mentions one of ``marks`` (this test's cluster
    only: its temp dir, its address), and their children. Never ``ray stop``: that stops every
    Ray on the machine."""
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if proc.pid != os.getpid() and any(
                mark in arg for arg in (proc.info["cmdline"] or []) for mark in marks
            ):
                found[proc.pid] = proc
                found.update((c.pid, c) for c in proc.children(recursive=True))
        except psutil.Error:
            pass
    for proc in found.values():
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(list(found.values()), timeout=5)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


@contextlib.contextmanager
def _ray_start_cluster(env: dict[str, str], cwd: str) -> Iterator[tuple[str, str]]:
    """A one-CPU head node started by ``ray start`` with ``env`` added to its environment
    (which its workers inherit); yields its address and the marks that stop it."""
    temp = tempfile.mkdtemp(prefix="llmray-", dir="/tmp")  # short: Ray's socket paths
    port = _free_port()
    address = f"127.0.0.1:{port}"
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--num-cpus", "1"]
    command += ["--port", str(port), "--node-ip-address", "127.0.0.1", "--temp-dir", temp]
    command += ["--include-dashboard", "false", "--disable-usage-stats"]
    for option in ("--ray-client-server-port", "--dashboard-port", "--dashboard-agent-listen-port"):
        command += [option, str(_free_port())]  # not the fixed defaults another Ray may hold
    marks = (temp, f"--address={address}")
    try:
        subprocess.run(
            command,
            env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **env},
            cwd=cwd,
            check=True,
            capture_output=True,
            timeout=120,
        )
        yield address, marks
    finally:
        _stop_processes_mentioning(*marks)
        shutil.rmtree(temp, ignore_errors=True)


def test_a_node_running_other_llm_assets_code_computes_nothing_and_is_named(tmp_path, monkeypatch):
    """A node whose llm_assets was not upgraded computes nothing and is named: its shards, run
    with its own code, would be recorded under the driver's code version and reused. The
    node here sees an edited copy whose ray_shard_call is an older release's (no check of its own):
    the check travels with the driver's task."""
    import llm_assets
    from llm_assets.compute.ray_shard_call import RayCodeMismatchError, code_identity

    stale = tmp_path / "stale"
    shutil.copytree(
        Path(llm_assets.__file__).parent,
        stale / "llm_assets",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    with (stale / "llm_assets" / "kernels" / "normalize.py").open("a") as handle:
        handle.write("\n# changed on this node only\n")
    older = '"""An older release: its wrapper, no check."""\n\n\ndef _call(fn, task):\n'
    older += "    return fn(task)\n"
    (stale / "llm_assets" / "compute" / "ray_shard_call.py").write_text(older)
    marks_dir = tmp_path / "marks"
    marks_dir.mkdir()
    # Ray puts the driver's working directory first on its workers' path: not /work/main here.
    monkeypatch.chdir(tmp_path)
    env = {"PYTHONPATH": str(stale), "RAY_AUTH_MODE": "disabled"}
    with _ray_start_cluster(env, cwd=str(tmp_path)) as (address, _):
        backend = RayBackend(address=address, max_attempts=3)
        try:
            task = ProbeTask("p0", 2, str(marks_dir), mode="raise")  # leaves a mark if run
            with pytest.raises(RayCodeMismatchError) as info:
                backend.run(run_probe, [task])
            import ray

            (node,) = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        finally:
            backend.close()
    message = str(info.value)
    assert "shard p0" in message and node in message
    assert str(stale / "llm_assets" / "__init__.py") in message
    assert code_identity()[:16] in message
    assert "Install the same llm_assets version on every node" in message
    assert not list(marks_dir.iterdir()), "the shard ran on the node, or was retried"


_DRIVER = """
import os, sys, time
from llm_assets.compute.ray_backend import RayBackend
sys.path.insert(0, sys.argv[2])
from test_ray_backend import _stop_processes_mentioning
backend = RayBackend(address=sys.argv[1], task_timeout_s=3600)
print("stage 1:", backend.run(os.getenv, ["HOME"]) == [os.environ["HOME"]], flush=True)
import threading
stopped = 0.0
def stop():
    global stopped
    time.sleep(2)
    stopped = time.monotonic()
    _stop_processes_mentioning(*sys.argv[3:])
    print("stopped", flush=True)
threading.Thread(target=stop).start()
for stage in (2, 3):  # 3: the next stage, on a cluster already gone
    try:
        backend.run(time.sleep, [60.0] * 2)
    except Exception as exc:
        print(f"stage {stage}: {time.monotonic() - stopped:.1f} s {type(exc).__name__}: {exc}")
began = time.monotonic()
backend.close()
print(f"closed in {time.monotonic() - began:.1f} s", flush=True)
"""


def test_a_cluster_that_stops_mid_run_fails_the_run_in_seconds_naming_it(tmp_path):
    """A cluster that stops mid-run fails the run in seconds naming it, the step failure
    recorded and the backend closed, rather than Ray reconnecting for 60 s at full CPU and then
    ending the process. Run in a process of its own, which
    that abort would end, not this one."""
    env = {"RAY_AUTH_MODE": "disabled"}
    with _ray_start_cluster(env, cwd=str(tmp_path)) as (address, marks):
        here = os.path.dirname(__file__)
        try:
            done = subprocess.run(
                [sys.executable, "-c", _DRIVER, address, here, *marks],
                env={**os.environ, **env},
                cwd=str(tmp_path),
                capture_output=True,
                text=True,
                timeout=45,
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"the driver still ran after 45 s: {exc.stdout!r}")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == "stage 1: True" and "stopped" in lines, lines
    for stage, limit in ((2, CLUSTER_CHECK_S + 6), (3, CLUSTER_CHECK_S + 8)):
        (line,) = [ln for ln in lines if ln.startswith(f"stage {stage}: ")]
        seconds, _, error = line.removeprefix(f"stage {stage}: ").partition(" s ")
        assert float(seconds) < limit, line
        assert error.startswith(f"RayClusterError: the Ray cluster at {address} stopped answering")
    assert lines[-1].startswith("closed in"), lines


def test_a_cluster_with_token_authentication_says_to_set_ray_auth_mode(tmp_path, monkeypatch):
    """Said at once, not after ~20 s of Ray's InvalidAuthToken warnings and a bare
    ConnectionError."""
    from llm_assets.compute.ray_cluster import RayClusterError

    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": os.urandom(16).hex()}
    with _ray_start_cluster(env, cwd=str(tmp_path)) as (address, _):
        began = time.monotonic()
        with pytest.raises(RayClusterError, match="set RAY_AUTH_MODE=token") as info:
            RayBackend(address=address).run(os.getenv, ["HOME"])
        assert time.monotonic() - began < 5
        assert address in str(info.value) and "ray get-auth-token" in str(info.value)
    assert not ray_is_initialized()


class _Log:
    def __init__(self) -> None:
        self.warnings: list[str] = []

    def info(self, msg: str) -> None:
        pass

    def warning(self, msg: str) -> None:
        self.warnings.append(msg)


def test_failed_attempts_are_logged_and_a_final_ray_error_is_not_called_retried(
    tmp_path, monkeypatch
):
    """Each failed attempt of a shard that raised or whose worker died is logged, and a Ray
    error that is never retried (the driver's raylet died) is not reported "after max_attempts
    attempt(s)"."""
    import ray

    log = _Log()
    backend = RayBackend(num_cpus=2, max_attempts=3, work_while_starting=False, logger=log)
    try:
        flaky = ProbeTask("flaky", 2, str(tmp_path), fail_times=1, mode="raise")
        victim = ProbeTask("victim", 3, str(tmp_path), fail_times=1, mode="kill")
        assert [r["value"] for r in backend.run(run_probe, [flaky, victim])] == [4, 9]
        assert len(list(tmp_path.glob("flaky.*"))) == len(list(tmp_path.glob("victim.*"))) == 2
        (raised,) = [w for w in log.warnings if w.startswith("shard flaky:")]
        assert "attempt 1 of 3 failed (RuntimeError: planned failure 1 of flaky at " in raised
        (died,) = [w for w in log.warnings if w.startswith("shard victim:")]
        assert "attempt 1 of 3 failed (WorkerCrashedError" in died

        get = ray.get

        def raylet_died(ref, *args, **kwargs):
            if isinstance(ref, ray.ObjectRef):
                raise ray.exceptions.LocalRayletDiedError()
            return get(ref, *args, **kwargs)

        monkeypatch.setattr(ray, "get", raylet_died)
        with pytest.raises(ShardTaskFailed, match="Ray gave up, no retry: LocalRayletDied") as info:
            backend.run(run_probe, [ProbeTask("last", 1)])
        assert info.value.attempts == 1 and "after 1 attempt(s)" in str(info.value)
        monkeypatch.undo()
    finally:
        backend.close()
    assert not ray_is_initialized()
