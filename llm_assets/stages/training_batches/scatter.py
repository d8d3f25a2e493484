"""The shuffle's first phase: each filtered shard split by (split, bucket) into a scatter folder
(one Arrow IPC file and its manifest), and how those folders are read back.

A folder is complete when its manifest is there and says so: locally the folder is built under a
temporary name and renamed into place; in object storage the IPC object is uploaded first and the
manifest, written last, marks the folder complete (an earlier manifest is deleted before)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from llm_assets import storage
from llm_assets.kernels.batching.shuffle import assign_buckets, assign_splits, shuffle_keys
from llm_assets.kernels.batching.spec import BatchSpec
from llm_assets.kernels.schema import (
    DOC_ID,
    INPUT_IDS,
    LABEL,
    LEARNED_SPANS,
    PROMPT_TOKENS,
    SOURCE_FILE,
    SOURCE_LINE,
    TEXT,
    make_doc_id,
)
from llm_assets.stages.shard_io import READ_THREADS, PartTimes, timed_reads
from llm_assets.storage import is_remote, location_path
from llm_assets.warehouse.shards import CHECKSUM_ALGORITHM, file_checksum, temporary_path

SCATTER_MANIFEST = "manifest.json"


SPLITS = ("train", "validation")


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
"""Decoded bytes of the shuffle's columns of a filtered shard that the scatter holds at once (by the
footer's sizes, whole row groups). A larger shard is scattered chunk by chunk, each chunk writing
its own batch per (split, bucket), so the worker's memory does not follow the shard's size: one big
input file (a 1M-row ``.jsonl.gz``) is one shard at every stage, and its scatter, read whole, takes
a worker to 931 MB. The scatter holds about seven times a chunk at its peak (keys, the ordered copy,
its groups, the compressed batches): on a 410K-row shard with 205 MB of token ids, 16 MiB chunks
peak at 360 MB RSS (122 MB of Arrow memory) in 2.1 s, 64 MiB chunks at 889 MB, the whole shard at
1,842 MB in 4.7 s. Shards of ordinary size (20,000 documents of a few hundred tokens) are one chunk:
one batch per (split, bucket)."""


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
    return json.loads(storage.read_text(storage.join(output_dir, SCATTER_MANIFEST)))


def _manifest_pieces(
    output_dir: str | Path, manifest: dict[str, Any]
) -> dict[str, list[ScatterPiece]]:
    """Per (split, bucket) key, where its batches lie in the scatter folder ``output_dir``."""
    path = storage.join(output_dir, SCATTER_FILE)
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
    or a file cut or changed since (or a manifest without the checksum, of an earlier release),
    is not done, so the shard is scattered again (else a cut file would fail the gather on every
    run, "shorter than its manifest says", and flipped bytes would be gathered into the batches).
    A ``labelled`` shard's manifest must also count its documents per class label (``labels``,
    which the balance of the classes is planned from; a folder of an earlier release has none,
    nor the source columns its rejects need); with ``sources`` (a ``mixture``), its documents and
    tokens per input file (``sources``). In object storage the scatter file's size stands for its
    checksum (objects are written whole; reading it back would download the shuffle twice)."""
    if is_remote(str(output_dir)):
        try:
            manifest = read_scatter_manifest(output_dir)
            size = storage.file_size(storage.join(output_dir, SCATTER_FILE))
        except (FileNotFoundError, ValueError):
            return False
        return (
            isinstance(manifest, dict)
            and manifest.get("input_fingerprint") == input_fingerprint
            and manifest.get("bytes") == size
            and (not labelled or isinstance(manifest.get("labels"), dict))
            and (not sources or isinstance(manifest.get("sources"), dict))
        )
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
    (One Parquet file per (shard, bucket) would make the file count grow the same way: 10,000
    files at 1M rows.)"""
    batches = []
    schemas: dict[bytes, pa.Schema] = {}
    pieces = list(pieces)
    for (path, _, schema_length, _, length), (head, body) in zip(
        pieces, _piece_bytes(pieces), strict=True
    ):
        if len(head) != schema_length or len(body) != length:
            raise ValueError(f"scatter file {path} is shorter than its manifest says")
        schema = schemas.get(head)
        if schema is None:
            schema = schemas[head] = pa.ipc.read_schema(pa.py_buffer(head))
        message = pa.ipc.read_message(pa.py_buffer(body))
        batches.append(pa.ipc.read_record_batch(message, schema))
    return pa.Table.from_batches(batches) if batches else None


_SCHEMA_MESSAGES: dict[tuple[str, int, int], bytes] = {}
"""The schema messages of scatter objects this process fetched, by (URL, offset, length): every
gather task reads one piece of every scatter file, each starting with that file's schema, which
a file named by its input and settings holds unchanged (a ranged GET saved per file and task)."""

_SCHEMA_MESSAGES_HELD = 4096


def _piece_bytes(pieces: list[ScatterPiece]) -> list[tuple[bytes, bytes]]:
    """The schema and batch messages of each piece: two reads of one open file locally; in
    object storage each file's schema message once and every batch message, fetched
    concurrently (a ranged GET each)."""
    if any(is_remote(piece[0]) for piece in pieces):
        heads = sorted({(p[0], p[1], p[2]) for p in pieces} - _SCHEMA_MESSAGES.keys())
        fetched = storage.read_ranges(heads + [(p[0], p[3], p[4]) for p in pieces])
        if len(_SCHEMA_MESSAGES) + len(heads) > _SCHEMA_MESSAGES_HELD:
            _SCHEMA_MESSAGES.clear()
        _SCHEMA_MESSAGES.update(zip(heads, fetched[: len(heads)], strict=True))
        bodies = fetched[len(heads) :]
        return [
            (_SCHEMA_MESSAGES[(p[0], p[1], p[2])], body)
            for p, body in zip(pieces, bodies, strict=True)
        ]
    out = []
    for path, schema_offset, schema_length, offset, length in pieces:
        fd = os.open(path, os.O_RDONLY)
        try:
            out.append((os.pread(fd, schema_length, schema_offset), os.pread(fd, length, offset)))
        finally:
            os.close(fd)
    return out


def read_scatter_bucket(scatter_dirs: Iterable[str], split: str, bucket: int) -> pa.Table | None:
    """Every scattered document of one (split, bucket), from all scatter folders, or None."""
    return read_scatter_pieces(scatter_pieces(scatter_dirs).get(scatter_key(split, bucket), []))


def _message_ranges(
    path: Path | str, ends: list[tuple[str, int]]
) -> tuple[list[int] | None, dict[str, list[list[int]]]]:
    """The [offset, length] of an IPC file's schema message and of each batch's message, per
    key, from where each batch ended (the writer's position after it; ``ends`` in write order).
    The schema goes out with the first batch, so the first batch starts where the schema
    message ends: read back."""
    if not ends:
        return None, {}
    head = pa.BufferReader(storage.read_ranges([(str(path), 0, ends[0][1])])[0])
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
    ordinary size). The folder is either complete or not there: locally it is built under a
    temporary name and renamed into place; in object storage its manifest is written last (see
    the module docstring)."""
    started = time.perf_counter()
    parts = PartTimes()
    final = location_path(task.output_dir)
    remote = is_remote(task.output_dir)
    if remote:
        target = final
        storage.remove(final / SCATTER_MANIFEST)  # an earlier folder's: not done until rewritten
    else:
        target = temporary_path(final)
        target.mkdir(parents=True)
    sink: Any = None
    try:
        with parts.part("read"):
            source = storage.parquet_file(task.input_path)
        with source, contextlib.ExitStack() as files:
            sink, scattered = _scatter_into(task, source, target / SCATTER_FILE, files, parts)
        with parts.part("commit"):
            if remote:
                sink.commit()
                size, checksum = sink.size, f"{CHECKSUM_ALGORITHM}:{sink.hexdigest}"
            else:
                size = (target / SCATTER_FILE).stat().st_size
                checksum = file_checksum(target / SCATTER_FILE)
        with parts.part("write"):
            schema, pieces = _message_ranges(target / SCATTER_FILE, scattered.ends)
        with parts.part("commit"):
            manifest = scattered.manifest(task.input_fingerprint, checksum, size, schema, pieces)
            if remote:
                storage.write_bytes(final / SCATTER_MANIFEST, json.dumps(manifest).encode())
            else:
                (target / SCATTER_MANIFEST).write_text(json.dumps(manifest))
                if final.exists():
                    shutil.rmtree(final)
                os.replace(target, final)
    except BaseException:
        if remote:
            if isinstance(sink, storage.ObjectWriter) and not sink.closed:
                sink.discard()
        else:
            shutil.rmtree(target, ignore_errors=True)
        raise
    return {
        "shard": task.key,
        "rows": scattered.rows,
        "seconds": time.perf_counter() - started,
        "parts": parts.as_dict(),
    }


@dataclass
class _ScatterCounts:
    """What one scatter counted while it wrote (its manifest's content)."""

    columns: list[str]
    mixed: bool
    counts: Counter[str] = field(default_factory=Counter)
    labels: dict[str, Counter[str]] = field(default_factory=dict)
    by_source: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    lengths: Counter[int] = field(default_factory=Counter)
    ends: list[tuple[str, int]] = field(default_factory=list)
    rows: int = 0

    def manifest(
        self,
        input_fingerprint: str,
        checksum: str,
        size: int,
        schema: list[int] | None,
        pieces: dict[str, list[list[int]]],
    ) -> dict[str, Any]:
        """The manifest (:func:`read_scatter_manifest`) of the folder written."""
        return {
            "input_fingerprint": input_fingerprint,
            "checksum": checksum,
            "bytes": size,
            "counts": dict(self.counts),
            "schema": schema,
            "pieces": pieces,
            "lengths": {str(n): d for n, d in sorted(self.lengths.items())},
            **(
                {"labels": {k: dict(sorted(c.items())) for k, c in self.labels.items()}}
                if LABEL in self.columns
                else {}
            ),
            **({"sources": self.by_source} if self.mixed else {}),
        }


def _scatter_into(
    task: ScatterTask,
    source: pq.ParquetFile,
    path: Path,
    files: contextlib.ExitStack,
    parts: PartTimes,
) -> tuple[Any, _ScatterCounts]:
    """Write the shard's chunks into the IPC file at ``path`` (a local file, or an object's
    upload, which the caller commits); the sink and what was counted."""
    mixed = task.spec.mixture is not None
    with parts.part("read"):
        columns = scatter_columns(
            source.schema_arrow.names, text=task.spec.augment != "none", sources=mixed
        )
    scattered = _ScatterCounts(columns=columns, mixed=mixed)
    out = sink = None
    for table in timed_reads(_scatter_chunks(source, columns), parts):
        with parts.part("compute"):
            keyed, present, starts, sizes, chunk_lengths = _scatter_order(table, task)
            scattered.lengths.update(chunk_lengths)
            scattered.rows += table.num_rows
        with parts.part("write"):
            if out is None:
                if is_remote(str(path)):
                    sink = storage.ObjectWriter(str(path))
                else:
                    sink = files.enter_context(pa.OSFile(str(path), "wb"))
                options = pa.ipc.IpcWriteOptions(compression="lz4", use_threads=READ_THREADS)
                out = files.enter_context(pa.ipc.new_file(sink, keyed.schema, options=options))
            for group, start, size in zip(present, starts, sizes, strict=True):
                split, bucket = divmod(int(group), task.n_buckets)
                part = keyed.slice(int(start), int(size)).combine_chunks()
                (batch,) = part.to_batches()  # one chunk after combine_chunks
                out.write_batch(batch)
                key = scatter_key(SPLITS[split], bucket)
                scattered.counts[key] += int(size)
                if LABEL in part.column_names:
                    scattered.labels.setdefault(key, Counter()).update(label_counts(part[LABEL]))
                if mixed:
                    held = scattered.by_source.setdefault(key, {})
                    for name, (docs, tokens) in source_counts(part).items():
                        was = held.setdefault(name, [0, 0])
                        was[0] += docs
                        was[1] += tokens
                scattered.ends.append((key, sink.tell()))
        del table, keyed
    return sink, scattered


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
