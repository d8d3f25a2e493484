"""How input files are read (:class:`IngestSpec`) and :func:`read_documents`, which hands a
file to the reader of its format."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from llm_assets.kernels.ingest.arrow import _read_arrow
from llm_assets.kernels.ingest.chat import ALL_ANSWERS, CHAT_ANSWERS, EVERY_ANSWER
from llm_assets.kernels.ingest.csv import _read_csv
from llm_assets.kernels.ingest.formats import detect_format
from llm_assets.kernels.ingest.jsonl import _jsonl_reader, _read_jsonl_range
from llm_assets.kernels.ingest.parquet import _read_parquet
from llm_assets.kernels.ingest.records import _READ_CHUNK, EMPTY_FILE, _Batch
from llm_assets.kernels.ingest.text import _read_txt
from llm_assets.kernels.schema import StageResult
from llm_assets.storage import open_input

BATCH_BYTES = 32 << 20
"""Input bytes after which a batch is flushed even if it holds fewer than ``batch_rows`` records,
so that a worker's memory is bounded by the batch's bytes, not by rows x document size (8,192
one-MB documents would be 8 GB; a raw_documents worker reading 1,000 of them peaked at 4.1 GB,
and at 0.3 GB with this limit). A batch's bytes are held a few times at its flush (Python
strings, the Arrow table, the Parquet writer's pages), so 32 MiB keeps that near 100-150 MB, while
a batch stays large enough that its fixed costs (building the tables, a Parquet row group) do not
matter.
Ordinary corpora, with documents of a few KiB, reach 8,192 records first."""


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
    csv_delimiter: str = dataclasses.field(
        default=",", metadata={"doc": "Field delimiter of CSV input (one character)"}
    )
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
    numbers in the whole file. For an ``.arrow`` file, ``byte_range`` spans whole record batches
    (:func:`~llm_assets.kernels.ingest.arrow.record_batch_spans`) and ``first_line`` is the
    number of its first row.
    """
    fmt = detect_format(path)
    if fmt == "arrow" and byte_range is not None:
        return _read_arrow(path, source_file, spec, byte_range, first_line)
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
    with open_input(path) as handle:
        handle.seek(start)
        return all(not block.strip() for block in iter(lambda: handle.read(_READ_CHUNK), b""))


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
    "arrow": _read_arrow,
}
