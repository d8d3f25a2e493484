"""Measure a run: wall time, CPU time and peak memory of the driver and every descendant process.

A sampler thread wakes every ``interval_s`` (default 50 ms) and walks the driver's process tree:
worker pools, and Ray's gcs_server, raylet and workers when the run started the local Ray (they
are children of the driver, or of its raylet). Memory is the *sum* of PSS over the tree at one
instant (shared pages split between the processes that map them, so spawned workers that share
libraries are not counted twice; RSS when PSS cannot be read), and the peak of that sum over the
run. The driver's own peak RSS is kept too (the study reported that figure alone).

CPU seconds are user + system time of every process seen, at the last moment it was seen, minus
what it had used when the measurement began: a process that exits during the run keeps its
last-seen value. A process that lives less than one interval can be missed (its memory too).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import psutil

MB = 1024 * 1024


@dataclass
class Measurement:
    """What a :class:`ResourceSampler` saw between ``start`` and ``stop``."""

    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0
    peak_total_pss_mb: float = 0.0
    """Highest sum of PSS (or RSS) over the driver and its descendants at one instant."""
    peak_driver_rss_mb: float = 0.0
    peak_driver_pss_mb: float = 0.0
    peak_processes: int = 0
    """Most processes alive at one sample (driver included)."""
    processes_seen: int = 0
    samples: int = 0
    memory_kind: str = "pss"
    """``pss``, or ``rss`` when PSS could not be read for some process."""
    per_process_peak_mb: dict[str, float] = field(default_factory=dict)
    """Peak PSS per process name (summed over processes of the same name at one sample)."""

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (for JSON reports)."""
        return asdict(self)


def _memory(proc: psutil.Process) -> tuple[int, int, bool]:
    """(pss-or-rss bytes, rss bytes, whether the first is PSS)."""
    try:
        full = proc.memory_full_info()
        pss = getattr(full, "pss", None)
        if pss is not None:
            return int(pss), int(full.rss), True
        return int(full.rss), int(full.rss), False
    except psutil.AccessDenied:
        rss = proc.memory_info().rss
        return int(rss), int(rss), False


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


class ResourceSampler:
    """Samples the process tree rooted at ``pid`` (default: this process) in a thread.

    Use as a context manager or call :meth:`start` and :meth:`stop`; :attr:`result` holds the
    :class:`Measurement` once stopped.
    """

    def __init__(self, pid: int | None = None, interval_s: float = 0.05) -> None:
        self.root = psutil.Process(pid or os.getpid())
        self.interval_s = interval_s
        self.result = Measurement()
        self._procs: dict[int, psutil.Process] = {}
        self._cpu_start: dict[int, float] = {}
        self._cpu_last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._started = 0.0

    def _tree(self) -> list[psutil.Process]:
        try:
            children = self.root.children(recursive=True)
        except psutil.Error:
            children = []
        tree = [self.root, *children]
        current = []
        for proc in tree:
            known = self._procs.get(proc.pid)
            # Reuse the Process object (a recycled pid gets a new create_time, hence a new key).
            if known is None or known.create_time() != proc.create_time():
                self._procs[proc.pid] = proc
                known = proc
            current.append(known)
        return current

    def sample(self) -> None:
        """Take one sample now (the thread calls this; callable directly for a final sample)."""
        with self._lock:
            total = 0
            alive = 0
            by_name: dict[str, float] = {}
            result = self.result
            for proc in self._tree():
                try:
                    memory, rss, is_pss = _memory(proc)
                    cpu = _cpu(proc)
                    name = proc.name()
                except (psutil.NoSuchProcess, psutil.ZombieProcess):
                    continue
                except psutil.Error:
                    continue
                if not is_pss:
                    result.memory_kind = "rss"
                alive += 1
                total += memory
                key = (proc.pid, proc.create_time())
                self._cpu_start.setdefault(key, cpu if self._is_baseline() else 0.0)
                self._cpu_last[key] = cpu
                by_name[name] = by_name.get(name, 0.0) + memory / MB
                if proc.pid == self.root.pid:
                    result.peak_driver_rss_mb = max(result.peak_driver_rss_mb, rss / MB)
                    result.peak_driver_pss_mb = max(result.peak_driver_pss_mb, memory / MB)
            result.samples += 1
            result.peak_total_pss_mb = max(result.peak_total_pss_mb, total / MB)
            result.peak_processes = max(result.peak_processes, alive)
            result.processes_seen = len(self._cpu_last)
            for name, mb in by_name.items():
                result.per_process_peak_mb[name] = max(result.per_process_peak_mb.get(name, 0), mb)

    def _is_baseline(self) -> bool:
        """True during the first sample: CPU used before the run began is not the run's."""
        return self.result.samples == 0

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(Exception):
                self.sample()

    def start(self) -> ResourceSampler:
        """Take a baseline sample and start the thread."""
        self._started = time.perf_counter()
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="resource-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Measurement:
        """Stop the thread, take a final sample and return the measurement."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with contextlib.suppress(Exception):
            self.sample()
        self.result.wall_seconds = time.perf_counter() - self._started
        self.result.cpu_seconds = sum(
            self._cpu_last[key] - self._cpu_start.get(key, 0.0) for key in self._cpu_last
        )
        return self.result

    def __enter__(self) -> ResourceSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
