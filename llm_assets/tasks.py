"""Shard tasks: what a worker process does for one shard of one stage.

Each task is a small frozen dataclass (picklable, a few hundred bytes) naming its input and output
files and the kernel spec. The worker reads its input, runs the kernel batch by batch (memory
bounded by the batch, not the shard), writes its rejects and then its output atomically, and
returns :class:`ShardStats`. Writing the output last makes it the completion marker: a shard whose
output exists with the expected input fingerprint in its footer is done.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from llm_assets.constants import TRAINING_BATCHES
from llm_assets.kernels.augment import eda_variants
from llm_assets.kernels.batching import (
    AUGMENTED,
    BATCH,
    LENGTH_BUCKET,
    PROMPT_FILLS_SEQUENCE,
    UNDERSAMPLED,
    BatchSpec,
    LabelQuota,
    PackStats,
    assign_buckets,
    assign_splits,
    balance_order,
    bucket_layout,
    longest_in_batch,
    masked_lead,
    pack_sequences,
    pad_sequences,
    prompt_fills_sequence,
    shuffle_keys,
    shuffle_order,
)
from llm_assets.kernels.ingest import BATCH_BYTES, IngestSpec, parquet_batch_rows, read_documents
from llm_assets.kernels.mixture import MIXED_OUT, MixtureSpec
from llm_assets.kernels.schema import (
    DOC_ID,
    INPUT_IDS,
    LABEL,
    LEARNED_SPANS,
    PROMPT_TOKENS,
    REASON,
    REJECT_SCHEMA,
    SOURCE_FILE,
    SOURCE_LINE,
    TEXT,
    VALUE,
    StageResult,
    drop_rows,
    empty_rejects,
    make_doc_id,
    rejects_table,
)
from llm_assets.warehouse.shards import (
    INPUT_FINGERPRINT,
    INTERMEDIATE_COMPRESSION,
    ROWS_IN,
    ROWS_REJECTED,
    STATS,
    AtomicParquetWriter,
    file_checksum,
    read_footer_metadata,
    temporary_path,
)

if TYPE_CHECKING:  # a task with a tokenizer imports it when unpickled: the others never need it
    from llm_assets.kernels.tokenization import TokenizerSpec

_FOOTER_BOOKKEEPING = (INPUT_FINGERPRINT, ROWS_IN, ROWS_REJECTED, STATS)
SCATTER_MANIFEST = "manifest.json"
KERNEL_BATCH_ROWS = 8192
"""Rows a kernel gets per call: big enough to amortize per-call costs, small enough to stream."""
READ_THREADS = False
"""Whether a shard task's Parquet reads use Arrow's thread pool: no. The backends run one task per
core, and a worker's pool has one thread (``OMP_NUM_THREADS=1``), so a threaded read only hands
each column chunk to another thread and waits for it. 200K rows on 2 cores, alternating:
multiprocess 5.11-5.19 s instead of 5.16-5.56 s and ~35 MB less peak memory, Ray 6.72-7.04 s
instead of 6.91-7.51 s, in_process unchanged."""
SPLITS = ("train", "validation")
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
                Path(rejects_path).unlink(missing_ok=True)
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


# --- ingest ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class IngestTask:
    """Read one input file (or one line range of a JSONL file) into one raw shard."""

    key: str
    path: str
    source_file: str
    spec: IngestSpec
    output_path: str
    rejects_path: str
    input_fingerprint: str
    byte_range: tuple[int, int] | None = None
    first_line: int = 1
    row_groups: tuple[int, int] | None = None
    """Of a Parquet file, only these row groups (first, end): one part of a big file."""


def run_ingest(task: IngestTask) -> ShardStats:
    """Worker side of ``raw_documents``."""
    from llm_assets.kernels.schema import DOCUMENT_SCHEMA

    results = read_documents(
        task.path,
        task.source_file,
        task.spec,
        byte_range=task.byte_range,
        first_line=task.first_line,
        row_groups=task.row_groups,
    )
    return _write_shard(
        results,
        key=task.key,
        output_path=task.output_path,
        rejects_path=task.rejects_path,
        input_fingerprint=task.input_fingerprint,
        empty_output_schema=lambda: DOCUMENT_SCHEMA,
        metadata={},
    )


# --- one shard in, one shard out: normalize, tokenize, filter -------------------------------------
@dataclass(frozen=True)
class MapTask:
    """Apply ``kernel(table, spec) -> StageResult`` to every batch of one shard."""

    key: str
    input_path: str
    output_path: str
    rejects_path: str
    input_fingerprint: str
    kernel: Callable[[pa.Table, Any], StageResult]
    spec: Any
    metadata: tuple[tuple[str, str], ...] = ()
    batch_rows: int = KERNEL_BATCH_ROWS
    row_groups: tuple[int, int] | None = None
    """Only these row groups of the input (first, end): one part of a big upstream shard
    (:func:`row_group_parts`); None: all of it."""


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


def run_map(task: MapTask) -> ShardStats:
    """Worker side of the one-to-one stages."""
    started = time.perf_counter()
    parts = PartTimes()
    with parts.part("read"):
        source = pq.ParquetFile(task.input_path)
        metadata = carried_metadata(task.input_path)
    metadata.update(dict(task.metadata))

    def results() -> Iterator[StageResult]:
        batch_size = parquet_batch_rows(source.metadata, task.batch_rows, BATCH_BYTES)
        batches = row_group_batches(source, batch_size, groups=task.row_groups)
        for batch in timed_reads(batches, parts):
            yield task.kernel(pa.Table.from_batches([batch]), task.spec)

    def empty_schema() -> pa.Schema:
        return task.kernel(source.schema_arrow.empty_table(), task.spec).kept.schema

    return _write_shard(
        results(),
        key=task.key,
        output_path=task.output_path,
        rejects_path=task.rejects_path,
        input_fingerprint=task.input_fingerprint,
        empty_output_schema=empty_schema,
        metadata=metadata,
        parts=parts,
        started=started,
    )


# --- dedup: drop what the global step decided, per shard ----------------------------------------
@dataclass(frozen=True)
class DedupApplyTask:
    """Remove the documents the global dedup step chose from one annotated shard.

    The output keeps ``content_hash`` (to query) but not the MinHash columns (they stay in the
    annotated shard, which is the near-dedup index). Its rejects are the annotated shard's rejects
    (the per-document filters) followed by the duplicates, so the asset's rejects view holds both.
    """

    key: str
    input_path: str
    input_rejects_path: str | None
    drops_path: str
    output_path: str
    rejects_path: str
    input_fingerprint: str
    batch_rows: int = KERNEL_BATCH_ROWS


def run_dedup_apply(task: DedupApplyTask) -> ShardStats:
    """Worker side of the second half of ``filtered_documents`` with deduplication on."""
    from llm_assets.kernels.dedup import DEDUP_STAGE, MINHASH, MINHASH_BANDS

    started = time.perf_counter()
    parts = PartTimes()
    with parts.part("read"):
        source = pq.ParquetFile(task.input_path)
        drops = pq.read_table(task.drops_path, filters=[("shard", "=", task.key)])
    columns = [n for n in source.schema_arrow.names if n not in (MINHASH, MINHASH_BANDS)]
    decided = dict(
        zip(
            drops[DOC_ID].to_pylist(),
            zip(drops[REASON].to_pylist(), drops[VALUE].to_pylist(), strict=True),
            strict=True,
        )
    )
    drop_ids = pa.array(list(decided), pa.string())
    metadata = carried_metadata(task.input_path)
    output_schema = source.schema_arrow.empty_table().select(columns).schema

    def results() -> Iterator[StageResult]:
        if task.input_rejects_path and Path(task.input_rejects_path).exists():
            with pq.ParquetFile(task.input_rejects_path) as rejects:
                size = parquet_batch_rows(rejects.metadata, task.batch_rows, BATCH_BYTES)
                for earlier in timed_reads(row_group_batches(rejects, size), parts):
                    yield StageResult(output_schema.empty_table(), pa.Table.from_batches([earlier]))
        batch_size = parquet_batch_rows(source.metadata, task.batch_rows, BATCH_BYTES)
        for batch in timed_reads(row_group_batches(source, batch_size, columns), parts):
            table = pa.Table.from_batches([batch], schema=output_schema)
            mask = pc.is_in(table[DOC_ID], value_set=drop_ids)
            gone = table.filter(mask)[DOC_ID].to_pylist()
            yield drop_rows(
                table,
                mask,
                stage=DEDUP_STAGE,
                reasons=[decided[d][0] for d in gone],
                values=[decided[d][1] for d in gone],
            )

    return _write_shard(
        results(),
        key=task.key,
        output_path=task.output_path,
        rejects_path=task.rejects_path,
        input_fingerprint=task.input_fingerprint,
        empty_output_schema=lambda: output_schema,
        metadata=metadata,
        parts=parts,
        started=started,
    )


# --- training batches: scatter to shuffle buckets, then gather and pack ---------------------------
@dataclass(frozen=True)
class ScatterTask:
    """Split one filtered shard's documents by (split, shuffle bucket) into a scatter folder."""

    key: str
    input_path: str
    output_dir: str
    input_fingerprint: str
    spec: BatchSpec
    n_buckets: int


