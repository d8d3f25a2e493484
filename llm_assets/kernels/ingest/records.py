"""What every reader of the ingest kernel builds: a batch of kept documents (with their
``doc_id``) and rejects, each with one of the reject reasons below, and the samples and values
those rejects show."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from llm_assets.kernels.schema import (
    DOCUMENT_SCHEMA,
    SAMPLE_CHARS,
    StageResult,
    make_doc_id,
    rejects_table,
)

if TYPE_CHECKING:
    from llm_assets.kernels.ingest.read import IngestSpec


STAGE_NAME = "ingest"
"""Value of the ``stage`` column of every reject this module writes."""

EMPTY_FILE = "empty_file"
"""The file holds no record (zero bytes, only whitespace, a CSV header only, a Parquet file with
no rows): one reject with source_line 0, so the file still shows up in the rejects."""
INVALID_UTF8 = "invalid_utf8"
"""The line (TXT: paragraph, CSV: record, Parquet: a string in any column of the row) is not
valid UTF-8; value = the decode error (Parquet: the column and Arrow's message)."""
INVALID_JSON = "invalid_json"
"""The line is valid UTF-8 but not valid JSON; value = the parser's message."""
NOT_AN_OBJECT = "not_an_object"
"""The line is valid JSON but not an object; value = its type (``list``, ``str``, ...)."""
MISSING_TEXT = "missing_text"
"""The text field (column) is absent or null (value ``null``). Absent: the value names the field
looked for and the fields the record has (``no field 'text' (fields: content, id)``; CSV and
Parquet: ``no column 'text' (columns: ...)``), so a ``text_field`` that does not match the data
says what would. Only top-level fields are read: a text nested in an object is not found."""
NON_STRING_TEXT = "non_string_text"
"""The text field is not a string; value = its type (JSON: ``int``, ``list``; Parquet: the Arrow
type, ``int64``)."""
RAGGED_ROW = "ragged_row"
"""A CSV record whose field count differs from the header's; value = ``expected N fields, got
M``."""
MALFORMED_RECORD = "malformed_record"
"""A record the reader refuses for a reason other than those above: a CSV record the parser
refuses (value = its message; reading goes on at the next line), a JSON record whose other fields
cannot be stored as metadata, a Parquet row with a value Arrow's validation refuses other than
invalid UTF-8 (a ``time32`` of 25 h: value = the column and Arrow's message). The CSV parser is
lenient, as spreadsheet programs are (text after a closing quote, ``"ok" x``, is read into the
field), so this is rare. (A quote never closed would swallow the rest of the
file into one field: that is a ``corrupt_file`` at the record it opens.)"""
CORRUPT_FILE = "corrupt_file"
"""The stream cannot be decoded (not gzip / zstd / Parquet, or damaged midway; a CSV quote never
closed; a ``.json`` file that holds one JSON array instead of JSON Lines): one reject for the rest
of the file, at the line where reading stopped (0 if nothing was read). A Parquet file damaged
midway is read on from its next row group: one reject per row group that cannot be read, its value
naming the rows."""
TRUNCATED_FILE = "truncated_file"
"""A gzip or zstd stream ends early: the records before the cut are kept, one reject at the next
line."""
INVALID_CHAT = "invalid_chat"
"""With ``chat_field``: the field holds no conversation to learn from; value = what is wrong (a
string that is not JSON, not a list of messages, a message without a role or text content, the
last message not the assistant's). An absent or null field is ``missing_text``."""

REJECT_REASONS: tuple[str, ...] = (
    EMPTY_FILE,
    INVALID_UTF8,
    INVALID_JSON,
    NOT_AN_OBJECT,
    MISSING_TEXT,
    NON_STRING_TEXT,
    RAGGED_ROW,
    MALFORMED_RECORD,
    CORRUPT_FILE,
    TRUNCATED_FILE,
    INVALID_CHAT,
)

_MISSING = object()
"""Sentinel: the text field is not in the record."""
_MAX_NAMES = 12
"""Field names listed in a ``missing_text`` reject's value, at most."""
_NULL = "null"
_READ_CHUNK = 1 << 20
_SAMPLE_BYTES = SAMPLE_CHARS * 4
"""Bytes of an offending line decoded for its sample: enough for SAMPLE_CHARS characters without
decoding a whole (possibly huge) line."""


class _Batch:
    """Kept rows and rejects of one file, collected column by column until the next flush."""

    def __init__(self, source_file: str, codec: str | None = None) -> None:
        self.source_file = source_file
        self.codec = codec
        """The UTF-16 or UTF-32 codec the file is transcoded from (None: UTF-8): its invalid
        UTF-8 can only be what did not decode (:class:`_Transcoded`), said so in the reject."""
        self.lines: list[int] = []
        self.texts: list[str] = []
        self.metadata: list[bytes | None] = []
        self.parts: list[int | None] = []
        """Per kept row when a record gives more than one (``chat_answers: every``), else
        empty: the row's part of its record (:func:`~llm_assets.kernels.schema.make_doc_id`)."""
        self.reject_lines: list[int] = []
        self.reasons: list[str] = []
        self.values: list[str | None] = []
        self.samples: list[str | None] = []
        self.nbytes = 0
        """Input bytes of the records collected (counted by the reader, which knows them)."""

    def __len__(self) -> int:
        return len(self.lines) + len(self.reject_lines)

    def keep(self, line: int, text: str, metadata: bytes | None, part: int | None = None) -> None:
        if part is not None and not self.parts:
            self.parts.extend([None] * len(self.lines))
        if part is not None or self.parts:
            self.parts.append(part)
        self.lines.append(line)
        self.texts.append(text)
        self.metadata.append(metadata)

    def reject(self, line: int, reason: str, value: str | None, sample: str | None) -> None:
        if reason == INVALID_UTF8 and self.codec is not None:
            value = (
                f"not valid {self.codec.upper()}: a lone surrogate, or a character cut off at "
                "the end of the file"
            )
        self.reject_lines.append(line)
        self.reasons.append(reason)
        self.values.append(value)
        self.samples.append(sample)

    def full(self, spec: IngestSpec) -> bool:
        """Whether the batch holds ``spec.batch_rows`` records or ``spec.batch_bytes`` bytes."""
        return len(self) >= spec.batch_rows or self.nbytes >= spec.batch_bytes

    def flush(self) -> StageResult:
        """Build the Arrow tables of everything collected and start over (lists are reused)."""
        result = StageResult(
            kept=_kept_table(
                self.source_file,
                self.lines,
                pa.array(self.texts, pa.string()),
                self.metadata,
                self.parts or None,
            ),
            rejects=_rejects(
                self.source_file, self.reject_lines, self.reasons, self.values, self.samples
            ),
        )
        for column in (self.lines, self.texts, self.metadata, self.parts):
            column.clear()
        for column in (self.reject_lines, self.reasons, self.values, self.samples):
            column.clear()
        self.nbytes = 0
        return result


def _kept_table(
    source_file: str,
    lines: list[int],
    texts: pa.Array,
    metadata: list[bytes | None],
    parts: list[int | None] | None = None,
) -> pa.Table:
    """Documents with :data:`DOCUMENT_SCHEMA`; metadata is compact JSON (UTF-8 bytes) or None;
    ``parts`` (one per line) tell the rows of one record apart in their ids."""
    ids = (
        [make_doc_id(source_file, line) for line in lines]
        if parts is None
        else [make_doc_id(source_file, line, part) for line, part in zip(lines, parts, strict=True)]
    )
    return pa.Table.from_arrays(
        [
            pa.array(ids, pa.string()),
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


def _absent(kind: str, text_field: str, names: Iterable[str]) -> str:
    """The value of a ``missing_text`` reject whose field is absent: what was looked for, and the
    record's (file's) field names, the first :data:`_MAX_NAMES` of them."""
    names = list(names)
    shown = ", ".join(repr(name)[1:-1][:40] for name in names[:_MAX_NAMES])
    more = f", ... ({len(names)} in all)" if len(names) > _MAX_NAMES else ""
    return f"no {kind} {text_field!r} ({kind}s: {shown or 'none'}{more})"


def _text_problem(value: Any, text_field: str, record: dict[str, Any]) -> tuple[str, str]:
    """Reason and value of a reject for a text field that is not a string (``record``: the
    JSON object without it)."""
    if value is _MISSING:
        return MISSING_TEXT, _absent("field", text_field, record)
    if value is None:
        return MISSING_TEXT, _NULL
    return NON_STRING_TEXT, type(value).__name__


def _sample(raw: bytes) -> str:
    """The readable start of an offending line (invalid bytes replaced, line ending removed)."""
    return raw[:_SAMPLE_BYTES].decode("utf-8", "replace").rstrip("\r\n")


def _stopped_at(lineno: int) -> int:
    """Source line of a ``corrupt_file`` reject: the line reading stopped at, 0 if none was read."""
    return lineno + 1 if lineno else 0


def _metadata_keys(names: list[str]) -> list[str]:
    """The metadata key of each column: its name, or ``name#2``, ``name#3``... for a name that
    repeats an earlier column's, so that no value is lost to a key collision. A suffix is never
    another column's name nor a key already given (``m,m,m#2`` -> ``m``, ``m#3``, ``m#2``).
    (The first column named like the text field is the text; a second one goes to metadata as
    ``text#2``.)"""
    taken = set(names)
    next_suffix: dict[str, int] = {}  # name -> the suffix to try next (absent: not seen yet)
    keys = []
    for name in names:
        suffix = next_suffix.get(name)
        if suffix is None:
            next_suffix[name] = 2
            keys.append(name)
            continue
        while f"{name}#{suffix}" in taken:
            suffix += 1
        key = f"{name}#{suffix}"
        taken.add(key)
        next_suffix[name] = suffix + 1
        keys.append(key)
    return keys
