"""The ``auto`` compute backend: per stage, the backend that won the benchmark at that size.

It reads ``benchmark_results`` (our pipeline's rows only, and only those recorded on a machine
with this machine's core count: a 64-core machine's winner says nothing about two cores) and
takes, for every (size, backend), that pair's latest measurement: the repetitions of the most
recent benchmark run that measured it. So a partial run (one backend at one size) replaces only
what it measured, not the whole crossover. A size counts only where at least two backends have
results, as in the report's recommendation: the only backend measured there won nothing. At each
such size the backend with the lowest median wall time (DuckDB's ``median``, the same true median
the benchmark report uses) wins; every ``run`` picks the winner of the measured size nearest (on
a log scale) to the stage's input rows. The log names the backends compared at each size and the
run, commit and machine of the figures used. Without any usable results (none, none from a
machine like this one, or no size with two backends) it uses ``in_process`` and says why in the
log; results that cannot be read are logged as the error they are, and it falls back to
``in_process`` too.

Inside a stage the warehouse catalog is already open read-write in this process, and DuckDB
refuses a second, read-only connection to it: the results are read through that open session when
the benchmark catalog is the warehouse's own (:meth:`Catalog.connect` finds it).

The input rows of a stage are estimated from its tasks: Parquet footers for tasks that read a
shard (``input_path``), the byte range or file size of ingest tasks (the uncompressed size of a
gzip or zstd file where its header or trailer says it), else the previous estimate.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import duckdb

from llm_assets.compute.base import ComputeBackend, OnResult, R, T
from llm_assets.warehouse.benchmarks import BenchmarkFigures, read_figures
from llm_assets.warehouse.catalog import CatalogLockedError

FALLBACK_BACKEND = "in_process"
BYTES_PER_ROW = 500
"""Rough size of one JSONL document (WikiText-2 rows are ~440 characters plus the JSON)."""
COMPRESSION_RATIO = 5.0
"""Uncompressed / compressed bytes of a JSONL corpus whose compressed file does not state its
uncompressed size (a streamed zstd frame): the generated corpus is 5.4x at zstd level 10 and
4.1x as gzip."""


def describe_machine(machine: str | None) -> str:
    """A recorded ``machine`` column (JSON) in a few words: cores, memory, platform."""
    try:
        info = json.loads(machine) if machine else {}
    except ValueError:
        return str(machine)
    if not isinstance(info, dict):
        return str(machine)
    words = [
        f"{info['cores']} cores" if "cores" in info else "",
        f"{info['memory_gb']} GB" if "memory_gb" in info else "",
        str(info.get("platform") or ""),
    ]
    return ", ".join(word for word in words if word) or "unknown machine"


def _alone(figures: BenchmarkFigures) -> str:
    """The sizes with only one backend measured on this machine, e.g. ``1,000 rows: ray``."""
    return ", ".join(
        f"{size:,} rows: {figs[0].backend}"
        for size, figs in figures.by_size.items()
        if len(figs) == 1
    )


def _left_out(figures: BenchmarkFigures) -> str:
    """The results recorded with another core count, as the end of a log line (or nothing)."""
    if not figures.elsewhere:
        return ""
    return f"; left out, recorded with another core count: {_elsewhere(figures)}"


def _elsewhere(figures: BenchmarkFigures) -> str:
    """``64 cores: 4 result(s) from run(s) bigbox``, one such part per other core count."""
    return "; ".join(
        f"{e.cores if e.cores is not None else 'unknown'} cores: {e.results} result(s) from "
        f"run(s) {', '.join(e.run_ids)}"
        for e in figures.elsewhere
    )


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
        self.figures: BenchmarkFigures | None = None
        """What the results held, once read (None until then, or when they could not be)."""
        self._last_rows: int | None = None
        self.choices: list[tuple[int | None, str]] = []
        """(estimated rows, backend) of every run, for tests, logs and asset metadata."""
        self._reported = 0

    def winners(self) -> dict[int, str]:
        """The benchmark winners per size, read once, with what they rest on logged: the
        backends compared at each size and the run, commit and machine of the figures. Falls
        back (empty) with the reason logged: no results yet, none recorded on a machine with
        this one's core count (naming those found), no size with two backends measured, or the
        error that kept them from being read."""
        if self._winners is not None:
            return self._winners
        self._winners = {}
        try:
            figures = read_figures(self.catalog_path)
        except (duckdb.Error, CatalogLockedError, OSError) as exc:
            self.log.warning(
                f"backend auto: cannot read the benchmark results in {self.catalog_path} "
                f"({type(exc).__name__}: {exc}); using {FALLBACK_BACKEND}"
            )
            return self._winners
        self.figures = figures
        self._winners = figures.winners
        measure = "materialize benchmark_report to measure this machine"
        if not figures.by_size and not figures.elsewhere:
            self.log.info(
                f"backend auto: no benchmark results in {self.catalog_path}; using "
                f"{FALLBACK_BACKEND} ({measure})"
            )
        elif not figures.by_size:
            self.log.warning(
                f"backend auto: the benchmark results in {self.catalog_path} were all recorded "
                f"on machines with another core count ({_elsewhere(figures)}), none on one "
                f"with this machine's {figures.cores} cores; using {FALLBACK_BACKEND} "
                f"({measure})"
            )
        elif not self._winners:
            self.log.warning(
                f"backend auto: the benchmark results in {self.catalog_path} for this "
                f"machine's {figures.cores} cores measured one backend per size "
                f"({_alone(figures)}): nothing to compare; using {FALLBACK_BACKEND} ({measure} "
                f"with at least two backends){_left_out(figures)}"
            )
        else:
            self.log.info(self._basis(figures))
        return self._winners

    def _basis(self, figures: BenchmarkFigures) -> str:
        """The log line of what the winners rest on: per size the backends compared (fastest
        first, median seconds), the run, commit and machine of those figures, and the results
        left out for another core count."""
        compared = figures.compared
        per_size = "; ".join(
            f"{size:,} rows: {figs[0].backend} (compared "
            + ", ".join(f"{f.backend} {f.seconds:.2f} s" for f in figs)
            + ")"
            for size, figs in compared.items()
        )
        sources = sorted(
            {
                (f.benchmark_run_id, f.git_commit or "unknown", describe_machine(f.machine))
                for figs in compared.values()
                for f in figs
            }
        )
        used = "; ".join(
            f"run {run} (commit {commit}, {machine})" for run, commit, machine in sources
        )
        alone = _alone(figures)
        return (
            f"backend auto: fastest per size on this machine's {figures.cores} cores "
            f"({self.catalog_path}): {per_size}; figures from {used}"
            + (f"; left out, one backend measured: {alone}" if alone else "")
            + _left_out(figures)
        )

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
