"""The ``auto`` compute backend: per stage, the backend that won the benchmark at that size.

It reads ``benchmark_results`` (our pipeline's rows only) and takes, for every (size, backend),
that pair's latest measurement: the repetitions of the most recent benchmark run that measured it.
So a partial run (one backend at one size) replaces only what it measured, not the whole
crossover. At each measured size the backend with the lowest median wall time (DuckDB's
``median``, the same true median the benchmark report uses) wins; every ``run`` picks the winner
of the measured size nearest (on a log scale) to the stage's input rows. Without any benchmark
results it uses ``in_process`` and says so in the log; results that cannot be read are logged as
the error they are, and it falls back to ``in_process`` too.

Inside a stage the warehouse catalog is already open read-write in this process, and DuckDB
refuses a second, read-only connection to it: the results are read through that open session when
the benchmark catalog is the warehouse's own (:meth:`Catalog.connect` finds it).

The input rows of a stage are estimated from its tasks: Parquet footers for tasks that read a
shard (``input_path``), the byte range or file size of ingest tasks (the uncompressed size of a
gzip or zstd file where its header or trailer says it), else the previous estimate.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import duckdb

from llm_assets.bench.report import RESULTS_TABLE
from llm_assets.compute.base import ComputeBackend, OnResult, R, T
from llm_assets.warehouse.catalog import Catalog, CatalogLockedError

FALLBACK_BACKEND = "in_process"
BYTES_PER_ROW = 500
"""Rough size of one JSONL document (WikiText-2 rows are ~440 characters plus the JSON)."""
COMPRESSION_RATIO = 5.0
"""Uncompressed / compressed bytes of a JSONL corpus whose compressed file does not state its
uncompressed size (a streamed zstd frame): the generated corpus is 5.4x at zstd level 10 and
4.1x as gzip."""
READ_TIMEOUT_S = 10.0
"""How long to wait for a benchmark catalog another process holds before falling back."""

_WINNERS_SQL = """
WITH latest AS (
    -- every (size, backend): the most recent benchmark run that measured it
    SELECT size, backend, arg_max(benchmark_run_id, recorded_at) AS benchmark_run_id
    FROM benchmark_results WHERE runner = 'ours' GROUP BY size, backend
), medians AS (
    SELECT r.size, r.backend, median(r.seconds) AS seconds
    FROM benchmark_results r JOIN latest l USING (size, backend, benchmark_run_id)
    WHERE r.runner = 'ours' GROUP BY r.size, r.backend
)
SELECT size, backend FROM medians
QUALIFY row_number() OVER (PARTITION BY size ORDER BY seconds, backend) = 1
ORDER BY size
"""


def read_winners(catalog_path: str | Path) -> dict[int, str]:
    """Size -> fastest backend of our pipeline, each (size, backend) at its latest measurement.

    Empty when the catalog or its ``benchmark_results`` table does not exist (nothing measured
    yet). A catalog that cannot be opened or read raises (``duckdb.Error``,
    :class:`~llm_assets.warehouse.catalog.CatalogLockedError`): that is not "no results"."""
    path = Path(catalog_path)
    if not path.exists():
        return {}
    with Catalog(path, lock_timeout_s=READ_TIMEOUT_S).connect(read_only=True) as con:
        (exists,) = con.execute(
            "SELECT count(*) > 0 FROM duckdb_tables() WHERE table_name = ?", [RESULTS_TABLE]
        ).fetchone()
        if not exists:
            return {}
        rows = con.execute(_WINNERS_SQL).fetchall()
    return {int(size): str(backend) for size, backend in rows}


def choose_backend(winners: dict[int, str], rows: int) -> str | None:
    """The winner at the measured size nearest to ``rows`` (log distance); None without data."""
    if not winners:
        return None
    return winners[nearest_size(winners, rows)]


def nearest_size(sizes: Iterable[int], rows: int) -> int:
    """The measured size nearest to ``rows`` on a log scale (the smaller one on a tie)."""
    target = math.log(max(rows, 1))
    return min(sizes, key=lambda size: (abs(math.log(max(size, 1)) - target), size))


def uncompressed_size(path: str) -> int:
    """Bytes of ``path`` once decompressed: a gzip file's ISIZE trailer, a zstd frame's content
    size when its header holds one, else the compressed size times :data:`COMPRESSION_RATIO`;
    the file size for anything else. A few bytes read, never the whole file."""
    size = os.path.getsize(path)
    if path.endswith(".gz") and size >= 18:
        with open(path, "rb") as handle:
            handle.seek(-4, os.SEEK_END)
            (isize,) = struct.unpack("<I", handle.read(4))
        # ISIZE is the size modulo 2**32 (and the last member's only): trust it only if plausible.
        return isize if isize >= size else int(size * COMPRESSION_RATIO)
    if path.endswith(".zst"):
        import zstandard

        with open(path, "rb") as handle:
            header = handle.read(18)  # the longest zstd frame header
        try:
            content = zstandard.frame_content_size(header)
        except zstandard.ZstdError:
            content = -1
        return content if content >= 0 else int(size * COMPRESSION_RATIO)
    return size


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
            size = byte_range[1] - byte_range[0] if byte_range else uncompressed_size(path)
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
        """(estimated rows, backend) of every run, for tests, logs and asset metadata."""
        self._reported = 0

    def winners(self) -> dict[int, str]:
        """The benchmark winners per size, read once. Falls back (empty) with the reason logged:
        no results yet, or the error that kept them from being read."""
        if self._winners is None:
            try:
                self._winners = read_winners(self.catalog_path)
            except (duckdb.Error, CatalogLockedError, OSError) as exc:
                self._winners = {}
                self.log.warning(
                    f"backend auto: cannot read the benchmark results in {self.catalog_path} "
                    f"({type(exc).__name__}: {exc}); using {FALLBACK_BACKEND}"
                )
            else:
                if not self._winners:
                    self.log.info(
                        f"backend auto: no benchmark results in {self.catalog_path}; using "
                        f"{FALLBACK_BACKEND} (materialize benchmark_report to measure this "
                        "machine)"
                    )
        return self._winners

    def select(self, tasks: Sequence[Any]) -> str:
        """The backend for these tasks."""
        rows = estimate_rows(tasks)
        rows = rows if rows is not None else self._last_rows
        self._last_rows = rows
        winners = self.winners()
        chosen = choose_backend(winners, rows or 0) or FALLBACK_BACKEND
        self.choices.append((rows, chosen))
        if winners:
            measured = nearest_size(winners, rows or 0)
            self.log.info(
                f"backend auto: ~{rows} input rows -> {chosen} (fastest measured at {measured:,} "
                "rows)"
            )
        return chosen

    def take_choices(self) -> list[tuple[int | None, str]]:
        """The choices made since the last call: a stage's, when called once after each stage
        (its asset metadata records them)."""
        new = self.choices[self._reported :]
        self._reported = len(self.choices)
        return new

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
