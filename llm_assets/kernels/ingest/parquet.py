"""The Parquet reader: one document per row, the other columns as metadata, every row that
Arrow's validation refuses a reject."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from llm_assets.kernels.ingest.chat import TOOLS, ChatError, _chat_documents
from llm_assets.kernels.ingest.records import (
    _NULL,
    CORRUPT_FILE,
    INVALID_CHAT,
    INVALID_UTF8,
    MALFORMED_RECORD,
    MISSING_TEXT,
    NON_STRING_TEXT,
    _absent,
    _Batch,
    _kept_table,
    _metadata_keys,
    _rejects,
)
from llm_assets.kernels.schema import StageResult
from llm_assets.storage import open_input

if TYPE_CHECKING:
    from llm_assets.kernels.ingest.read import IngestSpec


_PARQUET_ERRORS = (pa.ArrowException, OSError)


def _read_parquet(
    path: str, source_file: str, spec: IngestSpec, row_groups: tuple[int, int] | None = None
) -> Iterator[StageResult]:
    """One document per row; other columns go to metadata as JSON (``default=str``). With
    ``row_groups`` (first, end), only those row groups, their rows numbered as in the file.

    A file damaged midway keeps every row it can: when a read fails, reading starts again row
    group by row group from the row it stopped at, and each row group that cannot be read is one
    ``corrupt_file`` reject at its first unread row, its value naming the rows it covers.
    """
    with open_input(path) as handle:
        if not handle.peek(1):
            return
        try:
            parquet = pq.ParquetFile(handle)
        except _PARQUET_ERRORS as error:
            yield _corrupt(source_file, 0, str(error))
            return
        except UnicodeDecodeError as error:
            # pyarrow decodes the schema's names strictly: no row of such a file can be read.
            value = f"a column name is not valid UTF-8, so no row can be read: {error}"
            yield _corrupt(source_file, 0, value)
            return
        meta = parquet.metadata
        first, end = row_groups if row_groups is not None else (0, meta.num_row_groups)
        rows_read = sum(meta.row_group(g).num_rows for g in range(first))
        try:
            batch_size = parquet_batch_rows(meta, spec.batch_rows, spec.batch_bytes)
            # One row group at a time: iter_batches over the whole file keeps buffers that grow
            # with the file (see llm_assets.stages.shard_io.row_group_batches).
            for group in range(first, end):
                for record_batch in parquet.iter_batches(batch_size=batch_size, row_groups=[group]):
                    yield _parquet_result(record_batch, rows_read, source_file, spec)
                    rows_read += record_batch.num_rows
            return
        except _PARQUET_ERRORS:
            pass
        yield from _parquet_row_groups_from(parquet, rows_read, source_file, spec, end)


def _parquet_row_groups_from(
    parquet: pq.ParquetFile, rows_read: int, source_file: str, spec: IngestSpec, end: int
) -> Iterator[StageResult]:
    """The rows from ``rows_read`` on, up to row group ``end``, read one row group at a time
    (after a failed read)."""
    group_end = 0
    for group in range(end):
        group_start, group_end = group_end, group_end + parquet.metadata.row_group(group).num_rows
        if group_end <= rows_read:
            continue
        try:
            table = parquet.read_row_group(group).slice(rows_read - group_start)
        except _PARQUET_ERRORS as error:
            value = f"rows {rows_read + 1}-{group_end} (row group {group}) unreadable: {error}"
            yield _corrupt(source_file, rows_read + 1, value)
            rows_read = group_end
            continue
        batch_size = parquet_batch_rows(parquet.metadata, spec.batch_rows, spec.batch_bytes)
        for record_batch in table.to_batches(max_chunksize=batch_size):
            yield _parquet_result(record_batch, rows_read, source_file, spec)
            rows_read += record_batch.num_rows


def parquet_batch_rows(metadata: pq.FileMetaData, batch_rows: int, batch_bytes: int) -> int:
    """Rows per batch when reading a Parquet file: ``batch_rows``, fewer if the widest row
    group's rows (uncompressed bytes per row, from the footer) would make a batch larger than
    ``batch_bytes``. Used for the input files and for every stage's reading of the shards
    before it, so that memory follows bytes, not rows x document size, at every stage."""
    widest = max(
        (
            group.total_byte_size / group.num_rows
            for group in map(metadata.row_group, range(metadata.num_row_groups))
            if group.num_rows
        ),
        default=0,
    )
    if widest <= 0:
        return batch_rows
    return max(1, min(batch_rows, int(batch_bytes // widest)))


def _corrupt(source_file: str, line: int, value: str) -> StageResult:
    batch = _Batch(source_file)
    batch.reject(line, CORRUPT_FILE, value, None)
    return batch.flush()


def _parquet_result(
    record_batch: pa.RecordBatch, rows_before: int, source_file: str, spec: IngestSpec
) -> StageResult:
    """Split one record batch into kept documents and rejects (row numbers are 1-based).

    The first column named ``text_field`` (``chat_field``) is the text (the conversation); the
    others go to metadata under :func:`_metadata_keys` (a repeated name gets ``#2``...). Parquet
    readers do not check the values: a row with invalid UTF-8 in any column is an
    ``invalid_utf8`` reject, one with another value Arrow's validation refuses a
    ``malformed_record`` reject.
    """
    text_field, chat_field = spec.field, spec.chat_field
    names = record_batch.schema.names
    keys = _metadata_keys(names)
    columns = [_plain_strings(column) for column in record_batch.columns]
    text_at = names.index(text_field) if text_field in names else None
    text = columns[text_at] if text_at is not None else None
    others = pa.RecordBatch.from_arrays(
        [column for i, column in enumerate(columns) if i != text_at],
        [key for i, key in enumerate(keys) if i != text_at],
    )
    problems = _parquet_text_problems(
        text, record_batch.num_rows, text_field, keys, any_type=chat_field is not None
    )
    invalid = _invalid_rows(columns, keys)
    for row, problem in invalid.items():
        if problems[row] is None:
            problems[row] = problem
    chats = {}
    if chat_field is not None and text is not None:
        chats = _parquet_chats(text, others, problems, chat_field, spec.chat_answers)
    kept = [i for i, problem in enumerate(problems) if problem is None]
    rejected = [i for i, problem in enumerate(problems) if problem is not None]
    kept_index = pa.array(kept, pa.int64())
    lines = [rows_before + i + 1 for i in kept]
    parts = None
    if chat_field is not None:
        rows = [(rows_before + i + 1, *row) for i in kept for row in chats[i]]
        lines = [line for line, _, _, _ in rows]
        texts = pa.array([text for _, text, _, _ in rows], pa.string())
        metadata: list[bytes | None] = [fields for _, _, fields, _ in rows]
        parts = [part for _, _, _, part in rows]
        if all(part is None for part in parts):
            parts = None
    else:
        texts = text.take(kept_index).cast(pa.string()) if kept else pa.array([], pa.string())
        metadata = _metadata_json(others.take(kept_index))
    return StageResult(
        kept=_kept_table(source_file, lines, texts, metadata, parts),
        rejects=_rejects(
            source_file,
            [rows_before + i + 1 for i in rejected],
            [problems[i][0] for i in rejected],
            [problems[i][1] for i in rejected],
            _parquet_samples(columns, keys, rejected, invalid),
        ),
    )


def _parquet_chats(
    column: pa.Array,
    others: pa.RecordBatch,
    problems: list[tuple[str, str] | None],
    chat_field: str,
    answers: str | None,
) -> dict[int, list[tuple[str, bytes, int | None]]]:
    """Row -> its rows (text, metadata, part: :func:`_chat_documents`) for each row still without
    a problem whose chat column holds a conversation; the others get their ``invalid_chat``
    reject in ``problems``."""
    rows = [i for i, problem in enumerate(problems) if problem is None]
    index = pa.array(rows, pa.int64())
    values = column.take(index)
    try:
        conversations = values.to_pylist()
    except (OverflowError, ValueError):
        conversations = [_as_py(value) for value in values]
    chats = {}
    for row, value, fields in zip(
        rows, conversations, _metadata_json(others.take(index)), strict=True
    ):
        try:
            others_of_row = orjson.loads(fields) if fields else {}
            if others_of_row.get(TOOLS) is not None:
                others_of_row[TOOLS] = _without_nulls(others_of_row[TOOLS])
            value = _pruned_arguments(value)
            chats[row] = _chat_documents(value, others_of_row, chat_field, answers)
        except ChatError as error:
            problems[row] = (INVALID_CHAT, str(error))
    return chats


def _without_nulls(value: Any) -> Any:
    """``value`` without the object keys whose value is null, at any depth: Parquet gives every
    struct every field of its column, so a tool's definition would gain the properties of the
    others (``"tz": null``), written into the prompt."""
    if isinstance(value, dict):
        return {key: _without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def _pruned_arguments(value: Any) -> Any:
    """A Parquet conversation with its tool calls' object arguments :func:`_without_nulls` (a
    call would be learned with the arguments of the others). Arguments stored as JSON text, as
    OpenAI's format has them, keep their nulls."""
    if not isinstance(value, list):
        return value
    for message in value:
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for call in calls if isinstance(calls, list) else ():
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), dict):
                function["arguments"] = _without_nulls(function["arguments"])
    return value


