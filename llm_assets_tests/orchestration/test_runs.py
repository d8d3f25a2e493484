"""Runs killed with SIGKILL do not keep the warehouse's concurrency pool; live runs do.

The instance is the shipped ``dagster.yaml`` (pool limit 1, the process-checking run launcher,
run monitoring) with its storage in a temporary ``DAGSTER_HOME``. Runs are real
``dagster job execute`` / ``dagster job launch`` processes on the shipped sample, killed or
stopped with real signals; the daemon is a real ``dagster-daemon run``.
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from pathlib import Path

import dagster as dg
import psutil
import pytest
import yaml
from dagster._core.launcher import WorkerStatus

from llm_assets.constants import CATALOG_POOL, PIPELINE_JOB
from llm_assets.orchestration.runs import (
    RUN_PROCESS_TAG,
    WATCH_INTERVAL_S,
    ProcessCheckingRunLauncher,
    RunProcess,
    reclaim_from_dead_runs,
)
from llm_assets_tests.assets.test_cli import _env, _job_command, _write_config
from llm_assets_tests.conftest import REPO

ROWS_PER_SHARD = 100
"""The sample in 37 raw shards: the first step runs long enough to be caught holding its slot."""
RUN_TIMEOUT_S = 180


# --- the process record and its judgement, on real processes -------------------------------------


def test_a_running_process_is_alive_and_a_killed_one_is_dead():
    assert RunProcess.of_this_process("r").liveness() == ("alive", "is running")
    child = subprocess.Popen(["sleep", "60"])
    record = RunProcess.of_pid("r", child.pid)
    assert record.liveness().state == "alive"
    child.send_signal(signal.SIGSTOP)  # stopped is alive: it goes on after SIGCONT
    assert record.liveness().state == "alive"
    child.kill()
    _wait_for(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, 10, "a zombie")
    assert record.liveness() == ("dead", "has exited (its parent has not yet reaped it)")
    child.wait()
    assert record.liveness() == ("dead", "no longer exists")


def test_a_reused_pid_another_boot_and_another_host_are_told_apart():
    this = RunProcess.of_this_process("r")
    earlier_ticks = None if this.start_ticks is None else this.start_ticks - 360_000
    reused = replace(this, started=this.started - 3600, start_ticks=earlier_ticks)
    assert reused.liveness().state == "dead"
    assert "now belongs to a process started" in reused.liveness().reason
    if this.start_ticks is not None:  # Linux: the kernel's start ticks decide, not the clock
        assert replace(this, started=this.started - 30).liveness().state == "alive"
    if this.boot_id:
        rebooted = replace(this, boot_id="another-boot")
        assert rebooted.liveness() == ("dead", "is gone: the machine has restarted since")
    elsewhere = replace(this, host="another-host")
    assert elsewhere.liveness().state == "unknown"  # left alone


def test_a_record_judges_only_the_run_that_wrote_it():
    record = RunProcess.of_this_process("parent")
    tags = {RUN_PROCESS_TAG: record.to_tag()}
    assert RunProcess.of_run(dg.DagsterRun(job_name="j", run_id="parent", tags=tags)) == record
    # A re-execution copies its parent's tags: the copy says nothing about the new run.
    assert RunProcess.of_run(dg.DagsterRun(job_name="j", run_id="child", tags=tags)) is None
    bad = {RUN_PROCESS_TAG: "{not json"}
    assert RunProcess.of_run(dg.DagsterRun(job_name="j", run_id="parent", tags=bad)) is None


# --- real runs ---------------------------------------------------------------------------------


def _wait_for(condition: Callable[[], object], timeout_s: float, what: str = "") -> object:
    """Poll ``condition`` until it is truthy (returned) or fail the test after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout_s} s waiting for {what or condition}")