SCATTER_FILE = "buckets.arrow"
"""One Arrow IPC file per scattered shard: one record batch per (split, bucket)."""
SCATTER_CHUNK_BYTES = 16 << 20
"""Decoded bytes of the shuffle's columns of a filtered shard that the scatter holds at once
(by the footer's sizes, whole row groups). A larger shard is scattered chunk by chunk, each chunk
writing its own batch per (split, bucket), so the worker's memory does not follow the shard's
size: one big input file (a 1M-row ``.jsonl.gz``) is one shard at every stage, and its scatter
took a worker to 931 MB. The scatter holds about seven times a chunk at its peak (keys, the
ordered copy, its groups, the compressed batches): on a 410K-row shard with 205 MB of token ids,
16 MiB chunks peak at 360 MB RSS (122 MB of Arrow memory) in 2.1 s, 64 MiB chunks at 889 MB,
the whole shard at 1,842 MB in 4.7 s. Shards of ordinary size (20,000 documents of a few
hundred tokens) are one chunk, written as before."""
_IPC_MAGIC_BYTES = 8
"""An Arrow IPC file starts with ``ARROW1`` padded to 8 bytes; its schema message follows."""
ScatterPiece = tuple[str, int, int, int, int]
"""Where one record batch of a (split, bucket) lies in one scatter file: the file's path, its
schema message (offset, length) and the batch's message (offset, length)."""
SCATTER_COLUMNS = (DOC_ID, INPUT_IDS, PROMPT_TOKENS, LEARNED_SPANS, LABEL)
"""The columns of a filtered shard the shuffle reads and holds (those present); the text stays."""
SFT_SCATTER_COLUMNS = (SOURCE_FILE, SOURCE_LINE)
"""Held too for SFT rows (with ``prompt_tokens``) and labelled rows, which the gather may reject
(:data:`~llm_assets.kernels.batching.PROMPT_FILLS_SEQUENCE`,
:data:`~llm_assets.kernels.batching.UNDERSAMPLED`): a reject names its source."""


