"""Ingest kernel: read one input file into document batches and a record of what was dropped.

Pure (no Dagster, no module state): :func:`read_documents` streams a JSONL (plain, gzip, zstd),
Parquet, CSV or TXT file and yields a :class:`~llm_assets.lib.schema.StageResult` every
``batch_rows`` records. Bad input never raises: every record read is either kept or rejected
exactly once, with one of the reasons below, so the rows of a run always reconcile. Only a file
that cannot be opened at all (missing, permission denied) raises :class:`OSError`.
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from typing import IO, Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from llm_assets.lib.schema import (
    DOCUMENT_SCHEMA,
    SAMPLE_CHARS,
    StageResult,
    make_doc_id,
    rejects_table,
)

STAGE_NAME = "ingest"
"""Value of the ``stage`` column of every reject this module writes."""

SUPPORTED_SUFFIXES: tuple[str, ...] = (
    ".jsonl",
    ".jsonl.gz",
    ".jsonl.zst",
    ".parquet",
    ".csv",
    ".txt",
)

# --- reject reasons ---------------------------------------------------------------------------
EMPTY_FILE = "empty_file"
"""The file holds no record (zero bytes, only whitespace, a CSV header only, a Parquet file with
no rows): one reject with source_line 0, so the file still shows up in the rejects."""
INVALID_UTF8 = "invalid_utf8"
"""The line (TXT: paragraph, CSV: record) is not valid UTF-8; value = the decode error."""
INVALID_JSON = "invalid_json"
"""The line is valid UTF-8 but not valid JSON; value = the parser's message."""
NOT_AN_OBJECT = "not_an_object"
"""The line is valid JSON but not an object; value = its type (``list``, ``str``, ...)."""
MISSING_TEXT = "missing_text"
"""The text field (column) is absent (value ``absent``) or null (value ``null``)."""
NON_STRING_TEXT = "non_string_text"
"""The text field is not a string; value = its type (JSON: ``int``, ``list``; Parquet: the Arrow
type, ``int64``)."""
RAGGED_ROW = "ragged_row"
"""A CSV record whose field count differs from the header's; value = ``expected N fields, got
M``."""
CORRUPT_FILE = "corrupt_file"
"""The stream cannot be decoded (not gzip / zstd / Parquet, or damaged midway): one reject for the
rest of the file, at the line where reading stopped (0 if nothing was read)."""
TRUNCATED_FILE = "truncated_file"
"""A gzip or zstd stream ends early: the records before the cut are kept, one reject at the next
line."""

REJECT_REASONS: tuple[str, ...] = (
    EMPTY_FILE,
    INVALID_UTF8,
    INVALID_JSON,
    NOT_AN_OBJECT,
    MISSING_TEXT,
    NON_STRING_TEXT,
    RAGGED_ROW,
    CORRUPT_FILE,
    TRUNCATED_FILE,
)

_MISSING = object()
"""Sentinel: the text field is not in the record."""
_ABSENT = "absent"
_NULL = "null"
_BOM = b"\xef\xbb\xbf"
_READ_CHUNK = 1 << 20
_SAMPLE_BYTES = SAMPLE_CHARS * 4
"""Bytes of an offending line decoded for its sample: enough for SAMPLE_CHARS characters without
decoding a whole (possibly huge) line."""
_MAX_CSV_FIELD = 2**31 - 1
_CORRUPT_ERRORS = (gzip.BadGzipFile, zlib.error, zstandard.ZstdError)
"""What a compressed stream raises when its bytes cannot be decoded (EOFError means truncated)."""