@pytest.fixture
def instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dg.DagsterInstance]:
    """The shipped dagster.yaml in ``tmp_path/dagster_home`` (where ``_env`` points the runs; its
    relative storage folders are under that home, whatever the working directory of this
    process or of the runs); run monitoring polls every second (shipped: 15 s) and the daemon
    dequeues every second (Dagster's default: 5 s) to keep the daemon test short."""
    home = Path(_env(tmp_path)["DAGSTER_HOME"])
    settings = yaml.safe_load((REPO / "dagster.yaml").read_text())
    settings["run_monitoring"].update(poll_interval_seconds=1, free_slots_after_run_end_seconds=1)
    assert "run_coordinator" not in settings  # Dagster's QueuedRunCoordinator, as configured here
    settings["run_coordinator"] = {
        "module": "dagster._core.run_coordinator",
        "class": "QueuedRunCoordinator",
        "config": {"dequeue_interval_seconds": 1},
    }
    assert settings["concurrency"]["pools"]["default_limit"] == 1
    (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    # Created here, before any run: Dagster races when two processes create its tables.
    with dg.DagsterInstance.get() as opened:
        yield opened


def _slot_holders(instance: dg.DagsterInstance) -> set[str]:
    info = instance.event_log_storage.get_concurrency_info(CATALOG_POOL)
    return {slot.run_id for slot in info.claimed_slots if slot.run_id}


@contextmanager
def _process_group(command: list[str], cwd: Path, log: Path) -> Iterator[subprocess.Popen]:
    """``command`` in a session of its own, output to ``log``; whatever is left of its process
    group is killed on the way out."""
    with log.open("w") as out:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=_env(cwd),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        _signal_group(process, signal.SIGCONT)
        _signal_group(process, signal.SIGKILL)
        process.wait()


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    """Send ``signum`` to the process group led by ``process``, if any of it is left."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signum)


def _run_holding_the_slot(instance: dg.DagsterInstance, root: Path) -> dg.DagsterRun:
    """The run that holds the pool's slot once it has written its first raw shard (its first
    step is running)."""
    holders = _wait_for(
        lambda: list(root.glob("raw_documents/*/part-*.parquet")) and _slot_holders(instance),
        RUN_TIMEOUT_S,
        "a run to hold the pool's slot mid-step",
    )
    (run_id,) = holders
    run = instance.get_run_by_id(run_id)
    assert run is not None and run.status == dg.DagsterRunStatus.STARTED
    return run


def _kill_mid_step(instance: dg.DagsterInstance, tmp_path: Path, config: Path) -> dg.DagsterRun:
    """A ``dagster job execute`` run SIGKILLed (its whole process group) while its first step
    holds the pool's only slot; it stays STARTED and keeps the slot."""
    root = Path(yaml.safe_load(config.read_text())["resources"]["warehouse"]["config"]["root"])
    with _process_group(_job_command([config]), tmp_path, tmp_path / "killed.log") as process:
        run = _run_holding_the_slot(instance, root)
        _signal_group(process, signal.SIGKILL)
    killed = instance.get_run_by_id(run.run_id)
    assert killed is not None and killed.status == dg.DagsterRunStatus.STARTED
    assert _slot_holders(instance) == {run.run_id}  # the bug's starting point
    return killed


