"""The ceiling: tokenizer-only throughput on the same rows and cores, nothing else.

The texts are normalized (``ascii_lower``) up front and held in memory; only the GPT-2 encode is
timed, with the same tokenizer the pipeline uses, two ways:

- row by row (``encode_batch``: tiktoken's ``encode_ordinary`` per text, what the study did), in
  one thread, in tiktoken's own thread pool (it did not scale here), and in ``workers`` processes;
- as the pipeline's tokenize kernel does it (``encode_arrow``: each distinct word of an 8K-row
  batch encoded once), in one process and in ``workers`` processes.

Processes are spawned, the slices handed over and the tokenizer built before the clock starts;
the time is the slowest worker's. The best of all is the ceiling. No reading, no Parquet, no
catalog: a pipeline cannot beat this figure.

Beside it, :func:`kernels_bound` times the least work any pipeline of the study's job must do with
our kernels: parse each JSON line, normalize, tokenize, drop documents under the study's minimum,
on lines already in memory, in ``workers`` processes, with nothing written. The gap between it
and the tokenizer-only ceiling is the work the job needs besides the tokenizer; the gap between
it and our pipeline is what materializing five stages (Parquet, catalog, scheduling) costs.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from llm_assets.kernels.normalize import NormalizeSpec, normalize_array
from llm_assets.kernels.tokenize.spec import TokenizerSpec
from llm_assets.stages.shard_io import KERNEL_BATCH_ROWS

STUDY_NORMALIZE = "ascii_lower"


@dataclass
class Ceiling:
    """Tokenizer-only throughput (median of the repetitions)."""

    rows: int
    tokens: int
    workers: int
    seconds: float
    """Best of: one thread, ``workers`` tiktoken threads, ``workers`` processes."""
    single_thread_seconds: float
    threads_seconds: float
    processes_seconds: float
    by_words_seconds: float = float("inf")
    """The pipeline's kernel path (``encode_arrow``), one process."""
    by_words_processes_seconds: float = float("inf")
    """The pipeline's kernel path on ``workers`` processes."""

    @property
    def row_by_row_seconds(self) -> float:
        """Best row-by-row time (the study's way of calling the tokenizer)."""
        return min(self.single_thread_seconds, self.threads_seconds, self.processes_seconds)

    @property
    def rows_per_second(self) -> float:
        return self.rows / max(self.seconds, 1e-9)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict with the rates (for JSON reports)."""
        return {
            **asdict(self),
            "rows_per_second": self.rows_per_second,
            "tokens_per_second": self.tokens_per_second,
            "single_thread_rows_per_second": self.rows / max(self.single_thread_seconds, 1e-9),
        }


def _timed(texts: list[str], threads: int) -> tuple[float, int]:
    tok = TokenizerSpec(threads=threads).build()
    started = time.perf_counter()
    ids = tok.encode_batch(texts)
    return time.perf_counter() - started, sum(len(x) for x in ids)


def _timed_by_words(texts: list[str]) -> float:
    """Seconds for the tokenize kernel's way: ``encode_arrow`` over batches of its size."""
    tok = TokenizerSpec().build()
    array = pa.array(texts, pa.string())
    started = time.perf_counter()
    for offset in range(0, len(array), KERNEL_BATCH_ROWS):
        tok.encode_arrow(array.slice(offset, KERNEL_BATCH_ROWS))
    return time.perf_counter() - started


def _encode_slice(texts: list[str]) -> float:
    """Worker side: encode one slice, return only the encode time."""
    return _timed(texts, 1)[0]


def _encode_slice_by_words(texts: list[str]) -> float:
    """Worker side: encode one slice the kernel's way, return only the encode time."""
    return _timed_by_words(texts)


def _warm(_: int) -> int:
    TokenizerSpec().build()
    return 0


