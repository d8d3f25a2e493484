"""The CSV reader: one document per record after the header, the other columns as metadata."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from functools import partial
from typing import IO, TYPE_CHECKING

import orjson

from llm_assets.kernels.ingest.chat import _keep_chat
from llm_assets.kernels.ingest.formats import _utf8
from llm_assets.kernels.ingest.records import (
    CORRUPT_FILE,
    INVALID_UTF8,
    MALFORMED_RECORD,
    MISSING_TEXT,
    RAGGED_ROW,
    _absent,
    _Batch,
    _metadata_keys,
)
from llm_assets.kernels.schema import SAMPLE_CHARS, StageResult
from llm_assets.storage import open_input

if TYPE_CHECKING:
    from llm_assets.kernels.ingest.read import IngestSpec


_MAX_CSV_FIELD = 2**31 - 1
_SAMPLE_LINES = 8
"""Physical lines of a rejected CSV record kept for its sample."""


def _read_csv(path: str, source_file: str, spec: IngestSpec) -> Iterator[StageResult]:
    """One document per record after the header; other columns go to metadata.

    Bytes are decoded with ``surrogateescape`` so that one record's invalid UTF-8 rejects only
    that record. The csv module's field size limit (process-wide, 128 KiB by default) is raised
    so that long documents are read instead of failing the file. A quote that is never closed,
    which makes the parser read to the end of the file for one field (the records after it
    silently gone), is a ``corrupt_file`` reject at the record where it opens. A record the
    parser refuses is a ``malformed_record`` reject, among them a quoted field followed by more
    characters before the delimiter (``"abc"def,1``: malformed per RFC 4180), which a lenient
    parser would read into one field with the next record's text.
    """
    csv.field_size_limit(max(csv.field_size_limit(), _MAX_CSV_FIELD))
    with open_input(path) as binary:
        stream, codec = _utf8(binary)
        batch = _Batch(source_file, codec)
        handle = io.TextIOWrapper(
            stream, encoding="utf-8-sig", errors="surrogateescape", newline=""
        )
        lines = _RecordLines(handle)
        rows = csv.reader(lines, delimiter=spec.csv_delimiter, strict=True)
        try:
            header = [_repair(name) for name in _csv_header(rows, lines)]
        except csv.Error as error:
            header = []
            if not lines.exhausted:
                value = f"unreadable header: {error}"
                batch.reject(0, CORRUPT_FILE, value, _repair(lines.record()))
                yield batch.flush()
                return
        if lines.exhausted and (header or lines.record()):
            # As for a record below: the header's quote is never closed and holds the file.
            value = "a quoted field of the header is never closed: the file is unreadable"
            batch.reject(0, CORRUPT_FILE, value, _repair(lines.record()))
            yield batch.flush()
            return
        text_index = header.index(spec.field) if spec.field in header else None
        keys = _metadata_keys(header)
        others = [(i, key) for i, key in enumerate(keys) if i != text_index]
        record = 0
        while True:
            lines.start_record()
            try:
                row = next(rows)
            except StopIteration:
                break
            except csv.Error as error:
                record += 1
                if lines.exhausted:
                    # The parser reads past the end only inside a quoted field: this record's
                    # quote is never closed and it holds the rest of the file.
                    value = "a quoted field is never closed: the rest of the file is unreadable"
                    batch.reject(record, CORRUPT_FILE, value, _repair(lines.record()))
                    break
                batch.reject(record, MALFORMED_RECORD, str(error), _repair(lines.record()))
            else:
                if not row:  # a blank line
                    continue
                record += 1
                _add_csv_record(batch, record, row, len(header), text_index, others, spec)
                batch.nbytes += sum(map(len, row))
            if batch.full(spec):
                yield batch.flush()
    if len(batch):
        yield batch.flush()


def _csv_header(rows: Iterator[list[str]], lines: _RecordLines) -> list[str]:
    """The first record that is not a blank (empty or whitespace-only) line: the header; ``[]``
    if there is none. Blank lines before the header are skipped as blank lines between records
    are, instead of the first one being taken as a header with no column (every record then
    ``ragged_row``)."""
    while True:
        lines.start_record()
        row = next(rows, [])
        if len(row) > 1 or (row and row[0].strip()) or lines.exhausted:
            return row


class _RecordLines:
    """The lines of a text file for ``csv.reader``, remembering those of the current record (for
    the sample of a record the parser rejects) and whether the file has ended."""

    def __init__(self, handle: IO[str]) -> None:
        self._lines = iter(handle)
        self._record: list[str] = []
        self.exhausted = False

    def __iter__(self) -> _RecordLines:
        return self

    def __next__(self) -> str:
        try:
            line = next(self._lines)
        except StopIteration:
            self.exhausted = True
            raise
        if len(self._record) < _SAMPLE_LINES:
            self._record.append(line)
        return line

    def start_record(self) -> None:
        """Forget the lines read so far: the parser starts a new record."""
        self._record.clear()

    def record(self) -> str:
        """The start of the current record's text (a sample, at most SAMPLE_CHARS characters)."""
        return "".join(self._record)[:SAMPLE_CHARS].rstrip("\r\n")


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
        value = _absent("column", spec.field, (name for _, name in others))
        batch.reject(record, MISSING_TEXT, value, spec.csv_delimiter.join(row))
        return
    if spec.chat_field is not None:
        fields = {name: row[i] for i, name in others}
        sample = partial(spec.csv_delimiter.join, row)
        _keep_chat(batch, record, row[text_index], fields, spec, sample)
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