class UnsupportedFileError(ValueError):
    """The file's suffix is not one of :data:`SUPPORTED_SUFFIXES`."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"{path}: unsupported file type; supported suffixes: {', '.join(SUPPORTED_SUFFIXES)}"
        )
        self.path = path


@dataclass(frozen=True)
class IngestSpec:
    """How to read input files. Small, frozen and picklable: it is shipped to worker processes."""

    text_field: str = "text"
    """Name of the JSON field / CSV or Parquet column that holds the document text."""
    batch_rows: int = 8192
    """Records (kept + rejected) per yielded StageResult."""
    csv_delimiter: str = ","

    def __post_init__(self) -> None:
        if self.batch_rows < 1:
            raise ValueError(f"batch_rows must be at least 1, got {self.batch_rows}")


def detect_format(path: str) -> str:
    """Return the format named by ``path``'s suffix, case-insensitive: ``jsonl``, ``jsonl.gz``,
    ``jsonl.zst``, ``parquet``, ``csv`` or ``txt``.

    Raises :class:`UnsupportedFileError` for any other suffix.
    """
    lowered = os.fspath(path).lower()
    for suffix in SUPPORTED_SUFFIXES:
        if lowered.endswith(suffix):
            return suffix[1:]
    raise UnsupportedFileError(path)


def read_documents(
    path: str,
    source_file: str,
    spec: IngestSpec,
    *,
    byte_range: tuple[int, int] | None = None,
    first_line: int = 1,
) -> Iterator[StageResult]:
    """Stream the documents of the file at ``path``, recorded under the name ``source_file``.

    Yields one StageResult per ``spec.batch_rows`` records, in file order (the last may be
    smaller). The format is checked at once (:class:`UnsupportedFileError`); the file is opened
    when iteration starts, and an :class:`OSError` from opening it propagates.

    ``byte_range`` (plain ``.jsonl`` only) reads the bytes ``[start, end)``, which must begin and
    end at line boundaries; ``first_line`` is the 1-based number of its first line, so locations
    and ``doc_id`` equal those of a whole-file read. Only a whole file can be an ``empty_file``.
    """
    fmt = detect_format(path)
    if byte_range is None:
        return _with_empty_file_reject(_READERS[fmt](path, source_file, spec), source_file)
    if fmt != "jsonl":
        raise ValueError(f"byte_range only applies to plain .jsonl files, not {path}")
    start, end = byte_range
    if start == 0 and end >= os.path.getsize(path):
        return _with_empty_file_reject(
            _read_jsonl_range(path, source_file, spec, start, end, first_line), source_file
        )
    return _read_jsonl_range(path, source_file, spec, start, end, first_line)


def _read_jsonl_range(
    path: str, source_file: str, spec: IngestSpec, start: int, end: int, first_line: int
) -> Iterator[StageResult]:
    with open(path, "rb") as handle:
        handle.seek(start)
        stream = io.BytesIO(handle.read(max(0, end - start)))
    if start == 0:
        yield from _read_jsonl_stream(stream, source_file, spec, first_line)
    else:
        # Only the file's first line may start with a BOM.
        yield from _read_jsonl_stream(stream, source_file, spec, first_line, strip_bom=False)


def _with_empty_file_reject(
    results: Iterable[StageResult], source_file: str
) -> Iterator[StageResult]:
    """Pass ``results`` through; if they held no row at all, yield one ``empty_file`` reject."""
    emitted = False
    for result in results:
        emitted = True
        yield result
    if not emitted:
        batch = _Batch(source_file)
        batch.reject(0, EMPTY_FILE, "no records", None)
        yield batch.flush()


# --- batches ----------------------------------------------------------------------------------
class _Batch:
    """Kept rows and rejects of one file, collected column by column until the next flush."""

    def __init__(self, source_file: str) -> None:
        self.source_file = source_file
        self.lines: list[int] = []
        self.texts: list[str] = []
        self.metadata: list[bytes | None] = []
        self.reject_lines: list[int] = []
        self.reasons: list[str] = []
        self.values: list[str | None] = []
        self.samples: list[str | None] = []

    def __len__(self) -> int:
        return len(self.lines) + len(self.reject_lines)

    def keep(self, line: int, text: str, metadata: bytes | None) -> None:
        self.lines.append(line)
        self.texts.append(text)
        self.metadata.append(metadata)

    def reject(self, line: int, reason: str, value: str | None, sample: str | None) -> None:
        self.reject_lines.append(line)
        self.reasons.append(reason)
        self.values.append(value)
        self.samples.append(sample)

    def flush(self) -> StageResult:
        """Build the Arrow tables of everything collected and start over (lists are reused)."""
        result = StageResult(
            kept=_kept_table(
                self.source_file, self.lines, pa.array(self.texts, pa.string()), self.metadata
            ),
            rejects=_rejects(
                self.source_file, self.reject_lines, self.reasons, self.values, self.samples
            ),
        )
        for column in (self.lines, self.texts, self.metadata):
            column.clear()
        for column in (self.reject_lines, self.reasons, self.values, self.samples):
            column.clear()
        return result


def _kept_table(
    source_file: str, lines: list[int], texts: pa.Array, metadata: list[bytes | None]
) -> pa.Table:
    """Documents with :data:`DOCUMENT_SCHEMA`; metadata is compact JSON (UTF-8 bytes) or None."""
    return pa.Table.from_arrays(
        [
            pa.array([make_doc_id(source_file, line) for line in lines], pa.string()),
            pa.repeat(pa.scalar(source_file, pa.string()), len(lines)),
            pa.array(lines, pa.int64()),
            texts,
            pa.array(metadata, pa.string()),
        ],
        schema=DOCUMENT_SCHEMA,
    )


def _rejects(
    source_file: str,
    lines: list[int],
    reasons: list[str],
    values: list[str | None],
    samples: list[str | None],
) -> pa.Table:
    return rejects_table(
        doc_ids=[make_doc_id(source_file, line) for line in lines],
        source_files=[source_file] * len(lines),
        source_lines=lines,
        stage=STAGE_NAME,
        reasons=reasons,
        values=values,
        samples=samples,
    )


def _text_problem(value: Any) -> tuple[str, str]:
    """Reason and value of a reject for a text field that is not a string."""
    if value is _MISSING:
        return MISSING_TEXT, _ABSENT
    if value is None:
        return MISSING_TEXT, _NULL
    return NON_STRING_TEXT, type(value).__name__


def _sample(raw: bytes) -> str:
    """The readable start of an offending line (invalid bytes replaced, line ending removed)."""
    return raw[:_SAMPLE_BYTES].decode("utf-8", "replace").rstrip("\r\n")


def _stopped_at(lineno: int) -> int:
    """Source line of a ``corrupt_file`` reject: the line reading stopped at, 0 if none was read."""
    return lineno + 1 if lineno else 0


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    """The physical lines of a binary stream (``\\n``-terminated), without a leading UTF-8 BOM."""
    lines = iter(stream)
    first = next(lines, b"")
    return chain((first.removeprefix(_BOM),), lines)


# --- JSONL ------------------------------------------------------------------------------------
class _ZstdFrames(io.RawIOBase):
    """Decompress concatenated zstd frames; raise EOFError if the source ends inside a frame.

    zstandard's ``stream_reader`` returns the data of a cut-off stream without any error, so each
    frame gets its own ``decompressobj``, whose ``eof`` says whether the frame was complete.
    """

    def __init__(self, source: IO[bytes]) -> None:
        super().__init__()
        self._source = source
        self._decompressor = zstandard.ZstdDecompressor()
        self._frame = self._decompressor.decompressobj()
        self._in_frame = False
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            compressed = self._source.read(_READ_CHUNK)
            if not compressed:
                if self._in_frame:
                    raise EOFError("zstd stream ended before the end of its last frame")
                return 0
            self._pending = memoryview(self._decompress(compressed))
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def _decompress(self, compressed: bytes) -> bytes:
        chunks = []
        while compressed:
            chunks.append(self._frame.decompress(compressed))
            self._in_frame = not self._frame.eof
            if self._in_frame:
                break
            compressed = self._frame.unused_data
            self._frame = self._decompressor.decompressobj()
        return b"".join(chunks)


def _decompressed(handle: IO[bytes], fmt: str) -> IO[bytes]:
    """The decompressed byte stream of an open ``jsonl*`` file."""
    if fmt == "jsonl.gz":
        return gzip.GzipFile(fileobj=handle, mode="rb")
    if fmt == "jsonl.zst":
        return io.BufferedReader(_ZstdFrames(handle), _READ_CHUNK)
    return handle


def _jsonl_reader(fmt: str) -> Callable[[str, str, IngestSpec], Iterator[StageResult]]:
    def read(path: str, source_file: str, spec: IngestSpec) -> Iterator[StageResult]:
        with (
            open(path, "rb", buffering=_READ_CHUNK) as handle,
            _decompressed(handle, fmt) as stream,
        ):
            yield from _read_jsonl_stream(stream, source_file, spec)

    return read


def _read_jsonl_stream(
    stream: IO[bytes],
    source_file: str,
    spec: IngestSpec,
    first_line: int = 1,
    *,
    strip_bom: bool = True,
) -> Iterator[StageResult]:
    """Parse one JSON object per line. The hot path: kept rows touch only list appends."""
    batch = _Batch(source_file)
    keep_line, keep_text, keep_metadata = (
        batch.lines.append,
        batch.texts.append,
        batch.metadata.append,
    )
    loads, dumps, decode_error = orjson.loads, orjson.dumps, orjson.JSONDecodeError
    text_field, batch_rows, missing = spec.text_field, spec.batch_rows, _MISSING
    pending = 0
    lineno = 0
    try:
        lines = _lines(stream) if strip_bom else iter(stream)
        for lineno, raw in enumerate(lines, first_line):
            try:
                record = loads(raw)
            except decode_error as error:
                if not raw.strip():
                    continue
                batch.reject(lineno, *_undecodable(raw, error), _sample(raw))
            else:
                if type(record) is dict:
                    text = record.pop(text_field, missing)
                    if type(text) is str:
                        keep_line(lineno)
                        keep_text(text)
                        keep_metadata(dumps(record) if record else None)
                    else:
                        batch.reject(lineno, *_text_problem(text), _sample(raw))
                else:
                    batch.reject(lineno, NOT_AN_OBJECT, type(record).__name__, _sample(raw))
            pending += 1
            if pending == batch_rows:
                yield batch.flush()
                pending = 0
    except EOFError as error:
        batch.reject(lineno + 1, TRUNCATED_FILE, str(error), None)
    except _CORRUPT_ERRORS as error:
        batch.reject(_stopped_at(lineno), CORRUPT_FILE, str(error), None)
    if len(batch):
        yield batch.flush()


def _undecodable(raw: bytes, error: ValueError) -> tuple[str, str]:
    """Reason and value for a line orjson rejected: invalid UTF-8 first, else invalid JSON."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as utf8_error:
        return INVALID_UTF8, str(utf8_error)
    return INVALID_JSON, str(error)


