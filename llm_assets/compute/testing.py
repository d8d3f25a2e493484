"""Tasks for exercising compute backends: importable by spawned and Ray workers.

They live in the installed package (not the test folder) because a worker process imports a task
function by its module name, and only the installed package is importable there.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProbeTask:
    """Square ``value`` (after sleeping ``sleep_s``); optionally die or raise on the first
    ``fail_times`` attempts.

    Attempts are counted with marker files in ``state_dir`` so they survive a killed worker.
    """

    key: str
    value: int
    state_dir: str = ""
    fail_times: int = 0
    mode: str = "ok"  # "ok" | "kill" (SIGKILL the worker) | "raise" | "hang" (sleep an hour)
    sleep_s: float = 0.0


def run_probe(task: ProbeTask) -> dict[str, int]:
    """Worker side of :class:`ProbeTask`."""
    if task.mode != "ok":
        marker_dir = Path(task.state_dir)
        attempt = len(list(marker_dir.glob(f"{task.key}.*"))) + 1
        (marker_dir / f"{task.key}.{attempt}").touch()
        if attempt <= task.fail_times:
            if task.mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if task.mode == "hang":
                time.sleep(3600)
            raise RuntimeError(f"planned failure {attempt} of {task.key}")
    if task.sleep_s:
        time.sleep(task.sleep_s)
    return {"value": task.value * task.value, "pid": os.getpid()}
