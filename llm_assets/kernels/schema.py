"""Column names and Arrow schemas shared by every kernel.

Every stage passes documents as Arrow tables with the document columns below, and returns the rows
it drops as a rejects table with :data:`REJECT_SCHEMA`. Keeping both in one module is what lets
the warehouse build one SQL view per asset and one per asset's rejects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# --- document columns -------------------------------------------------------------------------
DOC_ID = "doc_id"
"""Stable id: 16 hex chars of SHA-256 over ``source_file`` NUL ``source_line`` (make_doc_id)."""
SOURCE_FILE = "source_file"
"""Path of the input file relative to the input folder, with ``/`` separators."""
SOURCE_LINE = "source_line"
"""1-based line number (JSONL, TXT: the paragraph's first line) or record number (CSV, Parquet).
0 for a reject that concerns a whole file (an empty or unreadable file)."""
TEXT = "text"
METADATA = "metadata"
"""The input record's other fields as a JSON object string, or null when there are none."""
INPUT_IDS = "input_ids"
N_TOKENS = "n_tokens"
PROMPT_TOKENS = "prompt_tokens"
"""SFT rows: how many leading ``input_ids`` are the prompt (masked out of the loss)."""
LEARNED_SPANS = "learned_spans"
"""Chat SFT rows: the ``[start, end)`` ranges of ``input_ids`` the loss covers, in order: each
answer learned with the template's end of its turn. One range, ``[prompt_tokens, n_tokens)``,
unless ``raw_documents``' ``chat_answers: all`` made the row learn earlier answers too (those lie
inside the prompt, whose other tokens stay masked). The batches add EOS after the last one."""
LEARNED_SPANS_TYPE = pa.list_(
    pa.struct([pa.field("start", pa.int32(), False), pa.field("end", pa.int32(), False)])
)
PROMPT = "prompt"
"""SFT rows: the prompt rendered from the record's fields, as tokenized (what the model is asked;
with the text, what makes two SFT rows duplicates)."""
CHAT_MESSAGES = "messages"
"""Chat rows (``raw_documents``' ``chat_field``): the metadata key that holds the conversation
before the last assistant turn (the text), a list of ``{"role", "content"}`` objects, from which
``tokenized_documents``' ``chat_template`` renders the prompt."""
CHAT_TOOL_ANSWER = "tool_call_answer"
"""Chat rows whose answer calls tools: the metadata key holding that answer as the template
renders it, ``{"content", "tool_calls"}`` (the row's text is its content and its calls written
as lines of JSON, for filters, dedup and people)."""
CHAT_ROLE_NAMES = ("system", "developer", "user", "assistant", "tool", "function", "ipython")
"""The roles a chat message may have: those of OpenAI's, Hugging Face's and Llama's chat formats.
Templates write the role into the prompt, some as markup (Phi-3's ``<|{role}|>``): a role of a
data set's own could make a control token, or a prompt the model was never trained on."""
LABEL = "label"
"""Optional class label (e.g. a review's sentiment) passed through to the batches."""
LANGUAGE = "language"
"""ISO 639 code found by the language filter (:mod:`llm_assets.kernels.filters.language`)."""

DOCUMENT_SCHEMA = pa.schema(
    [
        pa.field(DOC_ID, pa.string(), nullable=False),
        pa.field(SOURCE_FILE, pa.string(), nullable=False),
        pa.field(SOURCE_LINE, pa.int64(), nullable=False),
        pa.field(TEXT, pa.string(), nullable=False),
        pa.field(METADATA, pa.string()),
    ]
)
"""Schema of ``raw_documents`` and ``normalized_documents``. Later stages append columns."""

# --- rejects ----------------------------------------------------------------------------------
STAGE = "stage"
REASON = "reason"
CATEGORICAL_COLUMNS = frozenset({SOURCE_FILE, LABEL, LANGUAGE, STAGE, REASON})
"""Columns with few distinct values: the only ones worth Parquet dictionary encoding (trying it
on unique text and token ids costs a third of the write time and saves nothing)."""
CONTENT_COLUMNS = frozenset({TEXT, METADATA, PROMPT})
"""Columns whose values can be megabytes each: written without Parquet min/max statistics, which
nothing reads for them and which copy every value a page holds several times while it is
written (one 60 MB text: +330 MB of memory with statistics, +74 MB without)."""
VALUE = "value"
SAMPLE = "sample"
SAMPLE_CHARS = 200
"""Rejects keep at most this many characters of the offending text or line, for people to read."""

REJECT_SCHEMA = pa.schema(
    [
        pa.field(DOC_ID, pa.string(), nullable=False),
        pa.field(SOURCE_FILE, pa.string(), nullable=False),
        pa.field(SOURCE_LINE, pa.int64(), nullable=False),
        pa.field(STAGE, pa.string(), nullable=False),
        pa.field(REASON, pa.string(), nullable=False),
        pa.field(VALUE, pa.string()),
        pa.field(SAMPLE, pa.string()),
    ]
)
"""Every dropped row, whatever the stage: where it came from, why, and the measured value."""


def make_doc_id(source_file: str, source_line: int, part: int | None = None) -> str:
    """Return the stable id of the record at ``source_file``:``source_line``.

    Derived from the location, not the content, so two identical texts in different places keep
    different ids (dedup decides which one survives) and re-ingesting a file gives the same ids.
    ``part`` tells apart the rows one record gives (a conversation's earlier answers, with
    ``chat_answers: every``: their message numbers); None is the record's own id.
    """
    where = f"{source_file}\0{source_line}" + ("" if part is None else f"\0{part}")
    return hashlib.sha256(where.encode()).hexdigest()[:16]


def string_array(texts: pa.Array | pa.ChunkedArray | Sequence[str]) -> pa.Array:
    """One contiguous Arrow string array from an array, a chunked column or a Python sequence
    (kernels take any of them; Arrow compute and numpy want one array)."""
    if isinstance(texts, pa.ChunkedArray):
        return texts.combine_chunks() if texts.num_chunks != 1 else texts.chunk(0)
    if isinstance(texts, pa.Array):
        return texts
    return pa.array(list(texts), pa.string())


def learned_span_arrays(
    spans: pa.Array | pa.ChunkedArray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A :data:`LEARNED_SPANS` column as flat int64 arrays: each span's row (0-based, in the
    column's order), start and end."""
    if isinstance(spans, pa.ChunkedArray):
        spans = spans.combine_chunks() if spans.num_chunks != 1 else spans.chunk(0)
    offsets = spans.offsets.to_numpy().astype(np.int64)
    rows = np.repeat(np.arange(len(spans), dtype=np.int64), np.diff(offsets))
    start, end = spans.values.slice(offsets[0], offsets[-1] - offsets[0]).flatten()
    return rows, start.to_numpy().astype(np.int64), end.to_numpy().astype(np.int64)


SCAN_WINDOW = 1 << 23
"""Bytes :func:`single_spaced` scans at a time: its masks take a few bytes per byte scanned, so
one 60 MB document would otherwise need ~300 MB of them at once."""


def _flagged_bytes(data: np.ndarray) -> np.ndarray:
    """Positions in ``data`` (UTF-8) of a double space, an ASCII control character or the first
    byte of a Unicode space or C1 control (not sorted), a window of bytes at a time."""
    parts = [np.zeros(0, np.int64)]
    size = len(data)
    for first in range(0, size, SCAN_WINDOW):
        last = min(first + SCAN_WINDOW, size)
        # The window and the two bytes after it (zeros past the end), for multi-byte characters.
        ahead = data[first : min(last + 2, size)]
        if len(ahead) < last - first + 2:
            ahead = np.concatenate([ahead, np.zeros(last - first + 2 - len(ahead), np.uint8)])
        window = ahead[: last - first]
        double = np.flatnonzero((window == 0x20) & (ahead[1 : last - first + 1] == 0x20))
        # Bytes < 0x20 and DEL; C2 (U+0080-U+00BF), E1 (U+1000-U+1FFF), E2 (U+2000-U+2FFF), E3.
        maybe = np.flatnonzero(
            (window < 0x20) | (window == 0x7F) | (window == 0xC2) | (window - 0xE1 <= 2)
        )
        b0, b1, b2 = ahead[maybe], ahead[maybe + 1], ahead[maybe + 2]
        unicode_space = (
            ((b0 == 0xC2) & (b1 >= 0x80) & (b1 <= 0xA0))  # C1 controls, U+0085, U+00A0
            | ((b0 == 0xE1) & (b1 == 0x9A) & (b2 == 0x80))  # U+1680
            | ((b0 == 0xE1) & (b1 == 0xA0) & (b2 == 0x8E))  # U+180E
            | ((b0 == 0xE2) & (b1 == 0x80) & (((b2 >= 0x80) & (b2 <= 0x8A)) | (b2 == 0xA8)))
            | ((b0 == 0xE2) & (b1 == 0x80) & ((b2 == 0xA9) | (b2 == 0xAF)))  # U+2029, U+202F
            | ((b0 == 0xE2) & (b1 == 0x81) & (b2 == 0x9F))  # U+205F
            | ((b0 == 0xE3) & (b1 == 0x80) & (b2 == 0x80))  # U+3000
        )
        control = (b0 < 0x20) | (b0 == 0x7F)
        parts += [double + first, maybe[control | unicode_space] + first]
    return np.concatenate(parts)


def single_spaced(texts: pa.Array) -> np.ndarray:
    """Per row of a string array: is its only whitespace single ASCII spaces between other
    characters, with no control character? (No tab, newline, Unicode space, C0/C1 control,
    doubled, leading or trailing space.) Such rows need no whitespace normalization, and GPT-2's
    pre-tokenizer starts a new piece at each of their spaces. One vectorized pass over the UTF-8
    bytes; only the rare bytes that may begin such a character are looked at closely."""
    wide = pa.types.is_large_string(texts.type)
    offsets = np.frombuffer(texts.buffers()[1], dtype=np.int64 if wide else np.int32)
    offsets = offsets[texts.offset : texts.offset + len(texts) + 1].astype(np.int64)
    data = np.frombuffer(texts.buffers()[2] or b"", dtype=np.uint8)[offsets[0] : offsets[-1]]
    offsets -= offsets[0]
    flagged = _flagged_bytes(data)
    bad = np.zeros(len(texts), dtype=bool)
    bad[np.searchsorted(offsets, flagged, side="right") - 1] = True
    nonempty = np.flatnonzero(offsets[1:] > offsets[:-1])
    edges = (data[offsets[nonempty]] == 0x20) | (data[offsets[nonempty + 1] - 1] == 0x20)
    bad[nonempty[edges]] = True
    return ~bad


def empty_rejects() -> pa.Table:
    """An empty table with :data:`REJECT_SCHEMA`."""
    return REJECT_SCHEMA.empty_table()


def rejects_table(
    *,
    doc_ids: list[str],
    source_files: list[str],
    source_lines: list[int],
    stage: str,
    reasons: list[str],
    values: list[str | None] | None = None,
    samples: list[str | None] | None = None,
) -> pa.Table:
    """Build a rejects table from Python lists (all of the same length); truncates samples."""
    n = len(doc_ids)
    values = values if values is not None else [None] * n
    samples = samples if samples is not None else [None] * n
    samples = [s[:SAMPLE_CHARS] if isinstance(s, str) else s for s in samples]
    return pa.table(
        {
            DOC_ID: pa.array(doc_ids, pa.string()),
            SOURCE_FILE: pa.array(source_files, pa.string()),
            SOURCE_LINE: pa.array(source_lines, pa.int64()),
            STAGE: pa.array([stage] * n, pa.string()),
            REASON: pa.array(reasons, pa.string()),
            VALUE: pa.array(values, pa.string()),
            SAMPLE: pa.array(samples, pa.string()),
        },
        schema=REJECT_SCHEMA,
    )


@dataclass(frozen=True)
class StageResult:
    """What a kernel returns for one batch: the rows it keeps and the rows it rejects.

    The invariant every kernel keeps: ``kept.num_rows + rejects.num_rows`` equals the rows it was
    given (for ingest: the records it read).
    """

    kept: pa.Table
    rejects: pa.Table


def drop_rows(
    table: pa.Table,
    dropped: pa.Array | pa.ChunkedArray | list[bool],
    *,
    stage: str,
    reasons: list[str],
    values: list[str | None],
) -> StageResult:
    """Split ``table`` into the rows kept and a rejects table for the rows where ``dropped`` is
    true; ``reasons`` and ``values`` hold one entry per dropped row, in row order. The one place
    kernels build their rejects, so every reject carries the document's location and a sample."""
    mask = pa.array(dropped, pa.bool_()) if isinstance(dropped, list) else dropped
    if mask.null_count:
        raise ValueError("the dropped mask has nulls: every row must be kept or dropped")
    if not pc.any(mask).as_py():
        # Nothing dropped (most batches of the quality gate's steps): the table as it is.
        # Filtering would copy every column, text included (4 ms per 8K-row batch).
        if reasons or values:
            raise ValueError(f"0 dropped rows but {len(reasons)} reasons")
        return StageResult(table, empty_rejects())
    gone = table.filter(mask)
    if len(reasons) != gone.num_rows or len(values) != gone.num_rows:
        raise ValueError(f"{gone.num_rows} dropped rows but {len(reasons)} reasons")
    rejects = rejects_table(
        doc_ids=gone[DOC_ID].to_pylist(),
        source_files=gone[SOURCE_FILE].to_pylist(),
        source_lines=gone[SOURCE_LINE].to_pylist(),
        stage=stage,
        reasons=reasons,
        values=values,
        samples=pc.utf8_slice_codeunits(gone[TEXT], 0, SAMPLE_CHARS).to_pylist(),
    )
    return StageResult(table.filter(pc.invert(mask)), rejects)