def scatter_columns(names: Iterable[str], text: bool = False, sources: bool = False) -> list[str]:
    """The columns the shuffle reads from a filtered shard with columns ``names``; with ``text``
    (``augment``) the text too, which the variants of the copies are made from; with ``sources``
    (``mixture``) the source columns, which give each document its source and name its reject."""
    present = set(names)
    rejectable = PROMPT_TOKENS in present or LABEL in present or sources
    wanted = (
        SCATTER_COLUMNS + (SFT_SCATTER_COLUMNS if rejectable else ()) + ((TEXT,) if text else ())
    )
    return [c for c in wanted if c in present]


def scatter_key(split: str, bucket: int) -> str:
    """The name of one (split, bucket): key of the batch in a scatter file and of the gather."""
    return f"{split}-{bucket:05d}"


def read_scatter_manifest(output_dir: str | Path) -> dict[str, Any]:
    """A scatter folder's manifest: ``input_fingerprint``, per (split, bucket) key its row count
    (``counts``) and where its record batches' messages lie in the IPC file (``pieces``: a list
    of [offset, length], one per chunk of the shard that had rows of it), where the file's
    schema message lies (``schema``: [offset, length], null when the shard had no rows), and how
    many documents have each token count (``lengths``: {count: documents}, JSON keys are
    strings). With a ``mixture``, per key the documents and tokens of each input file
    (``sources``: {key: {source_file: [documents, tokens]}}), which the mixture is planned from;
    with labels, per key the documents of each class (``labels``)."""
    return json.loads((Path(output_dir) / SCATTER_MANIFEST).read_text())


def _manifest_pieces(
    output_dir: str | Path, manifest: dict[str, Any]
) -> dict[str, list[ScatterPiece]]:
    """Per (split, bucket) key, where its batches lie in the scatter folder ``output_dir``."""
    path = str(Path(output_dir) / SCATTER_FILE)
    if not manifest["pieces"]:
        return {}
    schema_offset, schema_length = manifest["schema"]
    return {
        key: [(path, schema_offset, schema_length, offset, length) for offset, length in ranges]
        for key, ranges in manifest["pieces"].items()
    }


def scatter_pieces(scatter_dirs: Iterable[str]) -> dict[str, list[ScatterPiece]]:
    """Per (split, bucket) key, its pieces in every scatter folder, in folder order (each
    manifest read once)."""
    pieces: dict[str, list[ScatterPiece]] = {}
    for directory in scatter_dirs:
        for key, found in _manifest_pieces(directory, read_scatter_manifest(directory)).items():
            pieces.setdefault(key, []).extend(found)
    return pieces


def scatter_done(
    output_dir: str | Path, input_fingerprint: str, labelled: bool = False, sources: bool = False
) -> bool:
    """True when a scatter folder is complete for this input: its manifest says so and its
    scatter file still has the checksum the manifest recorded. A manifest that cannot be read,
    or a file cut or changed since (or a manifest of before the checksum was recorded), is not
    done, so the shard is scattered again (before: a cut file failed the gather on every run,
    "shorter than its manifest says", and flipped bytes were gathered into the batches).
    A ``labelled`` shard's manifest must also count its documents per class label (``labels``,
    which the balance of the classes is planned from; a folder of an earlier release has none,
    nor the source columns its rejects need); with ``sources`` (a ``mixture``), its documents and
    tokens per input file (``sources``)."""
    folder = Path(output_dir)
    if not (folder / SCATTER_MANIFEST).exists():
        return False
    try:
        manifest = read_scatter_manifest(folder)
        return (
            isinstance(manifest, dict)
            and manifest.get("input_fingerprint") == input_fingerprint
            and manifest.get("checksum") == file_checksum(folder / SCATTER_FILE)
            and (not labelled or isinstance(manifest.get("labels"), dict))
            and (not sources or isinstance(manifest.get("sources"), dict))
        )
    except (OSError, ValueError):
        return False


def read_scatter_pieces(pieces: Iterable[ScatterPiece]) -> pa.Table | None:
    """The documents of one (split, bucket) from its pieces (:func:`scatter_pieces`), or None.

    Each piece costs two small reads at known offsets, its schema's and its batch's messages: no
    manifest and no IPC footer is read per piece. There are as many pieces in all as shards times
    buckets, both of which grow with the corpus: at 1M rows (50 shards, 86 buckets) opening each
    file's footer and manifest per piece took 1.7 s of reads, the pieces alone take 0.2 s.
    (One Parquet file per (shard, bucket) made the file count grow the same way: 10,000 files
    at 1M rows.)"""
    batches = []
    schemas: dict[bytes, pa.Schema] = {}
    for path, schema_offset, schema_length, offset, length in pieces:
        fd = os.open(path, os.O_RDONLY)
        try:
            head = os.pread(fd, schema_length, schema_offset)
            body = os.pread(fd, length, offset)
        finally:
            os.close(fd)
        if len(head) != schema_length or len(body) != length:
            raise ValueError(f"scatter file {path} is shorter than its manifest says")
        schema = schemas.get(head)
        if schema is None:
            schema = schemas[head] = pa.ipc.read_schema(pa.py_buffer(head))
        message = pa.ipc.read_message(pa.py_buffer(body))
        batches.append(pa.ipc.read_record_batch(message, schema))
    return pa.Table.from_batches(batches) if batches else None


def read_scatter_bucket(scatter_dirs: Iterable[str], split: str, bucket: int) -> pa.Table | None:
    """Every scattered document of one (split, bucket), from all scatter folders, or None."""
    return read_scatter_pieces(scatter_pieces(scatter_dirs).get(scatter_key(split, bucket), []))