# --- TXT --------------------------------------------------------------------------------------
def _read_txt(path: str, source_file: str, spec: IngestSpec) -> Iterator[StageResult]:
    """One document per paragraph (lines separated by blank lines), at its first line."""
    batch = _Batch(source_file)
    paragraph: list[bytes] = []
    first_line = 0
    with open(path, "rb", buffering=_READ_CHUNK) as handle:
        for lineno, raw in enumerate(_lines(handle), 1):
            if raw.strip():
                if not paragraph:
                    first_line = lineno
                paragraph.append(_chomp(raw))
                continue
            if paragraph:
                _add_paragraph(batch, first_line, paragraph)
                paragraph = []
                if len(batch) >= spec.batch_rows:
                    yield batch.flush()
    if paragraph:
        _add_paragraph(batch, first_line, paragraph)
    if len(batch):
        yield batch.flush()


def _chomp(raw: bytes) -> bytes:
    """``raw`` without its line ending (``\\n`` or ``\\r\\n``)."""
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    return raw


def _add_paragraph(batch: _Batch, first_line: int, lines: list[bytes]) -> None:
    joined = b"\n".join(lines)
    try:
        batch.keep(first_line, joined.decode("utf-8"), None)
    except UnicodeDecodeError as error:
        batch.reject(first_line, INVALID_UTF8, str(error), _sample(joined))


