"""The plain-text reader (``.txt``): one document per paragraph."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING

from llm_assets.kernels.ingest.chat import _keep_chat
from llm_assets.kernels.ingest.formats import _lines, _utf8
from llm_assets.kernels.ingest.records import INVALID_UTF8, _Batch, _sample
from llm_assets.kernels.schema import StageResult
from llm_assets.storage import open_input

if TYPE_CHECKING:
    from llm_assets.kernels.ingest.read import IngestSpec


def _read_txt(path: str, source_file: str, spec: IngestSpec) -> Iterator[StageResult]:
    """One document per paragraph (lines separated by blank lines), at its first line."""
    paragraph: list[bytes] = []
    first_line = 0
    with open_input(path) as handle:
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
