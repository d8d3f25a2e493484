"""The Arrow IPC reader (``.arrow``): the files Hugging Face ``datasets`` writes, by
``Dataset.save_to_disk`` and in its cache. One document per row, the ``text_field`` column the
text and the other columns metadata, as for Parquet.

Those files are Arrow IPC *streams*, which have no footer to index their record batches: to cut
a big one into shards, :func:`record_batch_spans` walks the messages' headers and seeks over
their bodies, so planning reads a few hundred bytes per batch, and a shard's task reads only its
batches' bytes (range requests on object storage)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

import pyarrow as pa

from llm_assets.kernels.ingest.parquet import _corrupt, _parquet_result
from llm_assets.kernels.schema import StageResult
from llm_assets.storage import open_input

if TYPE_CHECKING:
    from llm_assets.kernels.ingest.read import IngestSpec

FILE_MAGIC = b"ARROW1"
"""The first bytes of the IPC *file* format (Feather v2), a stream between a magic and a footer."""
_CONTINUATION = 0xFFFFFFFF
_SCHEMA, _DICTIONARY_BATCH, _RECORD_BATCH = 1, 2, 3
"""``MessageHeader`` union types of Arrow's ``Message.fbs``."""
_ERRORS = (pa.ArrowException, OSError, EOFError, struct.error)


class NotSplittable(ValueError):
    """An Arrow file that is read whole: not a stream of plain record batches (dictionary
    batches, an unknown message), or damaged: its task says what is wrong."""


def _table_field(meta: bytes, table: int, field: int) -> int | None:
    """The absolute position of ``field`` of the flatbuffer table at ``table``, None when
    absent (its default applies)."""
    vtable = table - struct.unpack_from("<i", meta, table)[0]
    vtable_size = struct.unpack_from("<H", meta, vtable)[0]
    slot = 4 + 2 * field
    if slot >= vtable_size:
        return None
    offset = struct.unpack_from("<H", meta, vtable + slot)[0]
    return table + offset if offset else None


def _message_header(meta: bytes) -> tuple[int, int, int]:
    """(header type, body length, rows: a record batch's length, else 0) of the flatbuffer
    ``Message`` ``meta``: fields version 0, header type 1, header 2, bodyLength 3; a
    ``RecordBatch``'s length is its field 0."""
    root = struct.unpack_from("<I", meta, 0)[0]
    at = _table_field(meta, root, 1)
    kind = meta[at] if at is not None else 0
    at = _table_field(meta, root, 3)
    body = struct.unpack_from("<q", meta, at)[0] if at is not None else 0
    rows = 0
    at = _table_field(meta, root, 2)
    if kind == _RECORD_BATCH and at is not None:
        header = at + struct.unpack_from("<I", meta, at)[0]
        length_at = _table_field(meta, header, 0)
        rows = struct.unpack_from("<q", meta, length_at)[0] if length_at is not None else 0
    return kind, body, rows


def _messages(handle: IO[bytes]) -> Iterator[tuple[int, int, int, int]]:
    """(offset, end, header type, rows) of each message of the stream at ``handle``'s position,
    up to its end-of-stream marker or the end of the file; bodies are skipped with a seek."""
    while True:
        offset = handle.tell()
        prefix = handle.read(4)
        if len(prefix) < 4:
            return
        size = struct.unpack("<I", prefix)[0]
        if size == _CONTINUATION:  # the format since Arrow 0.15; before it, the size alone
            prefix = handle.read(4)
            if len(prefix) < 4:
                raise NotSplittable("the stream ends inside a message's prefix")
            size = struct.unpack("<I", prefix)[0]
        if size == 0:
            return
        meta = handle.read(size)
        if len(meta) < size:
            raise NotSplittable("the stream ends inside a message's metadata")
        kind, body, rows = _message_header(meta)
        end = handle.tell() + body
        handle.seek(end)
        yield offset, end, kind, rows


def record_batch_spans(location: str, block_size: int = 1 << 16) -> list[tuple[int, int, int]]:
    """(start byte, end byte, rows) of each record batch of the Arrow IPC stream (or file) at
    ``location``, from the messages' headers alone. Raises :class:`NotSplittable` when it holds
    anything but one schema and record batches, or cannot be walked."""
    spans = []
    try:
        with open_input(location, block_size=block_size) as handle:
            if handle.peek(len(FILE_MAGIC))[: len(FILE_MAGIC)] == FILE_MAGIC:
                handle.seek(8)  # the magic, padded to 8 bytes
            for offset, end, kind, rows in _messages(handle):
                if kind == _RECORD_BATCH:
                    spans.append((offset, end, rows))
                elif kind != _SCHEMA or spans:
                    raise NotSplittable(f"message type {kind} after the schema")
    except _ERRORS as error:
        raise NotSplittable(str(error)) from error
    return spans


def _read_arrow(
    path: str,
    source_file: str,
    spec: IngestSpec,
    byte_range: tuple[int, int] | None = None,
    first_row: int = 1,
) -> Iterator[StageResult]:
    """One document per row (see :func:`~llm_assets.kernels.ingest.parquet._parquet_result`);
    with ``byte_range``, only the record batches whose messages lie there (from
    :func:`record_batch_spans`), their first row numbered ``first_row``. A stream that cannot
    be read further is one ``corrupt_file`` reject at the first row not read."""
    rows_read = first_row - 1
    with open_input(path) as handle:
        if not handle.peek(1):
            return
        try:
            for batch in _record_batches(handle, byte_range):
                for part in _slices(batch, spec):
                    yield _parquet_result(part, rows_read, source_file, spec)
                    rows_read += part.num_rows
        except _ERRORS as error:
            yield _corrupt(source_file, rows_read + 1, f"unreadable Arrow data: {error}")


def _record_batches(
    handle: IO[bytes], byte_range: tuple[int, int] | None
) -> Iterator[pa.RecordBatch]:
    is_file = handle.peek(len(FILE_MAGIC))[: len(FILE_MAGIC)] == FILE_MAGIC
    if byte_range is None:
        if is_file:
            reader = pa.ipc.open_file(handle)
            yield from (reader.get_batch(i) for i in range(reader.num_record_batches))
        else:
            yield from pa.ipc.open_stream(handle)
        return
    handle.seek(8 if is_file else 0)
    schema = pa.ipc.read_schema(pa.ipc.read_message(handle))
    start, end = byte_range
    handle.seek(start)
    while handle.tell() < end:
        yield pa.ipc.read_record_batch(pa.ipc.read_message(handle), schema)


def _slices(batch: pa.RecordBatch, spec: IngestSpec) -> Iterator[pa.RecordBatch]:
    """``batch`` in pieces of at most ``spec.batch_rows`` rows and about ``spec.batch_bytes``."""
    if not batch.num_rows:
        return
    per_row = batch.nbytes / batch.num_rows
    rows = max(1, min(spec.batch_rows, int(spec.batch_bytes // per_row) if per_row else 1 << 62))
    for start in range(0, batch.num_rows, rows):
        yield batch.slice(start, rows)