# --- CSV --------------------------------------------------------------------------------------
def _read_csv(path: str, source_file: str, spec: IngestSpec) -> Iterator[StageResult]:
    """One document per record after the header; other columns go to metadata.

    Bytes are decoded with ``surrogateescape`` so that one record's invalid UTF-8 rejects only
    that record. The csv module's field size limit (process-wide, 128 KiB by default) is raised
    so that long documents are read instead of failing the file.
    """
    csv.field_size_limit(max(csv.field_size_limit(), _MAX_CSV_FIELD))
    batch = _Batch(source_file)
    with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as handle:
        rows = csv.reader(handle, delimiter=spec.csv_delimiter)
        header = [_repair(name) for name in next(rows, [])]
        text_index = header.index(spec.text_field) if spec.text_field in header else None
        others = [(i, name) for i, name in enumerate(header) if i != text_index]
        record = 0
        for row in rows:
            if not row:  # a blank line
                continue
            record += 1
            _add_csv_record(batch, record, row, len(header), text_index, others, spec)
            if len(batch) >= spec.batch_rows:
                yield batch.flush()
    if len(batch):
        yield batch.flush()


def _add_csv_record(
    batch: _Batch,
    record: int,
    row: list[str],
    n_fields: int,
    text_index: int | None,
    others: list[tuple[int, str]],
    spec: IngestSpec,
) -> None:
    """Keep or reject one CSV record: ragged first, then invalid UTF-8, then a missing text."""
    if len(row) != n_fields:
        value = f"expected {n_fields} fields, got {len(row)}"
        batch.reject(record, RAGGED_ROW, value, _repair(spec.csv_delimiter.join(row)))
        return
    utf8_error = _utf8_error(row)
    if utf8_error is not None:
        batch.reject(record, INVALID_UTF8, utf8_error, _repair(spec.csv_delimiter.join(row)))
        return
    if text_index is None:
        batch.reject(record, MISSING_TEXT, _ABSENT, spec.csv_delimiter.join(row))
        return
    metadata = orjson.dumps({name: row[i] for i, name in others}) if others else None
    batch.keep(record, row[text_index], metadata)