def _message_ranges(
    path: Path, ends: list[tuple[str, int]]
) -> tuple[list[int] | None, dict[str, list[list[int]]]]:
    """The [offset, length] of an IPC file's schema message and of each batch's message, per
    key, from where each batch ended (the writer's position after it; ``ends`` in write order).
    The schema goes out with the first batch, so the first batch starts where the schema
    message ends: read back."""
    if not ends:
        return None, {}
    with open(path, "rb") as handle:
        head = pa.BufferReader(handle.read(ends[0][1]))
    head.seek(_IPC_MAGIC_BYTES)
    pa.ipc.read_message(head)
    start = head.tell()
    schema = [_IPC_MAGIC_BYTES, start - _IPC_MAGIC_BYTES]
    pieces: dict[str, list[list[int]]] = {}
    for key, end in ends:
        pieces.setdefault(key, []).append([start, end - start])
        start = end
    return schema, pieces


def _scatter_chunks(source: pq.ParquetFile, columns: list[str]) -> Iterator[pa.Table]:
    """The shuffle's columns of a filtered shard, in consecutive whole row groups of at most
    :data:`SCATTER_CHUNK_BYTES` decoded (one row group if larger); one empty table for a file
    without row groups."""
    meta = source.metadata
    wanted = set(columns)
    groups: list[int] = []
    held = 0
    for group in range(meta.num_row_groups):
        row_group = meta.row_group(group)
        size = sum(
            row_group.column(i).total_uncompressed_size
            for i in range(row_group.num_columns)
            if row_group.column(i).path_in_schema.split(".")[0] in wanted
        )
        if groups and held + size > SCATTER_CHUNK_BYTES:
            yield source.read_row_groups(groups, columns=columns, use_threads=READ_THREADS)
            groups, held = [], 0
        groups.append(group)
        held += size
    if groups or not meta.num_row_groups:
        yield source.read_row_groups(groups, columns=columns, use_threads=READ_THREADS)


def run_scatter(task: ScatterTask) -> dict[str, Any]:
    """Worker side of the first batching phase: one IPC file with one record batch per (split,
    bucket) and chunk of the shard (:data:`SCATTER_CHUNK_BYTES`; one chunk for shards of
    ordinary size). The folder is built under a temporary name and renamed into place, so it is
    either complete or absent."""
    started = time.perf_counter()
    parts = PartTimes()
    final = Path(task.output_dir)
    tmp = temporary_path(final)
    tmp.mkdir(parents=True)
    counts: Counter[str] = Counter()
    labels: dict[str, Counter[str]] = {}
    by_source: dict[str, dict[str, list[int]]] = {}
    mixed = task.spec.mixture is not None
    lengths: Counter[int] = Counter()
    ends: list[tuple[str, int]] = []
    rows = 0
    try:
        with pq.ParquetFile(task.input_path) as source, contextlib.ExitStack() as files:
            with parts.part("read"):
                columns = scatter_columns(
                    source.schema_arrow.names, text=task.spec.augment != "none", sources=mixed
                )
            out = sink = None
            for table in timed_reads(_scatter_chunks(source, columns), parts):
                with parts.part("compute"):
                    keyed, present, starts, sizes, chunk_lengths = _scatter_order(table, task)
                    lengths.update(chunk_lengths)
                    rows += table.num_rows
                with parts.part("write"):
                    if out is None:
                        sink = files.enter_context(pa.OSFile(str(tmp / SCATTER_FILE), "wb"))
                        options = pa.ipc.IpcWriteOptions(
                            compression="lz4", use_threads=READ_THREADS
                        )
                        out = files.enter_context(
                            pa.ipc.new_file(sink, keyed.schema, options=options)
                        )
                    for group, start, size in zip(present, starts, sizes, strict=True):
                        split, bucket = divmod(int(group), task.n_buckets)
                        part = keyed.slice(int(start), int(size)).combine_chunks()
                        (batch,) = part.to_batches()  # one chunk after combine_chunks
                        out.write_batch(batch)
                        key = scatter_key(SPLITS[split], bucket)
                        counts[key] += int(size)
                        if LABEL in part.column_names:
                            labels.setdefault(key, Counter()).update(label_counts(part[LABEL]))
                        if mixed:
                            held = by_source.setdefault(key, {})
                            for name, (docs, tokens) in source_counts(part).items():
                                was = held.setdefault(name, [0, 0])
                                was[0] += docs
                                was[1] += tokens
                        ends.append((key, sink.tell()))
                del table, keyed
        with parts.part("write"):
            schema, pieces = _message_ranges(tmp / SCATTER_FILE, ends)
        with parts.part("commit"):
            (tmp / SCATTER_MANIFEST).write_text(
                json.dumps(
                    {
                        "input_fingerprint": task.input_fingerprint,
                        "checksum": file_checksum(tmp / SCATTER_FILE),
                        "counts": dict(counts),
                        "schema": schema,
                        "pieces": pieces,
                        "lengths": {str(n): d for n, d in sorted(lengths.items())},
                        **(
                            {"labels": {k: dict(sorted(c.items())) for k, c in labels.items()}}
                            if LABEL in columns
                            else {}
                        ),
                        **({"sources": by_source} if mixed else {}),
                    }
                )
            )
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return {
        "shard": task.key,
        "rows": rows,
        "seconds": time.perf_counter() - started,
        "parts": parts.as_dict(),
    }


def source_counts(table: pa.Table) -> dict[str, tuple[int, int]]:
    """Documents and tokens of each input file (``source_file``) in ``table``, in name order."""
    if not table.num_rows:
        return {}
    tokens = pc.list_value_length(table[INPUT_IDS]).cast(pa.int64())
    grouped = (
        pa.table({SOURCE_FILE: table[SOURCE_FILE], "tokens": tokens})
        .group_by(SOURCE_FILE)
        .aggregate([("tokens", "count"), ("tokens", "sum")])
        .sort_by(SOURCE_FILE)
    )
    return {
        name: (int(docs), int(total))
        for name, docs, total in zip(
            grouped[SOURCE_FILE].to_pylist(),
            grouped["tokens_count"].to_pylist(),
            grouped["tokens_sum"].to_pylist(),
            strict=True,
        )
    }


