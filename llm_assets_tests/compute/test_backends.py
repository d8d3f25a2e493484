"""Every compute backend runs real tasks in real processes: order, retries, failures."""

from __future__ import annotations

import pytest

from llm_assets.compute.backends import make_backend
from llm_assets.compute.base import ShardTaskFailed
from llm_assets.compute.testing import ProbeTask, run_probe

LOCAL_BACKENDS = ["in_process", "multiprocess"]


@pytest.fixture(scope="module")
def ray_backend():
    # Every task in a Ray worker (as after Ray's start); test_ray_backend covers the shards the
    # driver runs while Ray starts.
    backend = make_backend("ray", workers=2, max_attempts=3, ray_work_while_starting=False)
    yield backend
    backend.close()


def _backend(name, request, **kwargs):
    if name == "ray":
        return request.getfixturevalue("ray_backend")
    return make_backend(name, workers=2, **kwargs)


@pytest.mark.parametrize("name", [*LOCAL_BACKENDS, pytest.param("ray", marks=pytest.mark.slow)])
def test_results_in_task_order_with_progress_callback(name, request):
    backend = _backend(name, request)
    seen = []
    tasks = [ProbeTask(key=f"t{i}", value=i) for i in range(7)]
    try:
        results = backend.run(run_probe, tasks, lambda i, r: seen.append(i))
    finally:
        if name != "ray":
            backend.close()
    assert [r["value"] for r in results] == [i * i for i in range(7)]
    assert sorted(seen) == list(range(7))
    if name != "in_process":
        import os

        assert os.getpid() not in {r["pid"] for r in results}


@pytest.mark.parametrize("name", ["multiprocess", pytest.param("ray", marks=pytest.mark.slow)])
def test_a_long_task_is_reported_while_it_runs(name, request):
    """With no task finished for heartbeat_s, the backend logs which shards still run and for how
    long."""

    class Log:
        def __init__(self) -> None:
            self.lines: list[str] = []

        def info(self, msg: str) -> None:
            self.lines.append(msg)

        warning = info

    backend = _backend(name, request)
    log, before = Log(), (backend.log, backend.heartbeat_s)
    backend.log, backend.heartbeat_s = log, 0.4
    tasks = [ProbeTask("quick", 1), ProbeTask("slow", 2, sleep_s=2.0)]
    try:
        assert [r["value"] for r in backend.run(run_probe, tasks)] == [1, 4]
    finally:
        backend.log, backend.heartbeat_s = before
        if name != "ray":
            backend.close()
    beats = [line for line in log.lines if line.startswith("still working: ")]
    assert len(beats) >= 2, log.lines
    # The first beats may come before the quick task ends (a Ray worker can take longer than a
    # beat to start): once it has, every beat names the slow one alone.
    after = [b for b in beats if b.startswith("still working: 1 of 2 shard(s) done; ")]
    assert after, beats
    assert all(
        b.startswith("still working: 1 of 2 shard(s) done; running: slow (for ") for b in after
    )
    assert beats[beats.index(after[0]) :] == after, beats


def test_empty_task_list_starts_nothing():
    backend = make_backend("multiprocess", workers=2)
    assert backend.run(run_probe, []) == []
    assert backend.worker_pids() == []


@pytest.mark.parametrize("name", [*LOCAL_BACKENDS, pytest.param("ray", marks=pytest.mark.slow)])
def test_raising_task_is_retried_then_succeeds(name, request, tmp_path):
    backend = _backend(name, request, max_attempts=3)
    tasks = [ProbeTask("a", 2), ProbeTask("b", 3, str(tmp_path), fail_times=2, mode="raise")]
    try:
        results = backend.run(run_probe, tasks)
    finally:
        if name != "ray":
            backend.close()
    assert [r["value"] for r in results] == [4, 9]
    assert len(list(tmp_path.glob("b.*"))) == 3


@pytest.mark.parametrize("name", [*LOCAL_BACKENDS, pytest.param("ray", marks=pytest.mark.slow)])
def test_task_failing_every_attempt_names_the_shard(name, request, tmp_path):
    backend = _backend(name, request, max_attempts=2)
    tasks = [
        ProbeTask("fine", 1),
        ProbeTask("doomed", 2, str(tmp_path), fail_times=9, mode="raise"),
    ]
    with pytest.raises(ShardTaskFailed, match="doomed") as info:
        backend.run(run_probe, tasks)
    if name != "ray":
        backend.close()
        assert info.value.attempts == 2
    assert "planned failure" in str(info.value)