def _processes_seconds(
    texts: list[Any], workers: int, repetitions: int, encode: Callable[[list[Any]], float]
) -> float:
    import multiprocessing

    size = -(-len(texts) // workers)
    slices = [texts[i : i + size] for i in range(0, len(texts), size)]
    ctx = multiprocessing.get_context("spawn")
    times = []
    with ctx.Pool(workers) as pool:
        pool.map(_warm, range(workers), chunksize=1)
        for _ in range(repetitions):
            times.append(max(pool.map(encode, slices, chunksize=1)))
        pool.close()  # workers exit on their own: see reference.run_multiprocessing
        pool.join()
    return statistics.median(times)


def tokenizer_ceiling(texts: Sequence[str], workers: int, repetitions: int = 3) -> Ceiling:
    """Median time to GPT-2-encode the normalized ``texts``, the best way on ``workers`` cores."""
    normalized = normalize_array(pa.array(list(texts), pa.string()), NormalizeSpec(STUDY_NORMALIZE))
    prepared = [t for t in normalized.to_pylist() if t]
    _timed(prepared[:1000], workers)  # build the tokenizer and warm its caches
    single = [_timed(prepared, 1) for _ in range(repetitions)]
    single_seconds = statistics.median(s for s, _ in single)
    threads_seconds = processes_seconds = single_seconds
    if workers > 1:
        threads_seconds = statistics.median(
            _timed(prepared, workers)[0] for _ in range(repetitions)
        )
        processes_seconds = _processes_seconds(prepared, workers, repetitions, _encode_slice)
    by_words = statistics.median(_timed_by_words(prepared) for _ in range(repetitions))
    by_words_processes = by_words
    if workers > 1:
        by_words_processes = _processes_seconds(
            prepared, workers, repetitions, _encode_slice_by_words
        )
    return Ceiling(
        rows=len(texts),
        tokens=single[0][1],
        workers=workers,
        seconds=min(
            single_seconds, threads_seconds, processes_seconds, by_words, by_words_processes
        ),
        single_thread_seconds=single_seconds,
        threads_seconds=threads_seconds,
        processes_seconds=processes_seconds,
        by_words_seconds=by_words,
        by_words_processes_seconds=by_words_processes,
    )


@dataclass
class KernelsBound:
    """The study's job on in-memory JSON lines with our kernels, nothing written (median)."""

    rows: int
    rows_kept: int
    workers: int
    seconds: float
    """Slowest of ``workers`` processes, each on its slice of the lines."""
    single_process_seconds: float

    @property
    def rows_per_second(self) -> float:
        return self.rows / max(self.seconds, 1e-9)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict with the rate (for JSON reports)."""
        return {**asdict(self), "rows_per_second": self.rows_per_second}


def run_kernels(lines: list[bytes], min_tokens: int) -> tuple[float, int]:
    """Parse, normalize (``ascii_lower``), tokenize and length-filter ``lines`` in batches of
    the kernels' size; return the seconds (tokenizer built before the clock) and rows kept."""
    tok = TokenizerSpec().build()
    spec = NormalizeSpec(STUDY_NORMALIZE)
    loads = orjson.loads
    kept = 0
    started = time.perf_counter()
    for offset in range(0, len(lines), KERNEL_BATCH_ROWS):
        texts = [loads(line).get("text") for line in lines[offset : offset + KERNEL_BATCH_ROWS]]
        _, counts = tok.encode_arrow(normalize_array(pa.array(texts, pa.string()), spec))
        kept += pc.sum(pc.greater_equal(counts, min_tokens)).as_py() or 0
    return time.perf_counter() - started, kept


def _run_kernels_seconds(lines: list[bytes], min_tokens: int) -> float:
    """Worker side of :func:`kernels_bound`: only the time."""
    return run_kernels(lines, min_tokens)[0]


def kernels_bound(
    lines: Sequence[bytes], workers: int, min_tokens: int, repetitions: int = 3
) -> KernelsBound:
    """Median time of :func:`run_kernels` on one process and split over ``workers`` processes
    (spawned, tokenizer built and slices handed over before the clock; the slowest counts)."""
    lines = [line for line in lines if line.strip()]
    run_kernels(lines[:1000], min_tokens)  # build the tokenizer and warm its caches
    single = [run_kernels(lines, min_tokens) for _ in range(repetitions)]
    single_seconds = statistics.median(s for s, _ in single)
    seconds = single_seconds
    if workers > 1:
        work = functools.partial(_run_kernels_seconds, min_tokens=min_tokens)
        seconds = min(seconds, _processes_seconds(lines, workers, repetitions, work))
    return KernelsBound(len(lines), single[0][1], workers, seconds, single_seconds)
