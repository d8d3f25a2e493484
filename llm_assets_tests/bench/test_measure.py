"""The sampler sees the driver's child processes: their memory and CPU count."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from llm_assets.bench.measure import ResourceSampler
from llm_assets.bench.runner import run_isolated

ALLOCATE_100MB = (
    "import time\n"
    "block = bytearray(100 * 1024 * 1024)\n"
    "for i in range(0, len(block), 4096): block[i] = 1\n"  # touch every page
    "time.sleep(0.6)\n"
)


def test_child_process_memory_raises_the_peak():
    with ResourceSampler(interval_s=0.05) as idle:
        time.sleep(0.3)
    # PSS is read only when the RSS sum rises (no periodic reads within the minute): the child's
    # 100 MB still reach the peak, and most samples read only RSS.
    with ResourceSampler(interval_s=0.05, pss_every_s=60, tree_every_s=0.05) as busy:
        subprocess.run([sys.executable, "-c", ALLOCATE_100MB], check=True)
    assert 2 <= busy.result.pss_samples < busy.result.samples
    assert busy.result.peak_processes >= 2
    assert busy.result.processes_seen >= 2
    assert busy.result.peak_total_pss_mb - idle.result.peak_total_pss_mb > 80
    # The child's CPU time counts although it exited before the measurement stopped.
    assert busy.result.cpu_seconds > 0.02
    assert busy.result.peak_driver_rss_mb > 0
    assert busy.result.wall_seconds >= 0.6


def test_driver_cpu_before_the_start_does_not_count():
    sum(i * i for i in range(3_000_000))  # CPU spent before the measurement
    with ResourceSampler() as sampler:
        time.sleep(0.2)
    assert sampler.result.cpu_seconds < 0.15


def test_each_benchmark_run_gets_a_fresh_process_and_its_errors_come_back():
    assert run_isolated(os.getpid) != os.getpid()
    assert run_isolated(divmod, 7, 2) == (3, 1)
    with pytest.raises(RuntimeError, match="invalid literal"):
        run_isolated(int, "not a number")