def test_multiprocess_worker_killed_mid_shard_is_replaced_and_shard_retried(tmp_path):
    backend = make_backend("multiprocess", workers=2, max_attempts=3)
    tasks = [ProbeTask(f"t{i}", i) for i in range(4)]
    tasks.append(ProbeTask("victim", 5, str(tmp_path), fail_times=1, mode="kill"))
    try:
        first_pids = None
        results = backend.run(run_probe, tasks)
        first_pids = set(backend.worker_pids())
    finally:
        backend.close()
    assert [r["value"] for r in results] == [0, 1, 4, 9, 25]
    assert len(list(tmp_path.glob("victim.*"))) == 2
    assert len(first_pids) == 2


def test_multiprocess_worker_that_keeps_dying_fails_the_run(tmp_path):
    backend = make_backend("multiprocess", workers=2, max_attempts=2)
    tasks = [ProbeTask("always-dies", 1, str(tmp_path), fail_times=99, mode="kill")]
    with pytest.raises(ShardTaskFailed, match=r"always-dies.*worker process died"):
        backend.run(run_probe, tasks)
    assert backend.worker_pids() == []


def test_a_worker_that_died_while_idle_costs_the_next_shard_no_attempt():
    """A worker killed between two runs (the OOM killer, an operator): the next shard goes to a
    fresh worker, not the dead one, and the run succeeds even with max_attempts 1."""
    import os
    import signal
    import time

    import psutil

    backend = make_backend("multiprocess", workers=2, max_attempts=1)
    try:
        backend.run(run_probe, [ProbeTask("a", 1), ProbeTask("b", 2)])
        victim = backend.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 10  # dead, not reaped: the backend's child to reap
        while psutil.Process(victim).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        results = backend.run(run_probe, [ProbeTask(f"c{i}", i) for i in range(4)])
        assert [r["value"] for r in results] == [0, 1, 4, 9]
        assert victim not in backend.worker_pids() and len(backend.worker_pids()) == 2
    finally:
        backend.close()


@pytest.mark.slow
def test_ray_worker_killed_mid_shard_is_retried(ray_backend, tmp_path):
    tasks = [
        ProbeTask("r0", 3),
        ProbeTask("ray-victim", 4, str(tmp_path), fail_times=1, mode="kill"),
    ]
    results = ray_backend.run(run_probe, tasks)
    assert [r["value"] for r in results] == [9, 16]
    assert len(list(tmp_path.glob("ray-victim.*"))) == 2


def test_the_pool_starts_workers_for_the_shards_there_are():
    """A stage of one shard starts one process, not one per configured worker (workers: 24 on 2
    cores spawned 24 for 6 shards); a later stage with more shards grows the pool."""
    backend = make_backend("multiprocess", workers=3)
    try:
        backend.run(run_probe, [ProbeTask("one", 1)])
        assert len(backend.worker_pids()) == 1
        backend.run(run_probe, [ProbeTask(f"t{i}", i) for i in range(5)])
        assert len(backend.worker_pids()) == 3
    finally:
        backend.close()


@pytest.mark.parametrize("name", ["multiprocess", "ray", "auto"])
def test_a_worker_count_far_past_the_cores_is_refused(name):
    """A typo such as workers: 100000 tried to spawn that many processes."""
    import os

    limit = 8 * (os.cpu_count() or 1)
    make_backend(name, workers=limit).close()
    with pytest.raises(ValueError, match=f"workers {limit + 1} is more than 8 per core"):
        make_backend(name, workers=limit + 1)


def test_workers_are_not_bounded_by_this_machine_on_a_ray_cluster():
    """A config tuned for a big cluster, started from a small driver machine: the cluster does
    not use ``workers``, so this machine's cores do not refuse it."""
    import os

    backend = make_backend("ray", workers=64 * (os.cpu_count() or 1), ray_address="10.0.0.5:6379")
    backend.close()  # never connected: nothing to stop


def test_bad_compute_settings_fail_a_run_whose_shards_are_all_complete(sample_input, tmp_path):
    """Checked when the run's compute resource is set up: before, a bad max_attempts or timeout
    surfaced only when a shard was handed to the backend, so a run that reused every shard
    passed with it."""
    from llm_assets_tests.assets.test_pipeline import materialize

    root = tmp_path / "wh"
    assert materialize(sample_input, root).success
    import dagster as dg

    from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS
    from llm_assets.compute.resource import ComputeResource
    from llm_assets.warehouse.resource import WarehouseResource
    from llm_assets_tests.conftest import pipeline_run_config

    for bad, message in (
        ({"max_attempts": 0}, "max_attempts must be >= 1"),
        ({"task_timeout_s": 0.0}, "task_timeout_s must be > 0"),
    ):
        with pytest.raises(dg.DagsterResourceFunctionError) as info:
            dg.materialize(
                PIPELINE_ASSET_DEFS,
                resources={
                    "compute": ComputeResource(**bad),
                    "warehouse": WarehouseResource(root=str(root)),
                },
                run_config=pipeline_run_config(sample_input),
            )
        assert message in str(info.value.__cause__)


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown compute backend 'spark'"):
        make_backend("spark")


