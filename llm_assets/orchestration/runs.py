"""Runs whose process died, and the concurrency-pool slots they would otherwise keep forever.

A step frees its pool slot when it ends. A run whose process is killed (SIGKILL, the OOM killer,
power loss) never frees it and stays STARTED, so with ``llm_assets_warehouse`` limited to one slot
every later run waits for it forever. Dagster only helps part of the way: its run monitoring fails
a run whose worker died only when the run launcher can check the worker, and the
``DefaultRunLauncher`` cannot; a run started by ``dagster job execute`` has no daemon watching it
at all; and a failed run's slots are freed only by the daemon
(``free_slots_after_run_end_seconds``).

So every run records its process in the run tag :data:`RUN_PROCESS_TAG` (host, boot, PID
namespace, pid and start time: a pid that was reused since belongs to a process that started
later), before any of its steps claims a slot, and two things read it:

- :class:`RunWatch` (started by the warehouse resource, whose setup Dagster runs before the first
  step claims a slot): at the start of every run, and every few seconds while it runs, it fails the
  runs whose recorded process is gone and frees their slots, so a ``dagster job execute`` run
  proceeds on its own;
- :class:`ProcessCheckingRunLauncher` (``run_launcher`` in ``dagster.yaml``): gives Dagster's run
  monitoring daemon (``dagster dev``, ``dagster-daemon run``) the same answer, so a run queued from
  the UI, a schedule or a sensor (which the daemon does not launch while the pool is full) is
  released once Dagster has failed the dead run and freed its slots.

A run is declared dead only when its record names this machine and its process is gone; a run
whose process is alive, that ran on another host or container, or that has no record (it started
before runs recorded their process) is never touched.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal, NamedTuple

import dagster as dg
import psutil

from llm_assets.orchestration.instance import WorkerCheckingRunLauncher, report_run_died

RUN_PROCESS_TAG = "llm_assets/run_process"
"""Run tag holding the JSON of the run's :class:`RunProcess`."""
WATCH_INTERVAL_S = 5.0
"""How often a running run looks for dead runs that hold or wait for a pool slot."""
START_TIME_TOLERANCE_S = 1.0
"""Where the kernel's start ticks are unknown (not Linux): two readings of one process's start
time differ by less (psutil derives it from the boot time, which clock adjustments move); a
reused pid belongs to a process started much later."""

_ACTIVE_STATUSES = [
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]


class Liveness(NamedTuple):
    """Whether a recorded process is alive here, and why we think so (a sentence's end)."""

    state: Literal["alive", "dead", "unknown"]
    reason: str


def _read_boot_id() -> str:
    """This boot of the machine (Linux); empty where unknown."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _read_pid_namespace() -> str:
    """The PID namespace of this process (Linux), e.g. ``pid:[4026531836]``; empty where unknown.
    Containers on one host share its boot but not its pids."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def _read_start_ticks(pid: int | None = None) -> int | None:
    """When the process started, in clock ticks since boot (Linux: field 22 of
    ``/proc/<pid>/stat``): exact, and not moved by changes of the wall clock. None where unknown
    (not Linux, or the process is gone)."""
    try:
        stat = Path(f"/proc/{pid or 'self'}/stat").read_text()
    except OSError:
        return None
    # Fields after the command name (which may hold spaces and parentheses) start at field 3.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])


