"""Which input format a file is (by its suffix) and which Unicode encoding its text is in:
UTF-8, or UTF-16 or UTF-32 with a byte-order mark, transcoded to UTF-8 as read."""

from __future__ import annotations

import codecs
import io
import os
from collections.abc import Iterator
from itertools import chain
from typing import IO

from llm_assets.kernels.ingest.compression import _CORRUPT_ERRORS, _DecodedStream, _decompressed
from llm_assets.kernels.ingest.records import _READ_CHUNK
from llm_assets.storage import open_input

_PROBE_BYTES = 1 << 16
"""Bytes fetched of an object to look at its first bytes (its encoding, whether it is an
array): a small range request, not a block of the file."""

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
    ".arrow",
)
_BOM = b"\xef\xbb\xbf"


class UnsupportedFileError(ValueError):
    """The file's suffix is not one of :data:`SUPPORTED_SUFFIXES`."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"{path}: unsupported file type; supported suffixes: {', '.join(SUPPORTED_SUFFIXES)}"
            " (move the file out of the input folder, or give it a name starting with '_' or '.'"
            ", which no run reads)"
        )
        self.path = path


def detect_format(path: str) -> str:
    """Return the format named by ``path``'s suffix, case-insensitive: ``jsonl``, ``jsonl.gz``,
    ``jsonl.zst``, ``json``, ``json.gz``, ``json.zst`` (JSON Lines too, as Hugging Face's
    ``Dataset.to_json`` writes them by default), ``parquet``, ``csv``, ``txt`` or ``arrow``
    (Arrow IPC, as Hugging Face's ``Dataset.save_to_disk`` and its cache write them).

    Raises :class:`UnsupportedFileError` for any other suffix.
    """
    lowered = os.fspath(path).lower()
    for suffix in SUPPORTED_SUFFIXES:
        if lowered.endswith(suffix):
            return suffix[1:]
    raise UnsupportedFileError(path)


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    """The physical lines of a binary stream (``\\n``-terminated), without a leading UTF-8 BOM."""
    lines = iter(stream)
    first = next(lines, b"")
    return chain((first.removeprefix(_BOM),), lines)


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
    if fmt in ("parquet", "arrow"):
        return None
    with open_input(path, block_size=_PROBE_BYTES) as handle, _decompressed(handle, fmt) as stream:
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
