"""Ingest kernel: read one input file into document batches and a record of what was dropped.

Pure (no Dagster, no module state): :func:`read_documents` streams a JSONL (plain, gzip, zstd;
``.jsonl`` or ``.json``), Parquet, CSV or TXT file and yields a
a :class:`StageResult` every ``batch_rows`` records or ``batch_bytes`` bytes of
input. Text files are UTF-8, or UTF-16 or UTF-32 with a byte-order mark (transcoded to UTF-8 as
read: :func:`unicode_encoding`). Bad input never raises: every record read is either kept or
rejected exactly once, with one of the reasons below, so the rows of a run always reconcile. Only
a file that cannot be opened at all (missing, permission denied) raises :class:`OSError`.
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import io
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from itertools import chain
from typing import IO, Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from llm_assets.kernels.schema import (
    CHAT_MESSAGES,
    CHAT_ROLE_NAMES,
    CHAT_TOOL_ANSWER,
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
    ".json",
    ".json.gz",
    ".json.zst",
    ".parquet",
    ".csv",
    ".txt",
)

# --- reject reasons ---------------------------------------------------------------------------
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

EVERY_ANSWER = "every"
"""``chat_answers`` value: one row per assistant answer of a conversation."""
ALL_ANSWERS = "all"
"""``chat_answers`` value: one row per conversation that learns every answer where it stands
(each earlier learned answer marked ``"weight": 1`` in the row's ``messages``)."""
CHAT_ANSWERS = (EVERY_ANSWER, ALL_ANSWERS)
"""The ``chat_answers`` values besides the default (None: the last message)."""

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
_BOM = b"\xef\xbb\xbf"
_READ_CHUNK = 1 << 20
_SAMPLE_BYTES = SAMPLE_CHARS * 4
"""Bytes of an offending line decoded for its sample: enough for SAMPLE_CHARS characters without
decoding a whole (possibly huge) line."""
_MAX_CSV_FIELD = 2**31 - 1
_SAMPLE_LINES = 8
"""Physical lines of a rejected CSV record kept for its sample."""
_ZSTD_MAX_WINDOW = 1 << zstandard.WINDOWLOG_MAX
"""Largest zstd window decoded (2 GiB on 64-bit): the library's default limit, 128 MiB, refuses
valid frames written with ``zstd --long`` (or ``--long=31``) as "too much memory". Memory is
only used as data is decoded into the window, so a small file with a large window stays small."""
_CORRUPT_ERRORS = (zlib.error, zstandard.ZstdError)
"""What a compressed stream raises when its bytes cannot be decoded (EOFError means truncated)."""


class UnsupportedFileError(ValueError):
    """The file's suffix is not one of :data:`SUPPORTED_SUFFIXES`."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"{path}: unsupported file type; supported suffixes: {', '.join(SUPPORTED_SUFFIXES)}"
            " (move the file out of the input folder, or give it a name starting with '_' or '.'"
            ", which no run reads)"
        )
        self.path = path


BATCH_BYTES = 32 << 20
"""Input bytes after which a batch is flushed even if it holds fewer than ``batch_rows`` records,
so that a worker's memory is bounded by the batch's bytes, not by rows x document size (8,192
one-MB documents would be 8 GB; a raw_documents worker reading 1,000 of them peaked at 4.1 GB,
and at 0.3 GB with this limit). A batch's bytes are held a few times at its flush (Python
strings, the Arrow table, the Parquet writer's pages), so 32 MiB keeps that near 100-150 MB, while
a batch stays large enough that its fixed costs (building the tables, a Parquet row group) do not
matter.
Ordinary corpora, with documents of a few KiB, reach 8,192 records first and batch as before."""


@dataclass(frozen=True)
class IngestSpec:
    """How to read input files. Small, frozen and picklable: it is shipped to worker processes."""

    text_field: str = dataclasses.field(
        default="text", metadata={"doc": "Field or column that holds the text"}
    )
    """Name of the JSON field / CSV or Parquet column that holds the document text."""
    batch_rows: int = 8192
    """Records (kept + rejected) per yielded StageResult, at most (a conversation read with
    ``chat_answers: every`` is one record of one or more kept rows)."""
    batch_bytes: int = BATCH_BYTES
    """Input bytes per yielded StageResult: a batch is flushed at the record that reaches them
    (JSONL: line bytes, CSV: field characters, TXT: paragraph bytes; Parquet: the rows per batch
    that the file's row group sizes give). Depends on the input only: output is deterministic."""
    csv_delimiter: str = ","
    chat_field: str | None = dataclasses.field(
        default=None,
        metadata={
            "doc": "Chat SFT: the field or column holding a conversation (a list of {role, "
            "content} messages, or ShareGPT's {from, value}; tool calls and results read too) "
            "instead of text_field: an assistant's message is the text (learned, see "
            "chat_answers); the messages before it are the prompt, rendered by "
            "tokenized_documents' chat_template"
        },
    )
    """Chat rows: the field (column) holding a conversation, a list of ``{"role", "content"}``
    messages (or ShareGPT's ``{"from", "value"}``, roles ``human``/``gpt``; a JSON string of
    such a list, as in a CSV cell, is read too). Replaces ``text_field``: the last message,
    which must be the assistant's, is the text (the response, learned), and the messages before
    it go to the metadata as ``messages`` (:data:`~llm_assets.kernels.schema.CHAT_MESSAGES`), which
    ``tokenized_documents``' ``chat_template`` renders into the prompt (see :func:`chat_turns`)."""
    chat_answers: str | None = dataclasses.field(
        default=None,
        metadata={
            "doc": "With chat_field: 'last' learns each conversation's last message (one row per "
            "conversation); 'every' gives one row per assistant message (not empty, not of "
            "weight 0), each with the whole conversation before it as its prompt; 'all' gives "
            "one row per conversation that learns those messages where they stand (the loss "
            "masks the other turns)"
        },
    )
    """Which answers of a conversation are learned: None (``last``), the last message, one row
    per conversation; ``every``: one row per assistant message, each with the conversation
    before it (:func:`chat_answers`); ``all``: one row per conversation, up to its last answer,
    learning every answer in place (:func:`_chat_documents`)."""

    @property
    def field(self) -> str:
        """The field (column) each record's document is read from."""
        return self.text_field if self.chat_field is None else self.chat_field

    def __post_init__(self) -> None:
        if self.batch_rows < 1:
            raise ValueError(f"batch_rows must be at least 1, got {self.batch_rows}")
        if self.batch_bytes < 1:
            raise ValueError(f"batch_bytes must be at least 1, got {self.batch_bytes}")
        if self.chat_field is not None and not self.chat_field:
            raise ValueError("chat_field must name a field, got an empty string")
        if self.chat_answers is not None and self.chat_answers not in CHAT_ANSWERS:
            raise ValueError(
                f"chat_answers must be 'last', {EVERY_ANSWER!r} or {ALL_ANSWERS!r}, got "
                f"{self.chat_answers!r}"
            )
        if self.chat_answers is not None and self.chat_field is None:
            raise ValueError(
                "chat_answers applies to conversations: set chat_field to the field that holds them"
            )
        # The csv module checks its delimiter only when a file is opened, in a worker, after
        # other shards' work: check it when the spec is made, at the run's first step.
        delimiter = self.csv_delimiter
        if len(delimiter) != 1:
            raise ValueError(f"csv_delimiter must be one character, got {delimiter!r}")
        if delimiter in '\r\n"':
            raise ValueError(
                f"csv_delimiter cannot be a line break or the quote character, got {delimiter!r}"
            )


def detect_format(path: str) -> str:
    """Return the format named by ``path``'s suffix, case-insensitive: ``jsonl``, ``jsonl.gz``,
    ``jsonl.zst``, ``json``, ``json.gz``, ``json.zst`` (JSON Lines too, as Hugging Face's
    ``Dataset.to_json`` writes them by default), ``parquet``, ``csv`` or ``txt``.

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
    row_groups: tuple[int, int] | None = None,
) -> Iterator[StageResult]:
    """Stream the documents of the file at ``path``, recorded under the name ``source_file``.

    Yields one StageResult per ``spec.batch_rows`` records or ``spec.batch_bytes`` bytes of
    input, whichever comes first, in file order (the last may be smaller). The format is checked
    at once (:class:`UnsupportedFileError`); the file is opened when iteration starts, and an
    :class:`OSError` from opening it propagates.

    ``byte_range`` (plain ``.jsonl`` or ``.json`` JSON Lines only) reads the bytes ``[start,
    end)``, which must begin and end at line boundaries; ``first_line`` is the 1-based number of
    its first line, so locations and ``doc_id`` equal those of a whole-file read. A file with no
    record is one ``empty_file`` reject, given by its first range (which looks at the rest of
    the file only when it found no record itself).

    ``row_groups`` (``.parquet`` only) reads the row groups ``[first, end)``; rows keep their
    numbers in the whole file.
    """
    fmt = detect_format(path)
    if row_groups is not None:
        if fmt != "parquet":
            raise ValueError(f"row_groups only applies to Parquet files, not {path}")
        return _read_parquet(path, source_file, spec, row_groups)
    if byte_range is None:
        return _with_empty_file_reject(_READERS[fmt](path, source_file, spec), source_file)
    if fmt not in ("jsonl", "json"):
        raise ValueError(f"byte_range only applies to plain .jsonl or .json files, not {path}")
    start, end = byte_range
    results = _read_jsonl_range(path, source_file, spec, start, end, first_line)
    if start == 0:
        # The first range speaks for the whole file: empty if the ranges after it are blank too.
        return _with_empty_file_reject(results, source_file, lambda: _blank_from(path, end))
    return results


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
    results: Iterable[StageResult],
    source_file: str,
    rest_is_blank: Callable[[], bool] = lambda: True,
) -> Iterator[StageResult]:
    """Pass ``results`` through; if they held no row at all (and ``rest_is_blank()``: the rest
    of a file read in byte ranges holds no record either), yield one ``empty_file`` reject."""
    emitted = False
    for result in results:
        emitted = True
        yield result
    if not emitted and rest_is_blank():
        batch = _Batch(source_file)
        batch.reject(0, EMPTY_FILE, "no records", None)
        yield batch.flush()


def _blank_from(path: str, start: int) -> bool:
    """Whether the bytes of ``path`` from ``start`` on are all ASCII whitespace."""
    with open(path, "rb") as handle:
        handle.seek(start)
        return all(not block.strip() for block in iter(lambda: handle.read(_READ_CHUNK), b""))


# --- batches ----------------------------------------------------------------------------------
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


# --- chat rows --------------------------------------------------------------------------------
CHAT_ROLES = {"human": "user", "gpt": "assistant"}
"""ShareGPT's role names and the ones chat templates expect."""
_ASSISTANT = "assistant"
_TOOL_MESSAGE_KEYS = ("tool_call_id", "name")
"""Keys of a ``tool`` message templates read besides its content (Mistral's pair a result with
its call by id; others name the tool)."""


class ChatError(ValueError):
    """A chat field that holds no conversation to learn from (an ``invalid_chat`` reject)."""


def chat_turns(value: Any) -> tuple[str, list[dict[str, Any]]]:
    """The text to learn and the conversation before it, from a chat field's value.

    ``value`` is a list of messages, each ``{"role", "content"}`` (OpenAI, Hugging Face) or
    ``{"from", "value"}`` (ShareGPT, whose ``human`` and ``gpt`` become ``user`` and
    ``assistant``), or a JSON string of such a list. A content given as a list of text parts
    (``[{"type": "text", "text": ...}]``) is their texts joined. An assistant's message may call
    tools (``tool_calls``, :func:`_tool_calls`) and a ``tool`` message carries the result (with
    its ``tool_call_id`` or ``name``). The last message must be the assistant's: its text
    (:func:`answer_text`) is the document's text (the response, the tokens the loss covers); the
    messages before it, as ``{"role", "content"}`` objects (with those keys), are the prompt's
    context. Every earlier assistant turn is context too: one row teaches one answer
    (:func:`chat_answers` for one row per answer).

    Raises :class:`ChatError` saying what is wrong.
    """
    value, messages = _conversation(value)
    return _last_answer(value, messages)


def _last_answer(
    value: list[Any], messages: list[dict[str, Any]]
) -> tuple[str, list[dict[str, Any]]]:
    last = messages[-1]
    if isinstance(value[-1], dict) and value[-1].get("weight") == 0:
        raise ChatError(
            f"the last message (message {len(messages)}) has weight 0 (OpenAI's fine-tuning "
            "format: not to be learned): no answer to learn"
        )
    if last["role"] != _ASSISTANT:
        raise ChatError(
            f"the last message (message {len(messages)}) is from {last['role']!r}, not "
            "'assistant': no answer to learn"
        )
    text = answer_text(last)
    if not text.strip():
        raise ChatError(
            f"the last message (message {len(messages)}) is empty or only whitespace: no answer "
            "to learn"
        )
    return text, messages[:-1]


def chat_answers(value: Any) -> list[tuple[int, str, list[dict[str, Any]]]]:
    """Every answer a conversation teaches (``chat_answers: every``): for each assistant message
    not of ``weight: 0`` nor empty (only whitespace, and no tool call), its number (1-based), its
    text (:func:`answer_text`) and the conversation before it, in order. Messages after the last
    answer (a conversation cut off before its next answer) teach nothing. The value is read as
    :func:`chat_turns` reads it.

    Raises :class:`ChatError` saying what is wrong, or that no message is an answer to learn.
    """
    value, messages = _conversation(value)
    return _answers(value, messages)


def _answers(
    value: list[Any], messages: list[dict[str, Any]]
) -> list[tuple[int, str, list[dict[str, Any]]]]:
    answers = [
        (number, answer_text(message), messages[: number - 1])
        for number, message in enumerate(messages, 1)
        if message["role"] == _ASSISTANT
        and answer_text(message).strip()
        and not (isinstance(value[number - 1], dict) and value[number - 1].get("weight") == 0)
    ]
    if not answers:
        raise ChatError(
            f"no message of the {len(messages)} is an assistant's answer to learn (not empty, of "
            "weight other than 0)"
        )
    return answers


def answer_text(message: dict[str, Any]) -> str:
    """An assistant message's text as a row's text: its content, then each tool call it makes
    as a line of JSON (``{"name": ..., "arguments": {...}}``), so that filters, dedup and people
    reading the warehouse see what it does (the template writes the calls its own way)."""
    calls = message.get("tool_calls")
    if not calls:
        return message["content"]
    lines = [message["content"]] if (message["content"] or "").strip() else []
    lines += [
        orjson.dumps(
            {"name": call["function"]["name"], "arguments": call["function"]["arguments"]}
        ).decode()
        for call in calls
    ]
    return "\n".join(lines)


def _parsed(value: Any, problem: str) -> Any:
    """``value``, or the JSON a string holds (a CSV cell, a string column); :class:`ChatError`
    saying ``problem`` for a string that is not JSON."""
    if not isinstance(value, str):
        return value
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError as error:
        raise ChatError(f"{problem}: {error}") from None


def _conversation(value: Any) -> tuple[list[Any], list[dict[str, Any]]]:
    """A chat field's list of messages (parsed from a JSON string) and each one read
    (:func:`_chat_message`); :class:`ChatError` if it is not a non-empty list of readable
    messages."""
    value = _parsed(value, "a string that is not a JSON list of messages")
    if not isinstance(value, list):
        raise ChatError(f"not a list of messages but {_kind(value)}")
    if not value:
        raise ChatError("an empty list of messages")
    return value, [_chat_message(number, message) for number, message in enumerate(value, 1)]


def _chat_message(number: int, message: Any) -> dict[str, Any]:
    """One message as templates read it: ``{"role", "content"}`` (a text), with an assistant's
    ``tool_calls`` (:func:`_tool_calls`; its content may then be null: empty) and a tool
    result's ``tool_call_id`` and ``name``; :class:`ChatError` naming the message otherwise."""
    if not isinstance(message, dict):
        what = (
            "list (in Parquet: a map column's key-value pairs)"
            if isinstance(message, list)
            else _kind(message)
        )
        raise ChatError(
            f"message {number} is not an object but {what}: messages are objects (JSON) or "
            "structs (Parquet) with a role and a content"
        )
    role = _message_field(message, "role", "from")
    content = _message_field(message, "content", "value")
    if content is _MISSING and _holds_calls(message.get("tool_calls")):
        content = None  # a call without a content (Hugging Face's examples write none)
    if role is _MISSING or content is _MISSING:
        keys = ", ".join(sorted(map(str, message))[:_MAX_NAMES]) or "none"
        raise ChatError(
            f"message {number} has no 'role' and 'content' (nor ShareGPT's 'from' and "
            f"'value'); its keys: {keys}"
        )
    if not isinstance(role, str):
        raise ChatError(f"message {number}'s role is not a string but {_kind(role)}")
    role = role.lower()  # "User" is the user
    role = CHAT_ROLES.get(role, role)
    if role not in CHAT_ROLE_NAMES:
        raise ChatError(
            f"message {number}'s role {role[:40]!r} is not one of {', '.join(CHAT_ROLE_NAMES)} "
            "(nor ShareGPT's human, gpt)"
        )
    weight = message.get("weight")
    if weight is not None and (
        isinstance(weight, bool) or not isinstance(weight, int | float) or weight not in (0, 1)
    ):
        raise ChatError(
            f"message {number} ({role}) has weight {_json_text(weight)[:40]}: a weight is 0 (not "
            "learned) or 1 (learned), as in OpenAI's fine-tuning format"
        )
    if weight == 1 and role != _ASSISTANT:
        raise ChatError(
            f"message {number} ({role}) has weight 1: only assistant messages are learned"
        )
    if _holds_calls(message.get("function_call")):
        raise ChatError(
            f"message {number} ({role}) has function_call, OpenAI's deprecated form of a call: "
            'write it as tool_calls ([{"type": "function", "function": {"name", '
            "\"arguments\"}}]), and the function's result as a message of role 'tool'"
        )
    calls = _tool_calls(number, role, message.get("tool_calls"))
    if calls and content is None:
        # OpenAI's calls have a null content: kept, as templates tell calls by it (DeepSeek's)
        return {"role": role, "content": None, "tool_calls": calls}
    if (
        isinstance(content, list)
        and content
        and all(
            isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
            for part in content
        )
    ):
        content = "".join(part["text"] for part in content)
    if not isinstance(content, str):
        what = "text parts only" if isinstance(content, list) and content else "a string"
        raise ChatError(
            f"message {number} ({role}) has a content of {_kind(content)}, not {what}: only "
            "text conversations are read"
        )
    read: dict[str, Any] = {"role": role, "content": content}
    if calls:
        read["tool_calls"] = calls
    if role == "tool":
        read.update(
            (key, message[key])
            for key in _TOOL_MESSAGE_KEYS
            if isinstance(message.get(key), str) and message[key]
        )
    return read


def _json_text(value: Any) -> str:
    """``value`` as JSON writes it (``"0"``, ``true``): a reject shows it as the file has it."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return repr(value)


def _tool_calls(number: int, role: str, value: Any) -> list[dict[str, Any]] | None:
    """A message's tool calls as chat templates read them, each ``{"type": "function",
    "function": {"name", "arguments"}}`` (with its ``id`` when given), the arguments an object:
    OpenAI's are a JSON string of one, which a template would write as a string. A call may
    also be ``{"name", "arguments"}`` alone. None when the message calls nothing (null, empty,
    Parquet's struct of nulls); :class:`ChatError` for calls that cannot be read, or calls made
    by a message that is not the assistant's."""
    if not _holds_calls(value):
        return None
    where = f"message {number} ({role})"
    if role != _ASSISTANT:
        raise ChatError(f"{where} has tool_calls: only the assistant's messages call tools")
    value = _parsed(value, f"{where} has tool_calls that are not JSON")
    if not isinstance(value, list):
        raise ChatError(f"{where} has tool_calls of {_kind(value)}, not a list of calls")
    calls = []
    for index, call in enumerate(value, 1):
        function = call.get("function") if isinstance(call, dict) else None
        function = function if isinstance(function, dict) else call
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name.strip():
            raise ChatError(f"{where}'s tool call {index} has no function name")
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = orjson.loads(arguments) if arguments.strip() else {}
            except orjson.JSONDecodeError as error:
                raise ChatError(
                    f"{where}'s tool call {index} ({name[:40]}) has arguments that are not "
                    f"JSON: {error}"
                ) from None
        arguments = {} if arguments is None else arguments
        if not isinstance(arguments, dict):
            raise ChatError(
                f"{where}'s tool call {index} ({name[:40]}) has arguments of "
                f"{_kind(arguments)}, not an object"
            )
        kind = call.get("type") if isinstance(call.get("type"), str) else None
        read: dict[str, Any] = {
            "type": kind or "function",
            "function": {"name": name, "arguments": arguments},
        }
        if isinstance(call.get("id"), str) and call["id"]:
            read["id"] = call["id"]
        calls.append(read)
    return calls


def _holds_calls(value: Any) -> bool:
    """Whether a ``tool_calls`` / ``function_call`` value holds a call: not null, empty, a struct
    of nulls (Parquet gives every row every field) or a JSON string of one of those."""
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return bool(value.strip())
    if isinstance(value, dict):
        return any(_holds_calls(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_calls(item) for item in value)
    return value is not None and value != ""


def _message_field(message: dict[str, Any], key: str, alias: str) -> Any:
    """``message[key]``, else ``message[alias]`` (ShareGPT's name): the first that is not null,
    so rows of a data set that concatenated both formats (the other pair null) are read. None if
    both are null, :data:`_MISSING` if neither is there."""
    for name in (key, alias):
        value = message.get(name)
        if value is not None:
            return value
    return None if key in message or alias in message else _MISSING


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _chat_documents(
    value: Any, others: dict[str, Any], chat_field: str, answers: str | None
) -> list[tuple[str, bytes, int | None]]:
    """A chat record's rows: (text, metadata, part) per row, the metadata its other fields
    (``others``) plus the conversation before the row's answer under
    :data:`~llm_assets.kernels.schema.CHAT_MESSAGES`. ``answers`` is the ``chat_answers`` mode:
    None, the last message (:func:`chat_turns`); ``every``, a row per answer
    (:func:`chat_answers`); ``all``, one row whose answer is the conversation's last one to
    learn and whose earlier assistant messages carry ``"weight"``: 1 when they are answers to
    learn too (:func:`chat_answers`), else 0 (context, as OpenAI's fine-tuning format marks
    them). ``part`` is None for the conversation's last message and for ``all``'s row (the id a
    record always had), else the answer's message number (its own id). :class:`ChatError` if the
    value holds no conversation or another field already has that name; ``orjson`` errors pass
    through."""
    value, messages = _conversation(value)
    if answers is None:
        text, history = _last_answer(value, messages)
        learned = [(len(messages), text, history)]
    else:
        learned = _answers(value, messages)
    for name in (CHAT_MESSAGES, CHAT_TOOL_ANSWER):
        if chat_field != name and name in others:
            raise ChatError(
                f"the record has a field {name!r} beside the chat field {chat_field!r}: the "
                f"conversation is stored as {name!r}, which would hide it"
            )
    if TOOLS in others:
        others[TOOLS] = _tools(others[TOOLS])
    if answers == ALL_ANSWERS:
        numbers = {number for number, _, _ in learned}
        number, text, history = learned[-1]
        history = [
            {**message, "weight": int(n in numbers)} if message["role"] == _ASSISTANT else message
            for n, message in enumerate(history, 1)
        ]
        return [(text, _chat_metadata(others, history, messages[number - 1]), None)]
    last = len(value) if answers == EVERY_ANSWER else None
    return [
        (text, _chat_metadata(others, history, messages[number - 1]), part)
        for number, text, history in learned
        for part in [None if last is None or number == last else number]
    ]


TOOLS = "tools"
"""The field of a chat record holding the tools (function definitions) its template writes."""


def _tools(value: Any) -> list[Any] | None:
    """A chat record's ``tools``: a list of definitions, read from JSON text too (a CSV cell, a
    string column); null or empty text is none. :class:`ChatError` for anything else."""
    if isinstance(value, str) and not value.strip():
        return None
    value = _parsed(value, "the record's tools are text that is not JSON")
    if value is not None and not isinstance(value, list):
        raise ChatError(f"the record's tools are {_kind(value)}, not a list of tools")
    return value


def _chat_metadata(
    others: dict[str, Any], history: list[dict[str, Any]], answer: dict[str, Any]
) -> bytes:
    """A chat row's metadata: the record's other fields, the conversation before the answer
    and, when the answer calls tools, the answer as the template renders it."""
    fields = {**others, CHAT_MESSAGES: history}
    if calls := answer.get("tool_calls"):
        fields[CHAT_TOOL_ANSWER] = {"content": answer["content"], "tool_calls": calls}
    return orjson.dumps(fields)


def _keep_chat(
    batch: _Batch,
    line: int,
    value: Any,
    others: dict[str, Any],
    spec: IngestSpec,
    sample: Callable[[], str],
) -> None:
    """Keep a chat record's rows, or reject it (``invalid_chat``; ``malformed_record`` for other
    fields that cannot be stored as metadata)."""
    try:
        rows = _chat_documents(value, others, spec.chat_field or "", spec.chat_answers)
    except ChatError as error:
        batch.reject(line, INVALID_CHAT, str(error), sample())
    except orjson.JSONEncodeError as error:
        value = f"its other fields cannot be stored as metadata: {error}"
        batch.reject(line, MALFORMED_RECORD, value, sample())
    else:
        for text, metadata, part in rows:
            batch.keep(line, text, metadata, part)


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
class _DecodedStream(io.RawIOBase):
    """A raw stream of data decoded piece by piece from a compressed source: a subclass gives
    :meth:`_next_piece`. An error met while decoding is kept in ``_error`` and raised only once
    the data decoded before it has been read, so the records before damage are kept."""

    def __init__(self) -> None:
        super().__init__()
        self._pending = memoryview(b"")
        self._error: Exception | None = None

    def readable(self) -> bool:
        return True

    def _next_piece(self) -> bytes | None:
        """The next decoded bytes (maybe none yet), or None at the end of the source."""
        raise NotImplementedError

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            if self._error is not None:
                raise self._error
            piece = self._next_piece()
            if piece is None:
                return 0
            self._pending = memoryview(piece)
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


class _ZstdFrames(_DecodedStream):
    """Decompress concatenated zstd frames; raise EOFError if the source ends inside a frame.

    zstandard's ``stream_reader`` returns the data of a cut-off stream without any error, so each
    frame gets its own ``decompressobj``, whose ``eof`` says whether the frame was complete.
    """

    def __init__(self, source: IO[bytes]) -> None:
        super().__init__()
        self._source = source
        self._decompressor = zstandard.ZstdDecompressor(max_window_size=_ZSTD_MAX_WINDOW)
        self._frame = self._decompressor.decompressobj()
        self._in_frame = False

    def _next_piece(self) -> bytes | None:
        compressed = self._source.read(_READ_CHUNK)
        if not compressed:
            if self._in_frame:
                raise EOFError("zstd stream ended before the end of its last frame")
            return None
        return self._decompress(compressed)

    def _decompress(self, compressed: bytes) -> bytes:
        """The data of the frames in ``compressed``. Bytes that are not a frame (junk after the
        last one, a damaged frame) raise, but only once the data decoded before them has been
        read: the records before the damage are kept."""
        chunks = []
        try:
            while compressed:
                chunks.append(self._frame.decompress(compressed))
                self._in_frame = not self._frame.eof
                if self._in_frame:
                    break
                compressed = self._frame.unused_data
                self._frame = self._decompressor.decompressobj()
        except zstandard.ZstdError as error:
            self._error = error
        return b"".join(chunks)


_GZIP_PIECE = 64 << 10
"""Decompressed bytes asked of zlib at a time (bounds what one compressed chunk expands to)."""
_GZIP_FEED_FIRST = 1 << 10
_GZIP_FEED_MAX = 32 << 10
"""Compressed bytes handed to zlib in one call: ``_GZIP_FEED_FIRST`` in a member's first call,
twice as many in each next one, up to ``_GZIP_FEED_MAX``. zlib gives back what it leaves of the
bytes it was handed (at the end of a member, or when a piece is full) as a copy: handed the
whole input buffer, each of 100,000 one-line members copied up to 1 MiB, and each piece of a
big member most of it."""
_GZIP_ZERO_RUN = 4 << 10
"""Bytes of zero padding between members skipped per step (each step copies them once)."""
_GZIP_FLAGS = {"FHCRC": 2, "FEXTRA": 4, "FNAME": 8, "FCOMMENT": 16}


def _gzip_header_length(data: bytes, start: int = 0) -> int | None:
    """Length of the gzip member header (RFC 1952) at offset ``start`` of ``data``, or None when
    ``data`` ends too soon to tell. Raises :class:`zlib.error` if it is not a gzip header. An
    offset rather than a slice, so that finding a member in the input buffer copies nothing."""
    if len(data) < start + 10:
        return None
    if data[start : start + 2] != b"\x1f\x8b":
        raise zlib.error(f"not a gzip member (starts with {bytes(data[start : start + 2])!r})")
    if data[start + 2] != 8:
        raise zlib.error(f"unknown gzip compression method {data[start + 2]}")
    flags, pos = data[start + 3], start + 10
    if flags & _GZIP_FLAGS["FEXTRA"]:
        if len(data) < pos + 2:
            return None
        pos += 2 + int.from_bytes(data[pos : pos + 2], "little")
    for flag in ("FNAME", "FCOMMENT"):
        if flags & _GZIP_FLAGS[flag]:
            end = data.find(b"\0", pos)
            if end < 0:
                return None
            pos = end + 1
    if flags & _GZIP_FLAGS["FHCRC"]:
        pos += 2
    return pos - start if len(data) >= pos else None


class _GzipMembers(_DecodedStream):
    """Decompress concatenated gzip members (as :class:`gzip.GzipFile` does, zero padding between
    them allowed), counting the lines decoded from each one.

    The header and the trailer (CRC-32 and length) are read here and the deflate data by zlib
    raw, so that every byte decoded is handed out before the trailer is checked (zlib's own gzip
    mode drops the output of the call that finds a bad trailer: up to a piece of intact records
    lost without a reject). zlib also drops the output of a call that finds damage inside the
    deflate data: the state before each call is kept, and on damage the data decoded before it
    is recovered from that state (:meth:`_salvage`) and handed out before the error. gzip checks
    a member only at its end, so the records of a member damaged midway have been parsed (some
    garbled, some lost) by the time the damage is found; the error then names the member and the
    lines decoded from it, so that its ``corrupt_file`` reject says which records before it may
    be damaged. A source that ends inside a member raises EOFError.

    The input buffer is walked with an offset (``_pos``) and handed to zlib through a
    memoryview, so that a member, however small, copies none of it.
    """

    def __init__(self, source: IO[bytes]) -> None:
        super().__init__()
        self._source = source
        self._state = "between"  # then "header", "body", "trailer", and "between" again
        self._member = zlib.decompressobj(-zlib.MAX_WBITS)
        self._fresh = True  # no call made to _member yet: its state needs no copy to be replayed
        self._feed = _GZIP_FEED_FIRST
        self._crc = self._size = 0
        self._input = b""
        self._view = memoryview(self._input)
        self._pos = 0  # of the first byte of _input not decoded yet
        self._need_input = True
        self._members = 0
        self._lines_before = 0
        self._member_lines = 0

    def _next_piece(self) -> bytes | None:
        if self._need_input:
            chunk = self._source.read(_READ_CHUNK)
            if not chunk:
                # "between" asks for input only once every byte left was zero padding.
                if self._state != "between":
                    raise EOFError(
                        "Compressed file ended before the end-of-stream marker was reached"
                    )
                return None
            # Only the undecoded rest is copied: in the body of a member there is none, and a
            # header or trailer cut by the end of a chunk leaves a few bytes.
            self._input = self._input[self._pos :] + chunk
            self._view = memoryview(self._input)
            self._pos = 0
        return self._inflate()

    def _inflate(self) -> bytes:
        """The next piece of data decoded from the pending input (``_need_input`` set when more
        is needed first). A damaged member raises on the next read, once the data decoded
        before the damage has been read (as in :class:`_ZstdFrames`)."""
        self._need_input = False
        try:
            if self._state == "between":
                while self._pos < len(self._input) and not self._input[self._pos]:
                    run = self._input[self._pos : self._pos + _GZIP_ZERO_RUN]
                    self._pos += len(run) - len(run.lstrip(b"\0"))
                if self._pos == len(self._input):
                    self._need_input = True
                    return b""
                self._state = "header"
                self._members += 1
                self._member_lines = 0
            if self._state == "header":
                length = _gzip_header_length(self._input, self._pos)
                if length is None:
                    self._need_input = True
                    return b""
                self._pos += length
                self._member = zlib.decompressobj(-zlib.MAX_WBITS)
                self._fresh = True
                self._feed = _GZIP_FEED_FIRST
                self._crc = self._size = 0
                self._state = "body"
            data = b""
            if self._state == "body":
                data = self._decompress()
                if self._error is not None:
                    return data
            if self._state == "trailer":
                if len(self._input) - self._pos < 8:
                    self._need_input = True
                    return data
                crc, size = struct.unpack_from("<II", self._input, self._pos)
                self._pos += 8
                self._state = "between"
                self._lines_before += self._member_lines
                if crc != self._crc:
                    self._error = self._damaged(zlib.error("CRC check failed"), damaged=True)
                elif size != self._size & 0xFFFFFFFF:
                    self._error = self._damaged(
                        zlib.error("incorrect length of data produced"), damaged=True
                    )
            return data
        except zlib.error as error:
            self._error = self._damaged(error)
            return b""

    def _decompress(self) -> bytes:
        """One call to zlib on the deflate data of the current member: a piece of its data, the
        state moved to "trailer" at its end. On damage, the data decoded before it, with
        ``_error`` set."""
        feed = self._view[self._pos : self._pos + self._feed]
        before = None if self._fresh else self._member.copy()
        try:
            data = self._member.decompress(feed, _GZIP_PIECE)
        except zlib.error as error:
            data = self._salvage(before, feed)
            self._member_lines += data.count(b"\n")
            self._error = self._damaged(error)
            return data
        self._fresh = False
        self._feed = min(2 * self._feed, _GZIP_FEED_MAX)
        self._crc = zlib.crc32(data, self._crc)
        self._size += len(data)
        self._member_lines += data.count(b"\n")
        if self._member.eof:
            self._pos += len(feed) - len(self._member.unused_data)
            self._state = "trailer"
        else:
            self._pos += len(feed) - len(self._member.unconsumed_tail)
            # A full piece may leave output inside zlib with no input left: ask again first.
            self._need_input = self._pos == len(self._input) and len(data) < _GZIP_PIECE
        return data

    @staticmethod
    def _salvage(before: Any, feed: memoryview) -> bytes:
        """The data that ``feed``, handed to the decompressor whose state was ``before`` (None:
        a fresh one), decodes before the damage in it: zlib drops all the output of the call
        that finds damage, up to a piece of intact records.

        Replayed from copies of ``before``: the longest prefix of ``feed`` that decodes without
        error is found by bisection, then the byte holding the damage is decoded one output byte
        a call, since it may complete symbols before the damage. This keeps at least what
        :class:`gzip.GzipFile` yields, whose calls stop wherever its 8 KiB buffer is full, in
        the damaged byte too. The output before the damage is at most a piece (the failed call
        asked for no more), and damage is found once per file, so the replay is cheap."""

        def replay() -> Any:
            return zlib.decompressobj(-zlib.MAX_WBITS) if before is None else before.copy()

        good, bad = 0, len(feed)  # feed[:good] decodes (if good), feed[:bad] raises
        while bad - good > 1:
            middle = (good + bad) // 2
            try:
                replay().decompress(feed[:middle])
            except zlib.error:
                bad = middle
            else:
                good = middle
        member, pieces, rest = replay(), [], feed[:bad]
        if good:  # else the damage may lie in bits the last call took in: step from the start
            pieces.append(member.decompress(feed[:good]))
            rest = feed[good:bad]
        try:
            while piece := member.decompress(rest, 1):
                pieces.append(piece)
                rest = member.unconsumed_tail
        except zlib.error:
            pass
        return b"".join(pieces)

    def _damaged(self, error: zlib.error, damaged: bool = False) -> zlib.error:
        """``error``, naming the damaged member and the lines already decoded from it (already
        counted in ``_lines_before`` when the member ended: ``damaged``, a bad trailer)."""
        before = self._lines_before - (self._member_lines if damaged else 0)
        first = before + 1
        if not self._member_lines:
            return zlib.error(f"{error} (gzip member {self._members}, from line {first})")
        last = before + self._member_lines
        return zlib.error(
            f"{error}: gzip member {self._members} is damaged; its records read before this reject"
            f" (lines {first}-{last}, {self._member_lines} lines) may be damaged too: gzip checks"
            " a member only at its end"
        )


def _decompressed(handle: io.BufferedReader, fmt: str) -> io.BufferedReader:
    """The decompressed byte stream of an open ``jsonl*`` or ``json*`` file."""
    if fmt.endswith(".gz"):
        return io.BufferedReader(_GzipMembers(handle), _READ_CHUNK)
    if fmt.endswith(".zst"):
        return io.BufferedReader(_ZstdFrames(handle), _READ_CHUNK)
    return handle


_UNICODE_BOMS: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
"""Byte-order marks of the encodings read besides UTF-8 (UTF-32's first: its little-endian mark
starts with UTF-16's), with the codec that decodes what follows the mark."""


def unicode_encoding(head: bytes) -> tuple[str, int] | None:
    """The codec and the length of the byte-order mark that ``head`` (a file's first bytes)
    starts with, when it is UTF-16 or UTF-32 (a Windows export: PowerShell's ``>`` and
    ``Out-File``, Excel's "Unicode Text"); None for anything else, read as UTF-8."""
    for bom, codec in _UNICODE_BOMS:
        if head.startswith(bom):
            return codec, len(bom)
    return None


def file_encoding(path: str) -> str | None:
    """The codec of a JSON Lines, CSV or TXT file (decompressed) that is UTF-16 or UTF-32
    (:func:`unicode_encoding`), else None: UTF-8, Parquet, or a stream that cannot be read
    (its reader says why)."""
    fmt = detect_format(path)
    if fmt == "parquet":
        return None
    with open(path, "rb") as handle, _decompressed(handle, fmt) as stream:
        try:
            head = stream.read(4)
        except (EOFError, *_CORRUPT_ERRORS):
            return None
    found = unicode_encoding(head)
    return None if found is None else found[0]


class _Transcoded(_DecodedStream):
    """The UTF-8 bytes of a UTF-16 or UTF-32 stream (its byte-order mark already read), so that
    every reader sees UTF-8 lines: line numbers are the file's. Bytes that do not decode (a
    lone surrogate, a cut-off last character) become an invalid UTF-8 byte in their line, so
    that line is an ``invalid_utf8`` reject, as undecodable UTF-8 is."""

    def __init__(self, source: IO[bytes], codec: str) -> None:
        super().__init__()
        self._source = source
        self._decoder = codecs.getincrementaldecoder(codec)(errors=_UNDECODABLE)
        self._done = False

    def _next_piece(self) -> bytes | None:
        if self._done:
            return None
        data = self._source.read(_READ_CHUNK)
        self._done = not data
        text = self._decoder.decode(data, final=self._done)
        return text.encode("utf-8", "surrogateescape")


def _escape_undecodable(error: UnicodeError) -> tuple[str, int]:
    """Error handler of :class:`_Transcoded`: the undecodable bytes become one U+DCFF, which
    ``surrogateescape`` writes as the byte 0xFF, never valid UTF-8."""
    return "\udcff", error.end


_UNDECODABLE = "llm_assets.undecodable"
codecs.register_error(_UNDECODABLE, _escape_undecodable)


def _utf8(stream: io.BufferedReader) -> tuple[io.BufferedReader, str | None]:
    """``stream`` itself, or its UTF-8 transcoding when it starts with a UTF-16 or UTF-32
    byte-order mark (:func:`unicode_encoding`), with that codec (None for UTF-8)."""
    try:
        found = unicode_encoding(stream.peek(4)[:4])
    except (EOFError, *_CORRUPT_ERRORS):
        return stream, None  # the reader says what is wrong with the stream
    if found is None:
        return stream, None
    codec, bom = found
    stream.read(bom)
    return io.BufferedReader(_Transcoded(stream, codec), _READ_CHUNK), codec


_JSON_ARRAY = (
    "a JSON array, not JSON Lines (one object per line): convert it, e.g. "
    "jq -c '.[]' FILE > FILE.jsonl, or datasets' to_json(..., lines=True)"
)


def _jsonl_reader(fmt: str) -> Callable[[str, str, IngestSpec], Iterator[StageResult]]:
    """The reader of a JSON Lines format. A ``json*`` file whose first bytes open an array (a
    file ``json.dump`` wrote) is one ``corrupt_file`` reject saying how to convert it, rather
    than one ``invalid_json`` reject per line of it."""

    def read(path: str, source_file: str, spec: IngestSpec) -> Iterator[StageResult]:
        with (
            open(path, "rb", buffering=_READ_CHUNK) as handle,
            _decompressed(handle, fmt) as decompressed,
        ):
            stream, codec = _utf8(decompressed)
            if not fmt.startswith("jsonl"):
                try:
                    head = stream.peek(_READ_CHUNK).lstrip(b"\xef\xbb\xbf \t\r\n")
                except (EOFError, *_CORRUPT_ERRORS):
                    head = b""  # the reader below says what is wrong with the stream
                if head.startswith(b"["):
                    batch = _Batch(source_file)
                    batch.reject(1, CORRUPT_FILE, _JSON_ARRAY, _sample(head))
                    yield batch.flush()
                    return
            yield from _read_jsonl_stream(stream, source_file, spec, codec=codec)

    return read


def _read_jsonl_stream(
    stream: IO[bytes],
    source_file: str,
    spec: IngestSpec,
    first_line: int = 1,
    *,
    strip_bom: bool = True,
    codec: str | None = None,
) -> Iterator[StageResult]:
    """Parse one JSON object per line (``codec``: transcoded from it, see :class:`_Batch`). The
    hot path: kept rows touch only list appends."""
    batch = _Batch(source_file, codec)
    keep_line, keep_text, keep_metadata = (
        batch.lines.append,
        batch.texts.append,
        batch.metadata.append,
    )
    loads, dumps, decode_error = orjson.loads, orjson.dumps, orjson.JSONDecodeError
    encode_error = orjson.JSONEncodeError
    text_field, batch_rows, missing = spec.field, spec.batch_rows, _MISSING
    chat_field = spec.chat_field
    batch_bytes = spec.batch_bytes
    pending = pending_bytes = 0
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
                    if type(text) is str and chat_field is None:
                        try:
                            metadata = dumps(record) if record else None
                        except encode_error as error:  # e.g. nested deeper than orjson writes
                            batch.reject(
                                lineno,
                                MALFORMED_RECORD,
                                f"its other fields cannot be stored as metadata: {error}",
                                _sample(raw),
                            )
                        else:
                            keep_line(lineno)
                            keep_text(text)
                            keep_metadata(metadata)
                    elif chat_field is not None and text is not missing and text is not None:
                        _keep_chat(batch, lineno, text, record, spec, partial(_sample, raw))
                    else:
                        batch.reject(lineno, *_text_problem(text, text_field, record), _sample(raw))
                else:
                    batch.reject(lineno, NOT_AN_OBJECT, type(record).__name__, _sample(raw))
            pending += 1
            pending_bytes += len(raw)
            if pending == batch_rows or pending_bytes >= batch_bytes:
                yield batch.flush()
                pending = pending_bytes = 0
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
    paragraph: list[bytes] = []
    first_line = 0
    with open(path, "rb", buffering=_READ_CHUNK) as handle:
        stream, codec = _utf8(handle)
        batch = _Batch(source_file, codec)
        for lineno, raw in enumerate(_lines(stream), 1):
            if raw.strip():
                if not paragraph:
                    first_line = lineno
                paragraph.append(_chomp(raw))
                batch.nbytes += len(raw)
                continue
            if paragraph:
                _add_paragraph(batch, first_line, paragraph, spec)
                paragraph = []
                if batch.full(spec):
                    yield batch.flush()
    if paragraph:
        _add_paragraph(batch, first_line, paragraph, spec)
    if len(batch):
        yield batch.flush()


def _chomp(raw: bytes) -> bytes:
    """``raw`` without its line ending (``\\n`` or ``\\r\\n``)."""
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    return raw


def _add_paragraph(batch: _Batch, first_line: int, lines: list[bytes], spec: IngestSpec) -> None:
    """Keep a paragraph (with ``chat_field``: read as a JSON list of messages)."""
    joined = b"\n".join(lines)
    try:
        text = joined.decode("utf-8")
    except UnicodeDecodeError as error:
        batch.reject(first_line, INVALID_UTF8, str(error), _sample(joined))
        return
    if spec.chat_field is None:
        batch.keep(first_line, text, None)
    else:
        _keep_chat(batch, first_line, text, {}, spec, partial(_sample, joined))


# --- CSV --------------------------------------------------------------------------------------
def _read_csv(path: str, source_file: str, spec: IngestSpec) -> Iterator[StageResult]:
    """One document per record after the header; other columns go to metadata.

    Bytes are decoded with ``surrogateescape`` so that one record's invalid UTF-8 rejects only
    that record. The csv module's field size limit (process-wide, 128 KiB by default) is raised
    so that long documents are read instead of failing the file. The parser is lenient (text
    after a closing quote is read into the field, as spreadsheet programs do), but a quote that
    is never closed, which makes the parser read to the end of the file for one field (the
    records after it silently gone), is a ``corrupt_file`` reject at the record where it opens.
    A record the parser refuses is a ``malformed_record`` reject.
    """
    csv.field_size_limit(max(csv.field_size_limit(), _MAX_CSV_FIELD))
    with open(path, "rb", buffering=_READ_CHUNK) as binary:
        stream, codec = _utf8(binary)
        batch = _Batch(source_file, codec)
        handle = io.TextIOWrapper(
            stream, encoding="utf-8-sig", errors="surrogateescape", newline=""
        )
        lines = _RecordLines(handle)
        rows = csv.reader(lines, delimiter=spec.csv_delimiter)
        try:
            header = [_repair(name) for name in _csv_header(rows, lines)]
        except csv.Error as error:
            batch.reject(0, CORRUPT_FILE, f"unreadable header: {error}", _repair(lines.record()))
            yield batch.flush()
            return
        if header and lines.exhausted:
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
                batch.reject(record, MALFORMED_RECORD, str(error), _repair(lines.record()))
            else:
                if not row:  # a blank line
                    continue
                record += 1
                if lines.exhausted:
                    # The parser asks for a line past the end only inside a quoted field: this
                    # record's quote is never closed and it holds the rest of the file.
                    value = "a quoted field is never closed: the rest of the file is unreadable"
                    batch.reject(record, CORRUPT_FILE, value, _repair(lines.record()))
                    break
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


# --- Parquet ----------------------------------------------------------------------------------
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
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
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
            # with the file (see llm_assets.tasks.row_group_batches).
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


_READERS: dict[str, Callable[[str, str, IngestSpec], Iterator[StageResult]]] = {
    "jsonl": _jsonl_reader("jsonl"),
    "jsonl.gz": _jsonl_reader("jsonl.gz"),
    "jsonl.zst": _jsonl_reader("jsonl.zst"),
    "json": _jsonl_reader("json"),
    "json.gz": _jsonl_reader("json.gz"),
    "json.zst": _jsonl_reader("json.zst"),
    "parquet": _read_parquet,
    "csv": _read_csv,
    "txt": _read_txt,
}