def _failure_message(instance: dg.DagsterInstance, run_id: str) -> str:
    (failure,) = instance.all_logs(run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    return failure.dagster_event.message or ""


@pytest.mark.slow
def test_next_run_frees_the_slot_of_a_run_killed_with_sigkill(instance, sample_input, tmp_path):
    """`dagster job execute`, no daemon: the next run fails the dead run, frees its slot,
    resumes from the shards it left and succeeds, in bounded time."""
    config = _write_config(tmp_path, sample_input, tmp_path / "warehouse", ROWS_PER_SHARD)
    killed = _kill_mid_step(instance, tmp_path, config)

    done = subprocess.run(  # on timeout the run is killed and the test fails
        _job_command([config]),
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-3000:]
    assert f"Run {killed.run_id} (llm_pipeline, STARTED) declared dead: its process (pid " in output
    assert "no longer exists; marked it failed and freed its slots in pool(s) " in output
    assert "already complete, reused" in output

    (rerun,) = [run for run in instance.get_runs() if run.run_id != killed.run_id]
    assert rerun.status == dg.DagsterRunStatus.SUCCESS
    assert instance.get_run_by_id(killed.run_id).status == dg.DagsterRunStatus.FAILURE
    message = _failure_message(instance, killed.run_id)
    assert message.startswith(f"Declared dead by run {rerun.run_id}: its process (pid "), message
    assert not _slot_holders(instance)


@pytest.mark.slow
def test_a_live_run_keeps_its_slot_and_a_second_run_waits(instance, sample_input, tmp_path):
    """A run stopped (SIGSTOP) while it holds the slot is alive: the second run's checks (at its
    start and in the background), a check from this process and the daemon's health check all
    leave it alone; the second run waits, and once the first goes on both succeed, their pool
    steps never overlapping."""
    first_config = _write_config(tmp_path, sample_input, tmp_path / "first", ROWS_PER_SHARD)
    second_config = _write_config(tmp_path, sample_input, tmp_path / "second", ROWS_PER_SHARD)
    second_log = tmp_path / "second.log"
    with _process_group(_job_command([first_config]), tmp_path, tmp_path / "first.log") as first:
        holder = _run_holding_the_slot(instance, tmp_path / "first")
        _signal_group(first, signal.SIGSTOP)
        try:
            assert RunProcess.of_run(holder).liveness().state == "alive"
            health = ProcessCheckingRunLauncher().check_run_worker_health(holder)
            assert health.status == WorkerStatus.RUNNING, health
            assert reclaim_from_dead_runs(instance, logging.getLogger(__name__)) == []
            with _process_group(_job_command([second_config]), tmp_path, second_log) as second:
                _wait_for(
                    lambda: (
                        f"Run {holder.run_id} (llm_pipeline) is in concurrency pool(s) "
                        f"{CATALOG_POOL} and left alone: its process (pid "
                        in second_log.read_text()
                    ),
                    RUN_TIMEOUT_S,
                    "the second run to find the first alive",
                )
                time.sleep(WATCH_INTERVAL_S + 1)  # the second run's background check looks again
                assert _slot_holders(instance) == {holder.run_id}
                assert instance.get_run_by_id(holder.run_id).status == dg.DagsterRunStatus.STARTED
                assert second.poll() is None  # waiting for the slot
                _signal_group(first, signal.SIGCONT)
                assert second.wait(timeout=RUN_TIMEOUT_S) == 0, second_log.read_text()[-3000:]
        finally:
            _signal_group(first, signal.SIGCONT)
        assert first.wait(timeout=RUN_TIMEOUT_S) == 0, (tmp_path / "first.log").read_text()[-3000:]

    runs = instance.get_runs()
    assert [run.status for run in runs] == [dg.DagsterRunStatus.SUCCESS] * 2
    assert "declared dead" not in second_log.read_text()
    intervals = _pool_step_intervals(instance, [run.run_id for run in runs])
    assert {run_id for _, _, run_id, _ in intervals} == {run.run_id for run in runs}
    for before, after in itertools.pairwise(intervals):
        assert after[0] >= before[1], f"{after[2:]} started before {before[2:]} ended"


def _pool_step_intervals(instance: dg.DagsterInstance, run_ids: list[str]) -> list[tuple]:
    """(start, end, run id, step) of every step of these runs (all are in the pool), in order of
    start."""
    intervals = []
    for run_id in run_ids:
        starts, ends = {}, {}
        for record in instance.all_logs(run_id):
            event = record.dagster_event
            if event is None:
                continue
            if event.event_type == dg.DagsterEventType.STEP_START:
                starts[event.step_key] = record.timestamp
            elif event.event_type == dg.DagsterEventType.STEP_SUCCESS:
                ends[event.step_key] = record.timestamp
        assert starts.keys() == ends.keys(), (starts, ends)
        intervals += [(starts[step], ends[step], run_id, step) for step in starts]
    return sorted(intervals)


@pytest.mark.slow
def test_daemon_fails_a_dead_run_and_releases_a_queued_one(instance, sample_input, tmp_path):
    """The UI, schedules and sensors queue their runs; the daemon does not launch one while the
    pool's slot is held. Its run monitoring (through the process-checking launcher) fails the
    dead run, Dagster frees the slot, and the queued run is launched and succeeds."""
    config = _write_config(tmp_path, sample_input, tmp_path / "warehouse", ROWS_PER_SHARD)
    killed = _kill_mid_step(instance, tmp_path, config)
    launch = [sys.executable, "-m", "dagster", "job", "launch", "-m", "llm_assets.definitions"]
    launch += ["-j", PIPELINE_JOB, "-c", str(config)]
    subprocess.run(
        launch, cwd=tmp_path, env=_env(tmp_path), check=True, capture_output=True, timeout=120
    )
    (queued,) = [run for run in instance.get_runs() if run.run_id != killed.run_id]
    assert queued.status == dg.DagsterRunStatus.QUEUED

    daemon = [str(Path(sys.executable).with_name("dagster-daemon")), "run"]
    daemon += ["-m", "llm_assets.definitions"]
    with _process_group(daemon, tmp_path, tmp_path / "daemon.log"):
        _wait_for(
            lambda: instance.get_run_by_id(queued.run_id).is_finished,
            RUN_TIMEOUT_S,
            "the queued run to finish",
        )
    assert instance.get_run_by_id(queued.run_id).status == dg.DagsterRunStatus.SUCCESS
    assert instance.get_run_by_id(killed.run_id).status == dg.DagsterRunStatus.FAILURE
    message = _failure_message(instance, killed.run_id)
    assert message.startswith("Detected run worker status FAILED: 'declared dead: its process"), (
        message
    )
    assert "no longer exists" in message
    assert not _slot_holders(instance)


def test_one_dagster_home_is_one_instance_from_any_working_directory(tmp_path):
    """The shipped dagster.yaml's storage folders are relative: Dagster read them against the
    working directory, so the same DAGSTER_HOME used from two folders made two instances (two
    concurrency pools, runs invisible to each other). Now both folders see one run store, under
    DAGSTER_HOME/.dagster, and neither working directory gets a .dagster of its own."""
    env = _env(tmp_path)
    home = Path(env["DAGSTER_HOME"])
    (home / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    script = (
        "import sys, dagster as dg\n"
        "from dagster._core.storage.dagster_run import DagsterRun\n"
        "with dg.DagsterInstance.get() as instance:\n"
        "    if sys.argv[1] == 'add':\n"
        "        instance.add_run(DagsterRun(job_name='probe', run_id='r-' + sys.argv[2]))\n"
        "    print(sorted(r.run_id for r in instance.get_runs()), instance.root_directory)\n"
    )
    outputs = []
    for i, action in enumerate(["add", "add", "list"]):
        cwd = tmp_path / f"cwd{i}"
        cwd.mkdir()
        done = subprocess.run(
            [sys.executable, "-c", script, action, str(i)],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        outputs.append(done.stdout.strip())
        assert not (cwd / ".dagster").exists()
    assert outputs[-1] == f"['r-0', 'r-1'] {home / '.dagster'}"
    assert (home / ".dagster" / "storage").is_dir()
