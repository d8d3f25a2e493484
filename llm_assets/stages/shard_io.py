"""Worker-side pieces every shard task shares: timing, reading row groups, writing a shard.

Each task is a small frozen dataclass (picklable, a few hundred bytes) naming its input and output
files and the kernel spec. The worker reads its input, runs the kernel batch by batch (memory
bounded by the batch, not the shard), writes its rejects and then its output atomically, and
returns :class:`ShardStats`. Writing the output last makes it the completion marker: a shard whose
output exists with the expected input fingerprint in its footer is done.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from llm_assets import storage
from llm_assets.kernels.schema import REASON, REJECT_SCHEMA, StageResult
from llm_assets.warehouse.shards import (
    INPUT_FINGERPRINT,
    INTERMEDIATE_COMPRESSION,
    ROWS_IN,
    ROWS_REJECTED,
    STATS,
    AtomicParquetWriter,
    read_footer_metadata,
)

TOKENIZER_META = "llm_assets.tokenizer."
"""Prefix of the footer keys naming the tokenizer (from ``tokenized_documents`` on), which every
later stage carries over."""
_FOOTER_BOOKKEEPING = (INPUT_FINGERPRINT, ROWS_IN, ROWS_REJECTED, STATS)


KERNEL_BATCH_ROWS = 8192
"""Rows a kernel gets per call: big enough to amortize per-call costs, small enough to stream."""


READ_THREADS = False
"""Whether a shard task's Parquet reads use Arrow's thread pool: no. The backends run one task per
core, and a worker's pool has one thread (``OMP_NUM_THREADS=1``), so a threaded read only hands
each column chunk to another thread and waits for it. 200K rows on 2 cores, alternating:
multiprocess 5.11-5.19 s instead of 5.16-5.56 s and ~35 MB less peak memory, Ray 6.72-7.04 s
instead of 6.91-7.51 s, in_process unchanged."""


PARTS = ("read", "compute", "write", "commit")
"""The parts of a shard task's time (:class:`PartTimes`): reading its Parquet or Arrow IPC input,
the kernel (for ``raw_documents`` that includes reading and parsing the input file, which are
interleaved line by line), encoding and compressing the output as it is written, and closing,
fsyncing, checksumming and renaming it into place."""


class PartTimes:
    """Seconds one shard task spends in each of :data:`PARTS`, so a stage's time can be split
    by what it does (summed per stage into its ``seconds_by_part``) rather than guessed with a
    profiler. Two clock reads per timed step: nothing next to the work."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PARTS, 0.0)

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Add the time spent in the ``with`` block to part ``name``."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - started

    def as_dict(self) -> dict[str, float]:
        return dict(self.seconds)


def timed_reads(items: Iterable[Any], parts: PartTimes) -> Iterator[Any]:
    """``items`` (batches from a reader), the time to produce each one counted as read."""
    pending = iter(items)
    while True:
        with parts.part("read"):
            item = next(pending, None)
        if item is None:
            return
        yield item


