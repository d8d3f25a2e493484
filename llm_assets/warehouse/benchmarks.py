"""The benchmark history: the ``benchmark_results`` table of the warehouse catalog.

Results are appended (never replaced), one row per measured repetition, with the git commit and
the machine, so runs across commits and machines can be compared with SQL. Only the driver writes
it, through one short connection. The benchmark writes it; the ``auto`` compute backend reads
each (size, backend)'s latest figures from it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_assets.machine import machine_cores, machine_info
from llm_assets.warehouse.catalog import Catalog, insert_values

RESULTS_TABLE = "benchmark_results"

_RESULTS_SQL = f"""
CREATE TABLE IF NOT EXISTS {RESULTS_TABLE} (
    benchmark_run_id VARCHAR NOT NULL,
    git_commit VARCHAR,
    recorded_at TIMESTAMP, -- UTC (an older catalog's rows may hold the recorder's local time)
    machine_cores INTEGER,
    machine_memory_gb DOUBLE,
    machine VARCHAR,
    size BIGINT,
    runner VARCHAR,
    backend VARCHAR,
    workers INTEGER,
    repetition INTEGER,
    rows_in BIGINT,
    rows_out BIGINT,
    tokens BIGINT,
    bytes_in BIGINT,
    seconds DOUBLE,
    startup_seconds DOUBLE,
    shutdown_seconds DOUBLE,
    stage_seconds JSON,
    rows_per_second DOUBLE,
    tokens_per_second DOUBLE,
    mb_per_second DOUBLE,
    peak_driver_rss_mb DOUBLE,
    peak_total_pss_mb DOUBLE,
    cpu_seconds DOUBLE,
    peak_processes INTEGER,
    memory_kind VARCHAR,
    stage_parts JSON
);
-- Catalogs written before stage_parts existed get the column (null in their old rows).
ALTER TABLE {RESULTS_TABLE} ADD COLUMN IF NOT EXISTS stage_parts JSON;
"""
_COLUMNS = 28

HISTORY_SQL = f"""SELECT benchmark_run_id, git_commit, size, runner, backend,
       median(seconds) AS seconds, quantile_disc(rows_in, 0.5) / median(seconds) AS rows_s,
       max(peak_total_pss_mb) AS peak_mb, min(recorded_at) AS measured_at
FROM {RESULTS_TABLE} GROUP BY ALL ORDER BY measured_at, size, runner, backend;"""
"""Every run's medians in the order they were measured (run ids are UUIDs: their order is not
time's; ``recorded_at`` is UTC). ``rows_s`` is the report's figure: the lower middle rows read
(``quantile_disc``, as :func:`statistics.median_low`) over the median seconds, not the median of
each repetition's rows/s, which differs for an even number of repetitions. The same query opens
"History in SQL" in benchmarks/README.md; a test holds them equal."""

READ_TIMEOUT_S = 10.0
"""How long to wait for a benchmark catalog another process holds before falling back."""

_FIGURES_SQL = f"""
WITH here AS (
    -- our pipeline's results recorded on a machine with this machine's core count
    SELECT * FROM {RESULTS_TABLE} WHERE runner = 'ours' AND machine_cores = $cores
), latest AS (
    -- every (size, backend): the most recent benchmark run that measured it
    SELECT size, backend, arg_max(benchmark_run_id, recorded_at) AS benchmark_run_id
    FROM here GROUP BY size, backend
), medians AS (
    SELECT h.size, h.backend, median(h.seconds) AS seconds, h.benchmark_run_id,
           any_value(h.git_commit) AS git_commit, any_value(h.machine) AS machine
    FROM here h JOIN latest l USING (size, backend, benchmark_run_id)
    GROUP BY h.size, h.backend, h.benchmark_run_id
)
SELECT size, backend, seconds, benchmark_run_id, git_commit, machine FROM medians
ORDER BY size, seconds, backend
"""
"""Each (size, backend) at its latest measurement on this machine's core count, fastest first
per size (ties by backend name, as the report breaks them)."""

_ELSEWHERE_SQL = f"""
SELECT machine_cores, count(*), list(DISTINCT benchmark_run_id ORDER BY benchmark_run_id)
FROM {RESULTS_TABLE} WHERE runner = 'ours' AND machine_cores IS DISTINCT FROM $cores
GROUP BY machine_cores ORDER BY machine_cores NULLS LAST
"""
"""Our results recorded with another core count (or none): named in the log, never used."""


@dataclass(frozen=True)
class Figure:
    """One (size, backend) at its latest measurement: the median seconds of that run's
    repetitions, and where they come from."""

    size: int
    backend: str
    seconds: float
    benchmark_run_id: str
    git_commit: str | None
    machine: str | None
    """The ``machine`` column: the recording machine's description, as JSON."""


@dataclass(frozen=True)
class Elsewhere:
    """Results of our pipeline recorded on machines with another core count (None: unknown)."""

    cores: int | None
    results: int
    run_ids: list[str]


