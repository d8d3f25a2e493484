"""The JSON Lines reader (``.jsonl`` and ``.json``, plain, gzip or zstd): one document per
line holding a JSON object."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from functools import partial
from typing import IO, TYPE_CHECKING

import orjson

from llm_assets.kernels.ingest.chat import _keep_chat
from llm_assets.kernels.ingest.compression import _CORRUPT_ERRORS, _decompressed
from llm_assets.kernels.ingest.formats import _lines, _utf8
from llm_assets.kernels.ingest.records import (
    _MISSING,
    _READ_CHUNK,
    CORRUPT_FILE,
    INVALID_JSON,
    INVALID_UTF8,
    MALFORMED_RECORD,
    NOT_AN_OBJECT,
    TRUNCATED_FILE,
    _Batch,
    _sample,
    _stopped_at,
    _text_problem,
)
from llm_assets.kernels.schema import StageResult
from llm_assets.storage import open_input, read_range

if TYPE_CHECKING:
    from llm_assets.kernels.ingest.read import IngestSpec


def _read_jsonl_range(
    path: str, source_file: str, spec: IngestSpec, start: int, end: int, first_line: int
) -> Iterator[StageResult]:
    stream = io.BytesIO(read_range(path, start, end))
    if start == 0:
        yield from _read_jsonl_stream(stream, source_file, spec, first_line)
    else:
        # Only the file's first line may start with a BOM.
        yield from _read_jsonl_stream(stream, source_file, spec, first_line, strip_bom=False)


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
            open_input(path) as handle,
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