def label_counts(labels: pa.Array | pa.ChunkedArray) -> dict[str, int]:
    """Documents per class label in a ``label`` column."""
    counted = pc.value_counts(labels).to_pylist()
    return {str(c["values"]): int(c["counts"]) for c in counted}


def _scatter_order(
    table: pa.Table, task: ScatterTask
) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray, dict[int, int]]:
    """One chunk of a shard with its shuffle keys, ordered by (split, bucket) group (a stable
    sort keeps each group in input order), the groups present with their starts and sizes, and
    the chunk's documents per token count (the asset's length histogram, summed by the driver:
    no second read of the corpus)."""
    doc_ids = table[DOC_ID].to_pylist()
    lengths, documents = np.unique(
        pc.list_value_length(table[INPUT_IDS]).to_numpy(zero_copy_only=False),
        return_counts=True,
    )
    keys = shuffle_keys(doc_ids, task.spec.seed)
    validation = assign_splits(_record_ids(table), task.spec.seed, task.spec.validation_fraction)
    # Group number: split-major, then bucket.
    groups = validation.astype(np.int64) * task.n_buckets + assign_buckets(keys, task.n_buckets)
    order = np.argsort(groups, kind="stable")
    keyed = table.append_column("shuffle_key", pa.array(keys, pa.uint64())).take(order)
    present, starts, sizes = np.unique(groups[order], return_index=True, return_counts=True)
    histogram = {int(n): int(d) for n, d in zip(lengths, documents, strict=True)}
    return keyed, present, starts, sizes, histogram


def _record_ids(table: pa.Table) -> list[str]:
    """What the split is decided on: each row's record, the id of its source line
    (:func:`~llm_assets.kernels.schema.make_doc_id` without a part). The rows of one conversation
    read with ``chat_answers: every`` have their own ids but one record, and go to one split: a
    validation answer must not be a training row's context. Every other row's record id is its
    doc_id (SFT rows carry their location here; other rows are one per record)."""
    if SOURCE_LINE not in table.column_names:
        return table[DOC_ID].to_pylist()
    files, lines = table[SOURCE_FILE].to_pylist(), table[SOURCE_LINE].to_pylist()
    return [make_doc_id(f, line) for f, line in zip(files, lines, strict=True)]


@dataclass(frozen=True)
class GatherTask:
    """Build the sequences of one (split, bucket) from every scatter folder."""

    key: str
    split: str
    bucket: int
    pieces: tuple[ScatterPiece, ...]
    """Where the bucket's batch lies in each scatter file that has one (:func:`scatter_pieces`)."""
    output_path: str
    input_fingerprint: str
    spec: BatchSpec
    eos_id: int | None
    """None for a tokenizer without EOS (only layouts that add none: see ``_eos_id``)."""
    pad_id: int
    token_type: str
    metadata: tuple[tuple[str, str], ...] = ()
    compression_level: int | None = None
    rejects_path: str | None = None
    """Where the documents the layout cannot use go (:func:`untrainable_rejects`), if any."""
    balance: tuple[LabelQuota, ...] = ()
    """A train bucket's class quotas (``spec.balance``; :func:`~llm_assets.kernels.batching.
    balance_quotas`); empty: every document once."""
    repeat: int = 1
    """Each document this many times as often (a train bucket's ``augment_copies + 1``)."""
    tokenizer: TokenizerSpec | None = None
    """``augment``, train buckets: the tokenizer of the documents' ids, which encodes the
    variants of their copies (:func:`augmented`)."""


def _sft_eos(table: pa.Table, spec: BatchSpec) -> bool:
    """Whether the layout appends EOS to each document: SFT rows (a prompt before the text) in
    the layouts of one document per sequence, so the model learns where a response ends (packed
    documents are EOS-separated already)."""
    return PROMPT_TOKENS in table.column_names and spec.layout != "packed"


def untrainable_rejects(
    table: pa.Table, order: np.ndarray, spec: BatchSpec
) -> tuple[np.ndarray, pa.Table]:
    """Split shuffle ``order`` into the documents the layout uses and the rejects of those it
    cannot: SFT documents left with no response token once cut to fit (padded and bucketed
    layouts, and packed with ``overflow="truncate"``;
    :func:`~llm_assets.kernels.batching.prompt_fills_sequence`). Every other document is used."""
    checked = _untrainable(table, spec)
    if checked is None:
        return order, empty_rejects()
    bad_rows, lengths, prompts, limit = checked
    bad = bad_rows[order]
    if not bad.any():
        return order, empty_rejects()
    dropped = pa.array(order[bad])
    whole = table[PROMPT_TOKENS].to_numpy()[order][bad]
    leads = prompts[order][bad]
    kept_tokens = np.minimum(lengths[order][bad], limit)
    rejects = rejects_table(
        doc_ids=table[DOC_ID].take(dropped).to_pylist(),
        source_files=table[SOURCE_FILE].take(dropped).to_pylist(),
        source_lines=table[SOURCE_LINE].take(dropped).to_pylist(),
        stage=TRAINING_BATCHES,
        reasons=[PROMPT_FILLS_SEQUENCE] * int(bad.sum()),
        values=[
            f"prompt {p} of {n} tokens kept (seq_len {spec.seq_len})"
            if p == w
            else f"first answer at token {p}, {n} tokens kept (seq_len {spec.seq_len})"
            for p, w, n in zip(leads.tolist(), whole.tolist(), kept_tokens.tolist(), strict=True)
        ],
    )
    return order[~bad], rejects