@pytest.mark.parametrize("name", ["multiprocess", "ray", "auto"])
def test_a_negative_worker_count_is_refused_not_read_as_every_core(name):
    """0 means every core; -1 is refused, not read as every core (the study's runners fail
    on it)."""
    with pytest.raises(ValueError, match="workers must be >= 0"):
        make_backend(name, workers=-1)


def test_multiprocess_workers_do_not_import_the_drivers_main_module(tmp_path):
    """A spawned child normally re-imports ``__main__`` (under Dagster: all of Dagster). Ours
    never need it: the main script's import side effect must happen once, in the driver, and a
    task defined in ``__main__`` still runs (dill pickles it by value)."""
    import subprocess
    import sys

    marker = tmp_path / "imports.txt"
    script = tmp_path / "driver_main.py"
    script.write_text(
        f"""
import os
with open({str(marker)!r}, "a") as f:
    f.write(f"{{os.getpid()}}\\n")

def square(x):
    return x * x

if __name__ == "__main__":
    from llm_assets.compute.backends import make_backend
    from llm_assets.compute.testing import ProbeTask, run_probe
    backend = make_backend("multiprocess", workers=2)
    try:
        assert [r["value"] for r in backend.run(run_probe, [ProbeTask("a", 3)] * 4)] == [9] * 4
        assert backend.run(square, [2, 5]) == [4, 25]
    finally:
        backend.close()
"""
    )
    subprocess.run([sys.executable, str(script)], check=True, timeout=120)
    assert len(marker.read_text().split()) == 1


def test_driving_the_stages_without_dagster_does_not_import_it():
    """The benchmark's measured runs and scripts build backends and run stages without Dagster:
    importing it would add ~40 MB to their driver's memory."""
    import subprocess
    import sys

    code = (
        "import sys, llm_assets.bench.runner, llm_assets.compute.backends\n"
        "import llm_assets.stages.raw_documents, llm_assets.stages.normalized_documents\n"
        "import llm_assets.stages.tokenized_documents, llm_assets.stages.training_batches.driver\n"
        "import llm_assets.stages.filtered_documents.driver\n"
        "assert 'dagster' not in sys.modules, sorted(m for m in sys.modules if 'dagster' in m)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_auto_reads_the_results_in_the_runs_own_warehouse(tmp_path, monkeypatch):
    """With a warehouse root other than ``data/warehouse``, backend ``auto`` reads the benchmark
    results where ``benchmark_report`` wrote them: that warehouse's catalog."""
    import shutil

    import dagster as dg

    from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS
    from llm_assets.bench.runner import OURS, RunResult
    from llm_assets.compute.resource import ComputeResource
    from llm_assets.machine import machine_info
    from llm_assets.warehouse.benchmarks import record_results
    from llm_assets.warehouse.resource import WarehouseResource
    from llm_assets_tests.conftest import SAMPLE_DIR, pipeline_run_config

    monkeypatch.chdir(tmp_path)  # no data/warehouse here
    shutil.copytree(SAMPLE_DIR, tmp_path / "input")
    warehouse = WarehouseResource(root=str(tmp_path / "elsewhere"))
    results = [
        RunResult(
            runner=OURS,
            backend=backend,
            size=size,
            repetition=1,
            workers=2,
            rows_in=size,
            rows_out=size,
            tokens=size * 90,
            bytes_in=size * 500,
            seconds=seconds,
            startup_seconds=0.0,
        )
        for size in (1_000, 100_000)
        for backend, seconds in (("in_process", 9.0), ("multiprocess", 1.0))
    ]
    record_results(warehouse.catalog(), "measured", results, machine=machine_info())
    result = dg.materialize(
        PIPELINE_ASSET_DEFS,
        resources={"compute": ComputeResource(backend="auto", workers=2), "warehouse": warehouse},
        run_config=pipeline_run_config(tmp_path / "input"),
    )
    assert result.success
    for event in result.get_asset_materialization_events():
        metadata = event.step_materialization_data.materialization.metadata
        assert metadata["compute_backend"].value == "multiprocess", event.asset_key
