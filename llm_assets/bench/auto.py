"""The ``auto`` compute backend: per stage, the backend that won the benchmark at that size.

It reads the latest benchmark run in the catalog's ``benchmark_results`` (our pipeline's rows
only), takes the backend with the lowest median wall time at each measured size, and for every
``run`` picks the winner of the measured size nearest (on a log scale) to the stage's input rows.
Without any benchmark results it uses ``in_process`` and says so in the log.

The input rows of a stage are estimated from its tasks: Parquet footers for tasks that read a
shard (``input_path``), the byte range or file size of ingest tasks, else the previous estimate.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from llm_assets.compute.base import ComputeBackend, OnResult, R, T

FALLBACK_BACKEND = "in_process"
BYTES_PER_ROW = 500
"""Rough size of one JSONL document (WikiText-2 rows are ~440 characters plus the JSON)."""


def latest_winners(catalog_path: str | Path) -> dict[int, str]:
    """Size -> fastest backend of our pipeline in the most recent benchmark run (empty if none)."""
    import duckdb

    path = Path(catalog_path)
    if not path.exists():
        return {}
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return {}
    try:
        rows = con.execute(
            """
            WITH latest AS (
                SELECT benchmark_run_id FROM benchmark_results WHERE runner = 'ours'
                ORDER BY recorded_at DESC LIMIT 1
            ), medians AS (
                SELECT size, backend, median(seconds) AS seconds FROM benchmark_results
                WHERE runner = 'ours' AND benchmark_run_id = (SELECT * FROM latest)
                GROUP BY size, backend
            )
            SELECT size, arg_min(backend, seconds) FROM medians GROUP BY size ORDER BY size
            """
        ).fetchall()
    except duckdb.Error:
        return {}
    finally:
        con.close()
    return {int(size): str(backend) for size, backend in rows}


def choose_backend(winners: dict[int, str], rows: int) -> str | None:
    """The winner at the measured size nearest to ``rows`` (log distance); None without data."""
    if not winners:
        return None
    target = math.log(max(rows, 1))
    nearest = min(winners, key=lambda size: (abs(math.log(max(size, 1)) - target), size))
    return winners[nearest]


def estimate_rows(tasks: Sequence[Any]) -> int | None:
    """Input rows of a stage from its tasks' input files; None when no task says."""
    import pyarrow.parquet as pq

    total, known = 0, False
    for task in tasks:
        input_path = getattr(task, "input_path", None)
        path = input_path or getattr(task, "path", None)
        if not isinstance(path, str) or not os.path.exists(path):
            continue
        if path.endswith(".parquet"):
            total += pq.read_metadata(path).num_rows
        else:
            byte_range = getattr(task, "byte_range", None)
            size = byte_range[1] - byte_range[0] if byte_range else os.path.getsize(path)
            total += size // BYTES_PER_ROW
        known = True
    return total if known else None


class AutoBackend(ComputeBackend):
    """Delegates each ``run`` to the benchmark's winner for the stage's input size."""

    name = "auto"

    def __init__(
        self,
        catalog_path: str | Path,
        *,
        make: Callable[[str], ComputeBackend],
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.catalog_path = Path(catalog_path)
        self._make = make
        self._backends: dict[str, ComputeBackend] = {}
        self._winners: dict[int, str] | None = None
        self._last_rows: int | None = None
        self.choices: list[tuple[int | None, str]] = []
        """(estimated rows, backend) of every run, for tests and logs."""

    def winners(self) -> dict[int, str]:
        """The benchmark winners per size, read once."""
        if self._winners is None:
            self._winners = latest_winners(self.catalog_path)
            if not self._winners:
                self.log.info(
                    f"backend auto: no benchmark results in {self.catalog_path}; using "
                    f"{FALLBACK_BACKEND} (materialize benchmark_report to measure this machine)"
                )
        return self._winners

    def select(self, tasks: Sequence[Any]) -> str:
        """The backend for these tasks."""
        rows = estimate_rows(tasks)
        rows = rows if rows is not None else self._last_rows
        self._last_rows = rows
        chosen = choose_backend(self.winners(), rows or 0) or FALLBACK_BACKEND
        self.choices.append((rows, chosen))
        if self._winners:
            self.log.info(f"backend auto: ~{rows} input rows -> {chosen}")
        return chosen

    def backend(self, name: str) -> ComputeBackend:
        """The named backend, started once and kept for later stages."""
        if name not in self._backends:
            self._backends[name] = self._make(name)
        return self._backends[name]

    def run(
        self, fn: Callable[[T], R], tasks: Sequence[T], on_result: OnResult | None = None
    ) -> list[R]:
        if not tasks:
            return []
        return self.backend(self.select(tasks)).run(fn, tasks, on_result)

    @property
    def parallelism(self) -> int:
        return max((b.parallelism for b in self._backends.values()), default=1)

    def worker_pids(self) -> list[int]:
        return [pid for b in self._backends.values() for pid in b.worker_pids()]

    def close(self) -> None:
        for backend in self._backends.values():
            backend.close()
        self._backends = {}