def _untrainable(
    table: pa.Table, spec: BatchSpec
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
    """Per row of ``table`` (in its own order): whether the layout cannot use it
    (:func:`untrainable_rejects`), with the lengths, masked leads and limit that decided; None
    when no row can be such (no prompts, or a layout that cuts no document)."""
    truncating = spec.layout != "packed" or spec.overflow == "truncate"
    if PROMPT_TOKENS not in table.column_names or not truncating:
        return None
    lengths = pc.list_value_length(table[INPUT_IDS]).to_numpy(zero_copy_only=False)
    lengths = lengths + 1 if _sft_eos(table, spec) else lengths
    limit = spec.seq_len if spec.layout != "packed" else spec.seq_len - 1
    prompts = masked_lead(table[PROMPT_TOKENS].to_numpy(), _learned_spans(table))
    return prompt_fills_sequence(lengths, prompts, limit), lengths, prompts, limit


def trainable(table: pa.Table, spec: BatchSpec) -> pa.Table:
    """The documents of ``table`` that the layout of ``spec`` uses: those that are not
    :func:`untrainable_rejects`. What ``balance`` and ``mixture`` count, so that the classes are
    even, and the sources in proportion, in the batches, not before the rejects."""
    checked = _untrainable(table, spec)
    return table if checked is None else table.filter(pa.array(~checked[0]))


def trainable_label_counts(table: pa.Table, spec: BatchSpec) -> dict[str, int]:
    """Documents per class label of ``table`` that the layout of ``spec`` uses
    (:func:`trainable`)."""
    return label_counts(trainable(table, spec)[LABEL])


def balanced(
    table: pa.Table, order: np.ndarray, task: GatherTask
) -> tuple[np.ndarray, np.ndarray, pa.Table]:
    """Shuffle ``order`` with the classes evened out by ``task.balance`` and every document
    ``task.repeat`` times (:func:`~llm_assets.kernels.batching.balance_order`): the new order, the
    copy number of each of its places (0: the document itself), and the rejects of the
    documents left out (:data:`~llm_assets.kernels.batching.UNDERSAMPLED`), valued with their
    class's count."""
    mixture = task.spec.mixture
    if not task.balance:
        labels = None
    elif mixture is not None:
        labels = mixture.sources_of(table[SOURCE_FILE].to_pylist())
    else:
        labels = table[LABEL].to_pylist()
    order, left_out, copies = balance_order(
        order, labels, task.balance, table[DOC_ID].to_pylist(), task.spec.seed, task.repeat
    )
    if not len(left_out):
        return order, copies, empty_rejects()
    quotas = {q.label: q for q in task.balance}
    dropped = pa.array(left_out)
    if mixture is not None:
        shares = mixture.shares
        reason = MIXED_OUT
        values = [
            f"source {label!r}: {quotas[label].target:,} of its {quotas[label].documents:,} "
            f"train documents kept (mixture: undersample by {mixture.by}, share "
            f"{shares[label]:.1%})"
            for label in (labels[i] for i in left_out.tolist())
        ]
    else:
        reason = UNDERSAMPLED
        values = [
            f"class {label!r}: {quotas[label].target:,} of its "
            f"{quotas[label].documents:,} train documents kept (balance: undersample)"
            for label in (labels[i] for i in left_out.tolist())
        ]
    return (
        order,
        copies,
        rejects_table(
            doc_ids=table[DOC_ID].take(dropped).to_pylist(),
            source_files=table[SOURCE_FILE].take(dropped).to_pylist(),
            source_lines=table[SOURCE_LINE].take(dropped).to_pylist(),
            stage=TRAINING_BATCHES,
            reasons=[reason] * len(left_out),
            values=values,
        ),
    )


MIXTURE_DOCUMENTS = "mixture_documents:"
"""Prefix of a train batch file's statistic: the documents (copies counted) of one source of the
mixture it holds (``mixture_documents:<source>``); ``mixture_tokens:`` their tokens."""
MIXTURE_TOKENS = "mixture_tokens:"


def mixture_stats(table: pa.Table, order: np.ndarray, mixture: MixtureSpec) -> dict[str, int]:
    """The documents and tokens of each source of ``mixture`` that ``order`` (indices into
    ``table``, a document as often as it is held) gives the layout: what the batches hold of
    each source, before the layout cuts or pads anything."""
    taken = pa.array(order, pa.int64())
    names = mixture.sources_of(table[SOURCE_FILE].take(taken).to_pylist())
    lengths = pc.list_value_length(table[INPUT_IDS].take(taken)).to_numpy(zero_copy_only=False)
    documents: Counter[str] = Counter()
    tokens: Counter[str] = Counter()
    for name, n in zip(names, lengths.tolist(), strict=True):
        documents[str(name)] += 1
        tokens[str(name)] += int(n)
    stats = {f"{MIXTURE_DOCUMENTS}{name}": documents[name] for name in sorted(documents)}
    stats.update({f"{MIXTURE_TOKENS}{name}": tokens[name] for name in sorted(tokens)})
    return stats


def augmented(
    table: pa.Table, order: np.ndarray, copies: np.ndarray, task: GatherTask
) -> tuple[pa.Table, np.ndarray, dict[str, int]]:
    """``spec.augment``: the copies in ``order`` (``copies`` > 0) made variants of their
    documents (:func:`~llm_assets.kernels.augment.eda_variants`, encoded by ``task.tokenizer``), as
    rows appended to ``table`` that ``order`` now points to, and how many variants each edit
    made (``augmented``, ``augmented_<edit>``; ``augmented_unchanged``: a document too short for
    its edit, left as it is). Every row gets the :data:`~llm_assets.kernels.batching.AUGMENTED`
    flag, so each batch file of the folder has the column."""
    n = table.num_rows
    flagged = table.append_column(AUGMENTED, pa.array(np.zeros(n, bool)))
    at = np.flatnonzero(copies > 0)
    if task.tokenizer is None or not len(at):
        return flagged, order, {}
    sources = pa.array(order[at])
    copied = table.take(sources)
    variants = eda_variants(
        copied[TEXT].to_pylist(),
        copied[DOC_ID].to_pylist(),
        copies[at].tolist(),
        task.spec.seed,
        task.spec.augment_rate,
    )
    texts = pa.array([v.text for v in variants], pa.string())
    ids, _ = task.tokenizer.build().encode_arrow(texts)
    ids_field = table.schema.field(INPUT_IDS)
    copied = copied.set_column(
        copied.schema.get_field_index(INPUT_IDS), ids_field, ids.cast(ids_field.type)
    )
    copied = copied.set_column(copied.schema.get_field_index(TEXT), table.schema.field(TEXT), texts)
    copied = copied.append_column(AUGMENTED, pa.array(np.ones(len(at), bool)))
    order = order.copy()
    order[at] = n + np.arange(len(at))
    edits = Counter(v.edit or "unchanged" for v in variants)
    stats = {"augmented": len(at), **{f"augmented_{e}": k for e, k in sorted(edits.items())}}
    return pa.concat_tables([flagged, copied]), order, stats


def build_sequences(
    table: pa.Table, order: np.ndarray, task: GatherTask, token_type: pa.DataType
) -> tuple[pa.Table, PackStats]:
    """The layout of ``task.spec`` applied to one bucket's documents, in shuffle ``order``."""
    spec = task.spec
    ids = table[INPUT_IDS].combine_chunks()
    values = ids.values.to_numpy(zero_copy_only=False)
    offsets = ids.offsets.to_numpy()
    lengths = (offsets[1:] - offsets[:-1])[order]
    prompts = (
        table[PROMPT_TOKENS].to_numpy()[order] if PROMPT_TOKENS in table.column_names else None
    )
    spans = _learned_spans(table)
    spans = None if spans is None else spans.take(pa.array(order))
    labels = table[LABEL].take(pa.array(order)) if LABEL in table.column_names else None
    flags = table[AUGMENTED].take(pa.array(order)) if AUGMENTED in table.column_names else None
    ordered_ids = table[DOC_ID].take(pa.array(order))
    if spec.layout == "packed":
        if task.eos_id is None:
            raise ValueError("the packed layout needs an EOS id")
        token_lists = [values[offsets[i] : offsets[i + 1]] for i in order]
        return pack_sequences(
            token_lists,
            spec.seq_len,
            task.eos_id,
            task.pad_id,
            spec.drop_remainder,
            token_type,
            truncate=spec.overflow == "truncate",
            prompt_tokens=prompts,
            doc_ids=ordered_ids,
            learned_spans=spans,
        )
    doc_ids = ordered_ids.to_pylist()
    eos_id = task.eos_id if _sft_eos(table, spec) else None
    if _sft_eos(table, spec):
        if eos_id is None:
            raise ValueError("SFT rows in the padded layouts need an EOS id")
        lengths = lengths + 1
    extra: dict[str, pa.Array] = {}
    if spec.layout == "bucketed":
        boundaries = spec.bucket_boundaries or (spec.seq_len,)
        within, targets, buckets, batches = bucket_layout(
            lengths,
            boundaries,
            spec.seq_len,
            spec.batch_size,
            spec.seed,
            f"{task.split}:{task.bucket}",
        )
        order = order[within]
        doc_ids = [doc_ids[i] for i in within]
        prompts = None if prompts is None else prompts[within]
        spans = None if spans is None else spans.take(pa.array(within))
        labels = None if labels is None else labels.take(pa.array(within))
        flags = None if flags is None else flags.take(pa.array(within))
        extra[LENGTH_BUCKET] = pa.array(buckets, pa.int32())
        extra[BATCH] = pa.array(batches, pa.int32())
    elif spec.pad_to == "longest":
        targets = longest_in_batch(lengths, spec.seq_len, spec.batch_size)
        extra[BATCH] = pa.array(np.arange(len(order)) // spec.batch_size, pa.int32())
    else:
        targets = None
    if flags is not None:
        extra = {AUGMENTED: flags.combine_chunks(), **extra}
    if labels is not None:
        extra = {LABEL: labels.combine_chunks(), **extra}
    token_lists = [values[offsets[i] : offsets[i + 1]] for i in order]
    return pad_sequences(
        token_lists,
        doc_ids,
        spec.seq_len,
        task.pad_id,
        token_type,
        targets=targets,
        prompt_tokens=prompts,
        extra_columns=extra,
        eos_id=eos_id,
        learned_spans=spans,
    )


def _learned_spans(table: pa.Table) -> pa.Array | None:
    """The chat rows' :data:`~llm_assets.kernels.schema.LEARNED_SPANS`, None for other rows."""
    if LEARNED_SPANS not in table.column_names:
        return None
    return table[LEARNED_SPANS].combine_chunks()


def run_gather(task: GatherTask) -> ShardStats:
    """Worker side of the second batching phase: order by shuffle key, then pack or pad."""
    started = time.perf_counter()
    parts = PartTimes()
    with parts.part("read"):
        table = read_scatter_pieces(task.pieces)
    token_type = getattr(pa, task.token_type)()
    if table is None:
        table = pa.table(
            {
                DOC_ID: pa.array([], pa.string()),
                INPUT_IDS: pa.array([], pa.list_(token_type)),
                "shuffle_key": pa.array([], pa.uint64()),
            }
        )
    with parts.part("compute"):
        doc_ids = table[DOC_ID].to_pylist()
        order = shuffle_order(table["shuffle_key"].to_numpy(), doc_ids)
        order, rejected = untrainable_rejects(table, order, task.spec)
        copies = np.zeros(len(order), np.int64)
        if task.balance or task.repeat > 1:
            order, copies, undersampled = balanced(table, order, task)
            rejected = pa.concat_tables([rejected, undersampled])
        augment_stats: dict[str, int] = {}
        if task.spec.augment != "none":
            table, order, augment_stats = augmented(table, order, copies, task)
        if task.spec.mixture is not None and task.split == "train":
            augment_stats.update(mixture_stats(table, order, task.spec.mixture))
        sequences, stats = build_sequences(table, order, task, token_type)
    if rejected.num_rows and task.rejects_path is None:
        raise ValueError(f"{task.key}: {rejected.num_rows} rejects but no rejects_path")
    with parts.part("write"):
        writer = AtomicParquetWriter(
            task.output_path,
            sequences.schema,
            metadata=dict(task.metadata),
            compression_level=task.compression_level,
            row_group_rows=1024,
        )
    rejects: AtomicParquetWriter | None = None
    try:
        with parts.part("write"):
            writer.write(sequences)
            if rejected.num_rows:
                rejects = AtomicParquetWriter(str(task.rejects_path), REJECT_SCHEMA)
                rejects.write(rejected)
        with parts.part("commit"):
            # Rejects first, as in every stage: the batch file's existence marks the task done.
            if rejects is not None:
                written_rejects: str | None = rejects.commit().path
            else:
                written_rejects = None
                if task.rejects_path is not None:  # left by an earlier, killed attempt
                    Path(task.rejects_path).unlink(missing_ok=True)
            written = writer.commit(
                {
                    INPUT_FINGERPRINT: task.input_fingerprint,
                    ROWS_IN: str(len(doc_ids)),
                    ROWS_REJECTED: str(rejected.num_rows),
                    STATS: json.dumps({**stats.as_dict(), **augment_stats}, sort_keys=True),
                }
            )
    except BaseException:
        if rejects is not None:
            rejects.abort()
        writer.abort()
        raise
    return ShardStats(
        shard=task.key,
        path=written.path,
        rejects_path=written_rejects,
        rows_in=len(doc_ids),
        rows_out=sequences.num_rows,
        rows_rejected=rejected.num_rows,
        bytes=written.bytes,
        checksum=written.checksum,
        seconds=time.perf_counter() - started,
        reject_reasons=dict(Counter(rejected[REASON].to_pylist())),
        extra={**stats.as_dict(), **augment_stats},
        parts=parts.as_dict(),
    )


# --- Megatron-LM output: one indexed dataset per split, documents in shuffle order ---------------
@dataclass(frozen=True)
class MegatronTask:
    """Write one split's documents, in the batches' shuffle order, as a Megatron dataset."""

    key: str
    split: str
    n_buckets: int
    scatter_dirs: tuple[str, ...]
    prefix: str
    vocab_size: int
    eos_id: int
    input_fingerprint: str


def megatron_done(prefix: str | Path, input_fingerprint: str) -> bool:
    """True when ``<prefix>.bin/.idx`` exist for this input (their ``.json`` sidecar says so)
    and the ``.bin`` has the size the sidecar recorded; either file deleted or cut short (or a
    sidecar of before the size was recorded, or unreadable), the export is written again."""
    sidecar = Path(f"{prefix}.json")
    if not all(Path(f"{prefix}{ext}").exists() for ext in (".json", ".idx", ".bin")):
        return False
    try:
        recorded = json.loads(sidecar.read_text())
        size = Path(f"{prefix}.bin").stat().st_size
    except (OSError, ValueError):
        return False
    return (
        isinstance(recorded, dict)
        and recorded.get("input_fingerprint") == input_fingerprint
        and recorded.get("bin_bytes") == size
    )


def run_megatron(task: MegatronTask) -> dict[str, Any]:
    """Worker side: stream bucket by bucket (bounded memory), each bucket in shuffle order, every
    document followed by EOS (as Megatron's ``preprocess_data.py --append-eod`` does)."""
    from llm_assets.kernels.megatron import MegatronWriter

    started = time.perf_counter()
    writer = MegatronWriter(task.prefix, task.vocab_size)
    documents = tokens = 0
    pieces = scatter_pieces(task.scatter_dirs)
    try:
        for bucket in range(task.n_buckets):
            table = read_scatter_pieces(pieces.get(scatter_key(task.split, bucket), []))
            if table is None:
                continue
            order = shuffle_order(table["shuffle_key"].to_numpy(), table[DOC_ID].to_pylist())
            ids = table[INPUT_IDS].combine_chunks()
            values = ids.values.to_numpy(zero_copy_only=False)
            offsets = ids.offsets.to_numpy()
            for i in order:
                document = np.append(values[offsets[i] : offsets[i + 1]], task.eos_id)
                writer.add_document(document)
                documents += 1
                tokens += len(document)
        writer.finalize()
    except BaseException:
        writer.abort()
        raise
    Path(f"{task.prefix}.json").write_text(
        json.dumps(
            {
                "input_fingerprint": task.input_fingerprint,
                "documents": documents,
                "tokens": tokens,
                "bin_bytes": Path(f"{task.prefix}.bin").stat().st_size,
            }
        )
    )
    return {
        "split": task.split,
        "documents": documents,
        "tokens": tokens,
        "seconds": time.perf_counter() - started,
    }
