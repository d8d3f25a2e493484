"""Measure a run: wall time, CPU time and peak memory of the driver and every descendant process.

A sampler thread wakes every ``interval_s`` (default 50 ms) and walks the driver's process tree:
worker pools, and Ray's gcs_server, raylet and workers when the run started the local Ray (they
are children of the driver, or of its raylet). Memory is the *sum* of PSS over the tree at one
instant (shared pages split between the processes that map them, so spawned workers that share
libraries are not counted twice; RSS when PSS cannot be read), and the peak of that sum over the
run. The driver's own peak RSS is kept too (the study reported that figure alone).

The sampler must not take the CPU it measures: on two cores, reading every process's PSS
(``/proc/<pid>/smaps_rollup``, a walk of its page tables: 0.4-1.6 ms a process) 20 times a second
took 13 % of a core beside a multiprocess run and 25 % beside Ray's seven processes. So every tick
reads only RSS (``statm``, ~20 us) and CPU times; the PSS of the whole tree is read when the RSS
sum reaches a new high (by ``pss_on_rise``, 1 %) and at least every ``pss_every_s`` (0.5 s), and
at start and stop. A process's PSS never exceeds its RSS, and what grows during a run is private
memory, counted alike by both, so the PSS peak is taken where the RSS peak is. The tree itself
(a scan of ``/proc``) is listed again every ``tree_every_s`` (0.2 s).

CPU seconds are user + system time of every process seen, at the last moment it was seen, minus
what it had used when the measurement began: a process that exits during the run keeps its
last-seen value. A process that lives less than ``tree_every_s`` can be missed (its memory too).
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
    pss_samples: int = 0
    """Samples that read PSS (on a new RSS high, every ``pss_every_s``, first and last)."""
    memory_kind: str = "pss"
    """``pss``, or ``rss`` when PSS could not be read for some process."""
    per_process_peak_mb: dict[str, float] = field(default_factory=dict)
    """Peak PSS per process name (summed over processes of the same name at one sample)."""

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (for JSON reports)."""
        return asdict(self)


def _pss(proc: psutil.Process) -> tuple[int, bool]:
    """(PSS bytes, True), or (RSS bytes, False) when PSS cannot be read."""
    try:
        full = proc.memory_full_info()
        pss = getattr(full, "pss", None)
        if pss is not None:
            return int(pss), True
        return int(full.rss), False
    except psutil.AccessDenied:
        return int(proc.memory_info().rss), False


def _cpu(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


class ResourceSampler:
    """Samples the process tree rooted at ``pid`` (default: this process) in a thread.

    Use as a context manager or call :meth:`start` and :meth:`stop`; :attr:`result` holds the
    :class:`Measurement` once stopped.
    """

    def __init__(
        self,
        pid: int | None = None,
        interval_s: float = 0.05,
        *,
        pss_every_s: float = 0.5,
        pss_on_rise: float = 0.01,
        tree_every_s: float = 0.2,
    ) -> None:
        self.root = psutil.Process(pid or os.getpid())
        self.interval_s = interval_s
        self.pss_every_s = pss_every_s
        self.pss_on_rise = pss_on_rise
        self.tree_every_s = tree_every_s
        self.result = Measurement()
        self._procs: dict[int, psutil.Process] = {}
        self._names: dict[tuple[int, float], str] = {}
        self._tree_cache: list[psutil.Process] = []
        self._tree_at = -float("inf")
        self._pss_at = -float("inf")
        self._rss_high = 0
        self._cpu_start: dict[tuple[int, float], float] = {}
        self._cpu_last: dict[tuple[int, float], float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._started = 0.0

    def _tree(self, now: float, force: bool) -> list[psutil.Process]:
        if not force and now - self._tree_at < self.tree_every_s:
            return self._tree_cache
        self._tree_at = now
        try:
            children = self.root.children(recursive=True)
        except psutil.Error:
            children = []
        current = []
        for proc in [self.root, *children]:
            known = self._procs.get(proc.pid)
            # Reuse the Process object (a recycled pid gets a new create_time, hence a new key).
            try:
                if known is None or known.create_time() != proc.create_time():
                    self._procs[proc.pid] = proc
                    known = proc
            except psutil.Error:
                continue
            current.append(known)
        self._tree_cache = current
        return current

    def sample(self, force_pss: bool = False) -> None:
        """Take one sample now (the thread calls this; ``force_pss`` reads PSS whatever the RSS
        did, as the first and the last sample do)."""
        with self._lock:
            now = time.monotonic()
            result = self.result
            alive: list[tuple[psutil.Process, tuple[int, float], int]] = []
            total_rss = 0
            for proc in self._tree(now, force_pss):
                try:
                    key = (proc.pid, proc.create_time())
                    rss = int(proc.memory_info().rss)
                    cpu = _cpu(proc)
                    if key not in self._names:
                        self._names[key] = proc.name()
                except psutil.Error:
                    continue
                alive.append((proc, key, rss))
                total_rss += rss
                self._cpu_start.setdefault(key, cpu if self._is_baseline() else 0.0)
                self._cpu_last[key] = cpu
                if proc.pid == self.root.pid:
                    result.peak_driver_rss_mb = max(result.peak_driver_rss_mb, rss / MB)
            result.samples += 1
            result.peak_processes = max(result.peak_processes, len(alive))
            result.processes_seen = len(self._cpu_last)
            rose = total_rss > self._rss_high * (1 + self.pss_on_rise)
            if force_pss or rose or now - self._pss_at >= self.pss_every_s:
                self._pss_at = now
                self._rss_high = max(self._rss_high, total_rss)
                self._read_pss(alive)

    def _read_pss(self, alive: list[tuple[psutil.Process, tuple[int, float], int]]) -> None:
        result = self.result
        total = 0
        by_name: dict[str, float] = {}
        for proc, key, rss in alive:
            try:
                memory, is_pss = _pss(proc)
            except psutil.Error:
                memory, is_pss = rss, False  # gone since its RSS was read: count that
            if not is_pss:
                result.memory_kind = "rss"
            total += memory
            name = self._names[key]
            by_name[name] = by_name.get(name, 0.0) + memory / MB
            if proc.pid == self.root.pid:
                result.peak_driver_pss_mb = max(result.peak_driver_pss_mb, memory / MB)
        result.pss_samples += 1
        result.peak_total_pss_mb = max(result.peak_total_pss_mb, total / MB)
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
        self.sample(force_pss=True)
        self._thread = threading.Thread(target=self._loop, name="resource-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Measurement:
        """Stop the thread, take a final sample and return the measurement."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with contextlib.suppress(Exception):
            self.sample(force_pss=True)
        self.result.wall_seconds = time.perf_counter() - self._started
        self.result.cpu_seconds = sum(
            self._cpu_last[key] - self._cpu_start.get(key, 0.0) for key in self._cpu_last
        )
        return self.result

    def __enter__(self) -> ResourceSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