def _plain_strings(column: pa.Array) -> pa.Array:
    """``column``, with ``string_view`` (which Arrow's ``take`` does not handle) cast to
    ``large_string``. The cast does not check UTF-8; :func:`_invalid_rows` does."""
    if pa.types.is_dictionary(column.type) and pa.types.is_string_view(column.type.value_type):
        column = column.dictionary_decode()
    if pa.types.is_string_view(column.type):
        return column.cast(pa.large_string())
    return column


def _invalid_rows(columns: list[pa.Array], keys: list[str]) -> dict[int, tuple[str, str]]:
    """Row index -> reject (reason, ``column 'name': <Arrow's message>``) for each row holding a
    value Arrow's full validation refuses in any column: ``invalid_utf8`` for a string that is not
    UTF-8, ``malformed_record`` for anything else (a ``time32`` past 24 h). One validation per
    column when all is well (the usual case); row by row only in a column that failed it."""
    invalid: dict[int, tuple[str, str]] = {}
    for key, column in zip(keys, columns, strict=True):
        try:
            column.validate(full=True)
            continue
        except pa.ArrowInvalid:
            pass
        if pa.types.is_dictionary(column.type):
            column = column.dictionary_decode()
        for row in range(len(column)):
            if row in invalid:
                continue
            try:
                column.slice(row, 1).validate(full=True)
            except pa.ArrowInvalid as error:
                reason = INVALID_UTF8 if _is_utf8_error(error) else MALFORMED_RECORD
                invalid[row] = (reason, f"column {key!r}: {error}")
    return invalid


