"""The ceiling: tokenizer-only throughput on the same rows and cores, nothing else.

The texts are normalized (``ascii_lower``) up front and held in memory; only the GPT-2 encode is
timed, with the same tokenizer the pipeline uses. Parallel: ``workers`` spawned processes, each
encoding its slice (handed over and tokenizer built before the clock starts; the time is the
slowest worker's). tiktoken's own thread pool is measured too (it did not scale here) and the
best of the three ways is the ceiling. No reading, no Parquet, no catalog: a pipeline cannot
beat this figure.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow as pa

from llm_assets.lib.normalize import NormalizeSpec, normalize_array
from llm_assets.lib.tokenization import TokenizerSpec


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


def _encode_slice(texts: list[str]) -> float:
    """Worker side: encode one slice, return only the encode time."""
    return _timed(texts, 1)[0]


def _warm(_: int) -> int:
    TokenizerSpec().build()
    return 0


def _processes_seconds(texts: list[str], workers: int, repetitions: int) -> float:
    import multiprocessing

    size = -(-len(texts) // workers)
    slices = [texts[i : i + size] for i in range(0, len(texts), size)]
    ctx = multiprocessing.get_context("spawn")
    times = []
    with ctx.Pool(workers) as pool:
        pool.map(_warm, range(workers), chunksize=1)
        for _ in range(repetitions):
            times.append(max(pool.map(_encode_slice, slices, chunksize=1)))
    return statistics.median(times)


def tokenizer_ceiling(texts: Sequence[str], workers: int, repetitions: int = 3) -> Ceiling:
    """Median time to GPT-2-encode the normalized ``texts``, the best way on ``workers`` cores."""
    normalized = normalize_array(pa.array(list(texts), pa.string()), NormalizeSpec("ascii_lower"))
    prepared = [t for t in normalized.to_pylist() if t]
    _timed(prepared[:1000], workers)  # build the tokenizer and warm its caches
    single = [_timed(prepared, 1) for _ in range(repetitions)]
    single_seconds = statistics.median(s for s, _ in single)
    threads_seconds = processes_seconds = single_seconds
    if workers > 1:
        threads_seconds = statistics.median(
            _timed(prepared, workers)[0] for _ in range(repetitions)
        )
        processes_seconds = _processes_seconds(prepared, workers, repetitions)
    return Ceiling(
        rows=len(texts),
        tokens=single[0][1],
        workers=workers,
        seconds=min(single_seconds, threads_seconds, processes_seconds),
        single_thread_seconds=single_seconds,
        threads_seconds=threads_seconds,
        processes_seconds=processes_seconds,
    )