def row_group_batches(
    source: pq.ParquetFile,
    batch_size: int,
    columns: list[str] | None = None,
    groups: tuple[int, int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """The file's record batches (at most ``batch_size`` rows), read one row group at a time;
    with ``groups`` (first, end), only the row groups ``first <= g < end``.

    pyarrow's ``iter_batches`` over a whole file keeps buffers that grow with the file until
    the loop ends: 86 MB of Arrow memory for a 67 MB shard and 214 MB for a 196 MB one, against
    ~20 MB this way, so one big input file (a 1M-row ``.jsonl.gz`` is one raw shard) took a
    worker to 931 MB. Same rows in the same order."""
    first, end = groups if groups is not None else (0, source.metadata.num_row_groups)
    for group in range(first, end):
        yield from source.iter_batches(
            batch_size=batch_size, row_groups=[group], columns=columns, use_threads=READ_THREADS
        )


def add_parts(total: dict[str, float], parts: dict[str, float]) -> dict[str, float]:
    """``total`` plus ``parts``, part by part (missing parts count as 0)."""
    return {k: total.get(k, 0.0) + parts.get(k, 0.0) for k in (*PARTS, *total, *parts)}


def worker_node() -> str:
    """Where this process runs, for a shard's lineage: ``ray:<node id>`` in a process connected
    to Ray (a Ray worker, or a driver that runs shards while Ray starts), else the host name."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        try:
            return f"ray:{ray.get_runtime_context().get_node_id()}"
        except Exception:  # lineage only: the host will do
            pass
    return socket.gethostname()


@dataclass(frozen=True)
class ShardStats:
    """What a task reports back to the driver: small, whatever the shard's size."""

    shard: str
    path: str
    rejects_path: str | None
    rows_in: int
    rows_out: int
    rows_rejected: int
    bytes: int
    checksum: str
    seconds: float
    reject_reasons: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    parts: dict[str, float] = field(default_factory=dict)
    """Seconds per part of the task (:data:`PARTS`)."""
    node: str = field(default_factory=worker_node)
    """Where the task ran (:func:`worker_node`), filled in by the process that built it."""


def _write_shard(
    results: Iterable[StageResult],
    *,
    key: str,
    output_path: str,
    rejects_path: str,
    input_fingerprint: str,
    empty_output_schema: Callable[[], pa.Schema],
    metadata: dict[str, str],
    parts: PartTimes | None = None,
    started: float | None = None,
) -> ShardStats:
    """Stream kernel results into the rejects and output files; commit rejects, then output.

    Time spent pulling ``results`` counts as compute, except what the results' producer itself
    adds to ``parts`` as read (its input reads happen inside the pulls). ``started`` is the
    task's ``perf_counter`` start when it did work before this call (opening its input).

    A shard without rejects gets no rejects file (``rejects_path`` None): most shards of most
    stages reject nothing, and an empty file cost a Parquet write, an fsync and a checksum each.
    A rejects file an earlier, killed attempt left at that path is removed, so none outlives it."""
    started = time.perf_counter() if started is None else started
    parts = parts or PartTimes()
    read_before = parts.seconds["read"]
    pulling = 0.0
    out: AtomicParquetWriter | None = None
    rejects: AtomicParquetWriter | None = None
    reasons: Counter[str] = Counter()
    try:
        pending = iter(results)
        while True:
            pulled = time.perf_counter()
            result = next(pending, None)
            pulling += time.perf_counter() - pulled
            if result is None:
                break
            with parts.part("write"):
                if out is None:
                    out = AtomicParquetWriter(
                        output_path,
                        result.kept.schema,
                        metadata=metadata,
                        compression=INTERMEDIATE_COMPRESSION,
                    )
                out.write(result.kept)
                if result.rejects.num_rows:
                    if rejects is None:
                        rejects = AtomicParquetWriter(rejects_path, REJECT_SCHEMA)
                    rejects.write(result.rejects)
                    reasons.update(result.rejects[REASON].to_pylist())
        parts.seconds["compute"] += pulling - (parts.seconds["read"] - read_before)
        if out is None:
            out = AtomicParquetWriter(
                output_path,
                empty_output_schema(),
                metadata=metadata,
                compression=INTERMEDIATE_COMPRESSION,
            )
        rows_out = out.rows
        rows_rejected = rejects.rows if rejects is not None else 0
        with parts.part("commit"):
            if rejects is not None:
                written_rejects: str | None = rejects.commit().path
            else:
                written_rejects = None
                if not storage.is_remote(rejects_path):  # in a bucket, unrecorded: never read
                    storage.remove(rejects_path)
            written = out.commit(
                {
                    INPUT_FINGERPRINT: input_fingerprint,
                    ROWS_IN: str(rows_out + rows_rejected),
                    ROWS_REJECTED: str(rows_rejected),
                }
            )
    except BaseException:
        if rejects is not None:
            rejects.abort()
        if out is not None:
            out.abort()
        raise
    return ShardStats(
        shard=key,
        path=written.path,
        rejects_path=written_rejects,
        rows_in=rows_out + rows_rejected,
        rows_out=rows_out,
        rows_rejected=rows_rejected,
        bytes=written.bytes,
        checksum=written.checksum,
        seconds=time.perf_counter() - started,
        reject_reasons=dict(reasons),
        parts=parts.as_dict(),
    )


def carried_metadata(path: str | Path) -> dict[str, str]:
    """Footer metadata a stage passes on downstream (tokenizer identity, ...), not bookkeeping."""
    return {k: v for k, v in read_footer_metadata(path).items() if k not in _FOOTER_BOOKKEEPING}


def row_group_parts(metadata: pq.FileMetaData, max_rows: int) -> list[tuple[int, int]]:
    """Cut a Parquet file's row groups into consecutive ranges (first, end) of at most
    ``max_rows`` rows each, filled in order; a row group of more rows is a range alone (a row
    group is never split). A file of at most ``max_rows`` rows, or of no row group, is one range.

    Why: one input file that cannot be cut into line ranges when it is read (a ``.jsonl.gz``,
    a CSV, a Parquet file) is one raw shard; cut so, every stage after ``raw_documents`` spreads
    it over the workers, shows progress and restarts per part instead of redoing it whole. At
    most ``max_rows``, so that parts cut when a Parquet input is read are not cut again."""
    parts: list[tuple[int, int]] = []
    first, rows = 0, 0
    for group in range(metadata.num_row_groups):
        size = metadata.row_group(group).num_rows
        if group > first and rows + size > max_rows:
            parts.append((first, group))
            first, rows = group, 0
        rows += size
    parts.append((first, metadata.num_row_groups))
    return parts