def _is_utf8_error(error: pa.ArrowInvalid) -> bool:
    """Whether Arrow's validation refused a string for not being UTF-8 (its message says so)."""
    return "UTF8" in str(error)


def _parquet_samples(
    columns: list[pa.Array], keys: list[str], rows: list[int], invalid: dict[int, tuple[str, str]]
) -> list[str]:
    """Each rejected row as JSON, for people to read; invalid UTF-8 shown as U+FFFD."""
    clean = [row for row in rows if row not in invalid]
    table = pa.RecordBatch.from_arrays(columns, keys).take(pa.array(clean, pa.int64()))
    as_json = dict(zip(clean, _metadata_json(table), strict=True))
    return [
        (as_json[row] if row in as_json else _lossy_row_json(columns, keys, row) or b"{}").decode()
        for row in rows
    ]


def _lossy_row_json(columns: list[pa.Array], keys: list[str], row: int) -> bytes:
    """One row as JSON with invalid UTF-8 in its strings replaced (U+FFFD) and other values
    Arrow's validation refuses shown as Arrow prints them (``<value out of range: 90000>``)."""
    values = {}
    for key, column in zip(keys, columns, strict=True):
        cell = column.slice(row, 1)
        if pa.types.is_dictionary(cell.type):
            cell = cell.dictionary_decode()
        try:
            cell.validate(full=True)
            values[key] = _as_py(cell[0])
        except pa.ArrowInvalid:
            if _is_string_type(cell.type):
                binary = pa.large_binary() if pa.types.is_large_string(cell.type) else pa.binary()
                raw = cell.view(binary)[0].as_py()
                values[key] = raw.decode("utf-8", "replace") if raw is not None else None
            else:
                values[key] = _arrow_text(cell[0])
    return orjson.dumps(values, default=str)