def _utc(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class RunProcess:
    """The process that executes a run's steps, as recorded in its run tag."""

    run_id: str
    host: str
    pid: int
    started: float
    """The process's start time (seconds since the epoch, as psutil reads it)."""
    boot_id: str = ""
    pid_namespace: str = ""
    start_ticks: int | None = None
    """Linux: the kernel's start time of the process (see :func:`_read_start_ticks`); with the
    boot id, it tells the process from any later one given the same pid."""

    @classmethod
    def of_this_process(cls, run_id: str) -> RunProcess:
        """The record of the calling process, executing ``run_id``."""
        return cls.of_pid(run_id, os.getpid())

    @classmethod
    def of_pid(cls, run_id: str, pid: int) -> RunProcess:
        """The record of the running process ``pid`` of this machine, executing ``run_id``."""
        return cls(
            run_id=run_id,
            host=socket.gethostname(),
            pid=pid,
            started=psutil.Process(pid).create_time(),
            boot_id=_read_boot_id(),
            pid_namespace=_read_pid_namespace(),
            start_ticks=_read_start_ticks(pid),
        )

    @classmethod
    def of_run(cls, run: dg.DagsterRun) -> RunProcess | None:
        """The record in ``run``'s tags, or None (no record, or one that is not the run's own)."""
        raw = run.tags.get(RUN_PROCESS_TAG)
        if not raw:
            return None
        try:
            record = cls(**json.loads(raw))
        except (TypeError, ValueError):
            return None
        # A re-execution copies its parent's tags: only the run that wrote a record is judged by it.
        return record if record.run_id == run.run_id else None

    def to_tag(self) -> str:
        """The record as the run tag's value."""
        return json.dumps(asdict(self), sort_keys=True)

    def describe(self) -> str:
        """``pid 123 on host, started 2026-01-01 10:00:00 UTC``."""
        return f"pid {self.pid} on {self.host}, started {_utc(self.started)}"

    def liveness(self) -> Liveness:
        """Whether the recorded process is still running. ``unknown`` where this machine cannot
        tell (another host or container, a process it may not inspect): such a run is left alone."""
        host = socket.gethostname()
        if self.host != host:
            return Liveness("unknown", f"ran on host {self.host}, not on this one ({host})")
        namespace = _read_pid_namespace()
        if self.pid_namespace and namespace and self.pid_namespace != namespace:
            return Liveness("unknown", "ran in another PID namespace (another container)")
        boot_id = _read_boot_id()
        if self.boot_id and boot_id and self.boot_id != boot_id:
            return Liveness("dead", "is gone: the machine has restarted since")
        try:
            process = psutil.Process(self.pid)
            with process.oneshot():
                started = process.create_time()
                status = process.status()
        except psutil.NoSuchProcess:  # ZombieProcess too: a process that has exited
            return Liveness("dead", "no longer exists")
        except psutil.AccessDenied:
            return Liveness("unknown", "may not be inspected by this user")
        ticks = _read_start_ticks(self.pid) if self.start_ticks is not None else None
        if ticks is not None and self.boot_id and self.boot_id == boot_id:
            same_process = ticks == self.start_ticks
        else:
            same_process = abs(started - self.started) <= START_TIME_TOLERANCE_S
        if not same_process:
            return Liveness(
                "dead",
                f"no longer exists (pid {self.pid} now belongs to a process started "
                f"{_utc(started)})",
            )
        if status == psutil.STATUS_ZOMBIE:
            return Liveness("dead", "has exited (its parent has not yet reaped it)")
        return Liveness("alive", "is running")


def _pools_of(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """The pools in which ``run_id`` holds a slot or has a step queued."""
    storage = instance.event_log_storage
    infos = storage.get_concurrency_infos(sorted(storage.get_concurrency_keys()))
    return sorted(
        pool
        for pool, info in infos.items()
        if any(slot.run_id == run_id for slot in info.claimed_slots)
        or any(step.run_id == run_id for step in info.pending_steps)
    )


def _runs_to_check(instance: dg.DagsterInstance) -> tuple[list[dg.DagsterRun], set[str]]:
    """Runs in progress, and runs in a pool (holding a slot or queued for one, whatever their
    status); and the ids of the latter."""
    storage = instance.event_log_storage
    pooled = (
        set(storage.get_concurrency_run_ids())
        if storage.supports_global_concurrency_limits
        else set()
    )
    runs = {run.run_id: run for run in instance.get_runs(dg.RunsFilter(statuses=_ACTIVE_STATUSES))}
    missing = pooled - runs.keys()
    if missing:
        runs.update(
            (run.run_id, run) for run in instance.get_runs(dg.RunsFilter(run_ids=sorted(missing)))
        )
    return list(runs.values()), pooled


def reclaim_from_dead_runs(
    instance: dg.DagsterInstance,
    log: logging.Logger | dg.DagsterLogManager,
    *,
    own_run_id: str | None = None,
    noted: set[str] | None = None,
) -> list[str]:
    """Fail every unfinished run whose recorded process is gone (cancel it if it was canceling)
    and free its pool slots; free the slots of a finished run whose process is gone. Returns the
    ids of the runs it declared dead, each logged as a warning with the reason.

    ``noted`` (kept by the caller across calls) makes each run that cannot be checked or is alive
    in a pool be mentioned once instead of on every call.
    """
    runs, pooled = _runs_to_check(instance)
    noted = set() if noted is None else noted
    declared = []
    for run in runs:
        if run.run_id == own_run_id:
            continue
        record = RunProcess.of_run(run)
        if record is None:
            if run.run_id in pooled and run.run_id not in noted:
                noted.add(run.run_id)
                log.warning(
                    f"Run {run.run_id} ({run.job_name}, {run.status.value}) is in concurrency "
                    f"pool(s) {', '.join(_pools_of(instance, run.run_id))} and has no process "
                    "record (it started before runs recorded their process): it is not checked. "
                    "If its process is gone, terminate it in the UI (`dagster dev`) or delete it "
                    f"(`dagster run delete {run.run_id}`): either frees its slots."
                )
            continue
        liveness = record.liveness()
        if liveness.state != "dead":
            if run.run_id in pooled and run.run_id not in noted:
                noted.add(run.run_id)
                log.info(
                    f"Run {run.run_id} ({run.job_name}) is in concurrency pool(s) "
                    f"{', '.join(_pools_of(instance, run.run_id))} and left alone: its process "
                    f"({record.describe()}) {liveness.reason}. Steps in the same pool wait "
                    "their turn."
                )
            continue
        if _declare_dead(instance, run, record, liveness, run.run_id in pooled, own_run_id, log):
            declared.append(run.run_id)
    return declared


def _declare_dead(
    instance: dg.DagsterInstance,
    run: dg.DagsterRun,
    record: RunProcess,
    liveness: Liveness,
    in_pool: bool,
    own_run_id: str | None,
    log: logging.Logger | dg.DagsterLogManager,
) -> bool:
    """Fail (or cancel) a run whose process is gone and free its slots; False if there was
    nothing to do."""
    # Read the status again now that the process is known to be gone: one that ended cleanly
    # wrote its final status before it exited.
    current = instance.get_run_by_id(run.run_id)
    if current is None or (current.is_finished and not in_pool):
        return False
    pools = _pools_of(instance, run.run_id) if in_pool else []
    why = f"its process ({record.describe()}) {liveness.reason}"
    done = []
    if not current.is_finished:
        by = f"run {own_run_id}" if own_run_id else "llm-assets"
        message = (
            f"Declared dead by {by}: {why}. Its concurrency slots are freed so that other runs "
            "can proceed; run the job again to finish the rest (finished shards are reused)."
        )
        if current.status == dg.DagsterRunStatus.CANCELING:
            instance.report_run_canceled(current, message)
            done.append("marked it canceled")
        else:
            report_run_died(instance, current, message)
            done.append("marked it failed")
    if in_pool:
        instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        done.append(f"freed its slots in pool(s) {', '.join(pools) or '(none left)'}")
    log.warning(
        f"Run {run.run_id} ({run.job_name}, {current.status.value}) declared dead: {why}; "
        f"{' and '.join(done)}."
    )
    return True


class RunWatch:
    """This run's process record, and a thread that reclaims pool slots from dead runs while this
    run runs (another run may be killed while this one waits for its slot)."""

    def __init__(
        self,
        instance: dg.DagsterInstance,
        run_id: str,
        log: dg.DagsterLogManager,
        interval_s: float = WATCH_INTERVAL_S,
    ) -> None:
        self._instance = instance
        self._run_id = run_id
        self._log = log
        self._interval_s = interval_s
        self._noted: set[str] = set()
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._watch, name="llm-assets-run-watch", daemon=True
        )

    @classmethod
    def start(cls, context: dg.InitResourceContext) -> RunWatch | None:
        """Record this process in the run's tags, reclaim slots from dead runs, and keep doing so
        in the background; None outside a run in progress (resources built for a test, or the
        CLI's second resource setup after the run has finished)."""
        instance, run, log = context.instance, context.run, context.log
        if instance is None or run is None or log is None:
            return None
        current = instance.get_run_by_id(run.run_id)
        if current is None or current.is_finished:
            return None
        record = RunProcess.of_this_process(run.run_id)
        instance.add_run_tags(run.run_id, {RUN_PROCESS_TAG: record.to_tag()})
        watch = cls(instance, run.run_id, log)
        watch.check()
        watch._thread.start()
        return watch

    def check(self) -> list[str]:
        """One look for dead runs (see :func:`reclaim_from_dead_runs`); a failure to look is
        logged, never raised: this run itself is fine."""
        try:
            return reclaim_from_dead_runs(
                self._instance, self._log, own_run_id=self._run_id, noted=self._noted
            )
        except Exception as error:  # a storage hiccup must not fail this run
            self._log.warning(f"Could not check other runs for a dead process: {error!r}")
            return []

    def _watch(self) -> None:
        while not self._stopped.wait(self._interval_s):
            self.check()

    def stop(self) -> None:
        """Stop the background checks (at the run's resource teardown)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)


class ProcessCheckingRunLauncher(WorkerCheckingRunLauncher):
    """Dagster's ``DefaultRunLauncher`` (a process per run, started by the code server) that can
    also answer run monitoring's question: is this run's process alive?

    With it, the monitoring daemon (``run_monitoring`` in ``dagster.yaml``) fails a run whose
    recorded process is gone, and Dagster frees its slots ``free_slots_after_run_end_seconds``
    later. A run without a record, or one this machine cannot check, is reported running: Dagster
    fails a run on any other answer.
    """

    def worker_dead(self, run: dg.DagsterRun) -> tuple[bool, str]:
        record = RunProcess.of_run(run)
        if record is None:
            return False, "no process record; not checked"
        liveness = record.liveness()
        message = f"its process ({record.describe()}) {liveness.reason}"
        if liveness.state == "dead":
            return True, f"declared dead: {message}"
        return False, message