@dataclass(frozen=True)
class BenchmarkFigures:
    """What ``benchmark_results`` holds for a machine with ``cores`` cores, and what it holds
    for others."""

    cores: int
    """The core count the figures were selected by (this machine's)."""
    by_size: dict[int, list[Figure]] = field(default_factory=dict)
    """Per size, each backend's figure, fastest first; sizes with one backend included."""
    elsewhere: list[Elsewhere] = field(default_factory=list)

    @property
    def compared(self) -> dict[int, list[Figure]]:
        """The sizes where at least two backends were measured: the only ones with a winner."""
        return {size: figs for size, figs in self.by_size.items() if len(figs) > 1}

    @property
    def winners(self) -> dict[int, str]:
        """Size -> the fastest backend, at the sizes where it was compared with another."""
        return {size: figs[0].backend for size, figs in self.compared.items()}


def read_figures(catalog_path: str | Path, cores: int | None = None) -> BenchmarkFigures:
    """Our pipeline's figures in ``benchmark_results`` recorded with ``cores`` cores (default
    this machine's, counted by :func:`~llm_assets.machine.machine_cores` as the recorder
    counts them), each (size, backend) at its latest measurement, and a count of the results
    recorded with other core counts.

    Empty when the catalog or its ``benchmark_results`` table does not exist (nothing measured
    yet). A catalog that cannot be opened or read raises (``duckdb.Error``,
    :class:`~llm_assets.warehouse.catalog.CatalogLockedError`): that is not "no results"."""
    cores = machine_cores() if cores is None else cores
    path = Path(catalog_path)
    if not path.exists():
        return BenchmarkFigures(cores)
    with Catalog(path, lock_timeout_s=READ_TIMEOUT_S).connect(read_only=True) as con:
        (exists,) = con.execute(
            "SELECT count(*) > 0 FROM duckdb_tables() WHERE table_name = ?", [RESULTS_TABLE]
        ).fetchone()
        if not exists:
            return BenchmarkFigures(cores)
        rows = con.execute(_FIGURES_SQL, {"cores": cores}).fetchall()
        elsewhere = con.execute(_ELSEWHERE_SQL, {"cores": cores}).fetchall()
    by_size: dict[int, list[Figure]] = {}
    for size, backend, seconds, run_id, commit, machine in rows:
        figure = Figure(int(size), str(backend), float(seconds), str(run_id), commit, machine)
        by_size.setdefault(figure.size, []).append(figure)
    return BenchmarkFigures(
        cores, by_size, [Elsewhere(c, int(n), [str(r) for r in ids]) for c, n, ids in elsewhere]
    )


def read_winners(catalog_path: str | Path, cores: int | None = None) -> dict[int, str]:
    """Size -> fastest backend of our pipeline, each (size, backend) at its latest measurement,
    at the sizes where at least two backends were measured on a machine with ``cores`` cores
    (default this machine's); see :func:`read_figures`."""
    return read_figures(catalog_path, cores).winners


def record_results(
    catalog: Catalog,
    benchmark_run_id: str,
    results: Sequence[Any],
    *,
    machine: dict[str, Any] | None = None,
    commit: str | None = None,
    recorded_at: float | None = None,
) -> int:
    """Append every measured repetition to ``benchmark_results``; return the rows written.
    ``results`` are the benchmark runner's measured runs (its ``RunResult``), read by
    attribute, one row each.

    ``recorded_at`` (seconds since the epoch, default now) is stored as UTC in the TIMESTAMP
    column: converted in the session's time zone, which DuckDB takes from the recording
    process's, the same instant would read as another time under another ``TZ``, and "the
    latest run" (backend ``auto``, the history's order) would depend on where each run was
    recorded."""
    machine = machine or machine_info()
    when = recorded_at if recorded_at is not None else time.time()
    rows = [
        [
            benchmark_run_id,
            commit,
            when,
            machine["cores"],
            machine["memory_gb"],
            json.dumps(machine, sort_keys=True),
            r.size,
            r.runner,
            r.backend,
            r.workers,
            r.repetition,
            r.rows_in,
            r.rows_out,
            r.tokens,
            r.bytes_in,
            r.seconds,
            r.startup_seconds,
            r.shutdown_seconds,
            json.dumps(r.stage_seconds, sort_keys=True),
            r.rows_per_second,
            r.tokens_per_second,
            r.mb_per_second,
            r.peak_driver_rss_mb,
            r.peak_total_pss_mb,
            r.cpu_seconds,
            r.peak_processes,
            r.memory_kind,
            json.dumps(r.stage_parts, sort_keys=True),
        ]
        for r in results
    ]
    placeholders = ", ".join(
        "to_timestamp(?) AT TIME ZONE 'UTC'" if i == 2 else "?" for i in range(_COLUMNS)
    )
    with catalog.connect() as con:
        con.execute(_RESULTS_SQL)
        insert_values(con, f"INSERT INTO {RESULTS_TABLE}", rows, placeholders)
    return len(rows)