def _parquet_text_problems(
    text: pa.Array | None,
    n_rows: int,
    text_field: str,
    names: list[str],
    *,
    any_type: bool = False,
) -> list[tuple[str, str] | None]:
    """Per row: None if the text is a string (with ``any_type``: not null), else the reject's
    (reason, value)."""
    if text is None:
        return [(MISSING_TEXT, _absent("column", text_field, names))] * n_rows
    null = (MISSING_TEXT, _NULL)
    valid = text.is_valid().to_pylist()
    if any_type or _is_string_type(text.type):
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
    (bytes, Decimal, ...) become strings, and so do values Python cannot hold (see
    :func:`_as_py`). Arrow converts whole columns (the usual case); a column it cannot convert
    is converted value by value."""
    if not columns.num_columns:
        return [None] * columns.num_rows
    try:
        rows = columns.to_pylist()
    except (OverflowError, ValueError):
        rows = [{} for _ in range(columns.num_rows)]
        for name, column in zip(columns.schema.names, columns.columns, strict=True):
            try:
                values = column.to_pylist()
            except (OverflowError, ValueError):
                values = [_as_py(cell) for cell in column]
            for row, value in zip(rows, values, strict=True):
                row[name] = value
    return [orjson.dumps(row, default=str) for row in rows]


def _as_py(scalar: pa.Scalar) -> Any:
    """``scalar.as_py()``, except that a value Python cannot hold (a date or timestamp before
    year 1 or after 9999, such as the ``Long.MAX_VALUE`` ms some writers store for "never", a
    duration past 999,999,999 days) becomes Arrow's text of it, ``<value out of range: N>``, and
    a struct with repeated field names a dict keyed like :func:`_metadata_keys`: a metadata value
    must never fail the file. Inside lists, maps and structs only the failing values change."""
    try:
        return scalar.as_py()
    except (OverflowError, ValueError):
        pass
    if isinstance(scalar, pa.DictionaryScalar):
        return _as_py(scalar.value)
    if isinstance(scalar, pa.MapScalar):
        return [(_as_py(entry["key"]), _as_py(entry["value"])) for entry in scalar.values]
    if isinstance(scalar, pa.ListScalar):
        return [_as_py(item) for item in scalar.values]
    if isinstance(scalar, pa.StructScalar):
        names = [name for name, _ in scalar.items()]
        return {
            key: _as_py(value)
            for key, (_, value) in zip(_metadata_keys(names), scalar.items(), strict=True)
        }
    return _arrow_text(scalar)


def _arrow_text(scalar: pa.Scalar) -> str | None:
    """Arrow's text of a value (for one that Python cannot hold or that fails validation)."""
    if not scalar.is_valid:
        return None
    if pa.types.is_timestamp(scalar.type) and scalar.type.tz is not None:
        # Arrow prints an out-of-range instant with a time zone as garbage; without it (the same
        # UTC value) as ``<value out of range: N>``.
        scalar = scalar.cast(pa.timestamp(scalar.type.unit))
    if pa.types.is_duration(scalar.type):  # Arrow prints a bare number: name its unit
        return f"{scalar.cast(pa.int64()).as_py()} {scalar.type.unit}"
    try:
        return scalar.cast(pa.string()).as_py()
    except pa.ArrowException:
        return f"<{scalar.type} value that cannot be shown>"