def _utf8_error(fields: list[str]) -> str | None:
    """The decode error of the first field that held invalid UTF-8 (surrogate-escaped), if any."""
    for field in fields:
        try:
            field.encode("utf-8")
        except UnicodeEncodeError:
            try:
                field.encode("utf-8", "surrogateescape").decode("utf-8")
            except UnicodeDecodeError as error:
                return str(error)
    return None


def _repair(text: str) -> str:
    """``text`` with surrogate-escaped invalid bytes replaced by U+FFFD (Arrow needs UTF-8)."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


# --- Parquet ----------------------------------------------------------------------------------
def _read_parquet(path: str, source_file: str, spec: IngestSpec) -> Iterator[StageResult]:
    """One document per row; other columns go to metadata as JSON (``default=str``)."""
    rows_read = 0
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return
        try:
            batches = pq.ParquetFile(handle).iter_batches(batch_size=spec.batch_rows)
            for record_batch in batches:
                yield _parquet_result(record_batch, rows_read, source_file, spec.text_field)
                rows_read += record_batch.num_rows
        except (pa.ArrowException, OSError) as error:
            batch = _Batch(source_file)
            batch.reject(_stopped_at(rows_read), CORRUPT_FILE, str(error), None)
            yield batch.flush()


def _parquet_result(
    record_batch: pa.RecordBatch, rows_before: int, source_file: str, text_field: str
) -> StageResult:
    """Split one record batch into kept documents and rejects (row numbers are 1-based)."""
    if text_field in record_batch.schema.names:
        text = record_batch.column(text_field)
        others = record_batch.drop_columns([text_field])
    else:
        text, others = None, record_batch
    problems = _parquet_text_problems(text, record_batch.num_rows)
    kept = [i for i, problem in enumerate(problems) if problem is None]
    rejected = [i for i, problem in enumerate(problems) if problem is not None]
    kept_index = pa.array(kept, pa.int64())
    texts = text.take(kept_index).cast(pa.string()) if kept else pa.array([], pa.string())
    samples = [
        orjson.dumps(row, default=str).decode()
        for row in record_batch.take(pa.array(rejected, pa.int64())).to_pylist()
    ]
    return StageResult(
        kept=_kept_table(
            source_file,
            [rows_before + i + 1 for i in kept],
            texts,
            _metadata_json(others.take(kept_index)),
        ),
        rejects=_rejects(
            source_file,
            [rows_before + i + 1 for i in rejected],
            [problems[i][0] for i in rejected],
            [problems[i][1] for i in rejected],
            samples,
        ),
    )


def _parquet_text_problems(text: pa.Array | None, n_rows: int) -> list[tuple[str, str] | None]:
    """Per row: None if the text is a string, else the reject's (reason, value)."""
    if text is None:
        return [(MISSING_TEXT, _ABSENT)] * n_rows
    null = (MISSING_TEXT, _NULL)
    valid = text.is_valid().to_pylist()
    if _is_string_type(text.type):
        return [None if ok else null for ok in valid]
    wrong_type = (NON_STRING_TEXT, str(text.type))
    return [wrong_type if ok else null for ok in valid]


def _is_string_type(arrow_type: pa.DataType) -> bool:
    if pa.types.is_dictionary(arrow_type):
        arrow_type = arrow_type.value_type
    return (
        pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
        or pa.types.is_string_view(arrow_type)
    )


def _metadata_json(columns: pa.RecordBatch) -> list[bytes | None]:
    """Each row as a compact JSON object (None without columns); values JSON cannot hold
    (bytes, Decimal, ...) become strings."""
    if not columns.num_columns:
        return [None] * columns.num_rows
    return [orjson.dumps(row, default=str) for row in columns.to_pylist()]


_READERS: dict[str, Callable[[str, str, IngestSpec], Iterator[StageResult]]] = {
    "jsonl": _jsonl_reader("jsonl"),
    "jsonl.gz": _jsonl_reader("jsonl.gz"),
    "jsonl.zst": _jsonl_reader("jsonl.zst"),
    "parquet": _read_parquet,
    "csv": _read_csv,
    "txt": _read_txt,
}
