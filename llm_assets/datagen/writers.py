"""Write generated rows as JSONL (plain, gzip, zstd), Parquet, CSV or TXT (:func:`write_corpus`)."""

from __future__ import annotations

import csv
import gzip
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from llm_assets.datagen.chats import generate_chats
from llm_assets.datagen.corpus import generate_records
from llm_assets.datagen.instructions import generate_instructions
from llm_assets.datagen.reviews import generate_reviews

FORMATS: tuple[str, ...] = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".parquet", ".csv", ".txt")
"""File suffixes :func:`write_corpus` understands (the same as the ingest reader's)."""
_WRITE_CHUNK = 8192
GENERATORS: dict[str, Callable[..., Iterator[dict[str, Any]]]] = {
    "corpus": generate_records,
    "reviews": generate_reviews,
    "instructions": generate_instructions,
    "chats": generate_chats,
}
"""The generators :func:`write_corpus` and the command line know by name."""


def detect_format(path: str | Path) -> str:
    """The format named by ``path``'s suffix (one of :data:`FORMATS`, without the dot)."""
    name = Path(path).name.lower()
    for suffix in sorted(FORMATS, key=len, reverse=True):
        if name.endswith(suffix):
            return suffix[1:]
    raise ValueError(f"{path}: unsupported suffix; use one of {', '.join(FORMATS)}")


def write_corpus(
    path: str | Path,
    rows: int | Iterable[Mapping[str, Any]],
    seed: int = 0,
    *,
    kind: str = "corpus",
    text_field: str = "text",
    progress: Callable[[int], None] | None = None,
    **kwargs: Any,
) -> Path:
    """Write generated rows to ``path`` in the format its suffix names; return the path.

    Args:
        path: ``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``, ``.parquet``, ``.csv`` or ``.txt``
            (TXT: only the ``text_field`` of each row, rows separated by a blank line; rows
            without a string there, such as chats, are refused with a ValueError. CSV: a list or
            dict value, such as a chat's messages, is written as a JSON string cell). Parent
            folders are created. Compressed files are byte-identical for identical rows (no
            timestamps).
        rows: how many rows to generate with the ``kind`` generator (:data:`GENERATORS`), or
            the rows themselves (any iterable of mappings, e.g. ``generate_records(...)``).
        seed: the generator's seed (ignored when ``rows`` are given).
        kind: ``corpus``, ``reviews``, ``instructions`` or ``chats``.
        text_field: the field a TXT file takes from each row.
        progress: called with the number of rows written so far after every chunk.
        **kwargs: passed to the generator (e.g. ``duplicate_fraction`` for ``corpus``).
    """
    path = Path(path)
    fmt = detect_format(path)
    if isinstance(rows, int):
        if kind not in GENERATORS:
            raise ValueError(f"kind must be one of {sorted(GENERATORS)}, got {kind!r}")
        records: Iterable[Mapping[str, Any]] = GENERATORS[kind](rows, seed, **kwargs)
    elif kwargs:
        raise TypeError(f"generator options {sorted(kwargs)} given with explicit rows")
    else:
        records = rows
    if fmt == "txt":  # refuse rows without a text before creating the file
        records = iter(records)
        first = next(records, None)
        if first is not None:
            _TxtSink.check(first, text_field)
            records = itertools.chain((first,), records)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = _WRITERS[fmt]
    written = 0
    try:
        with writer(path, text_field) as sink:
            for chunk in _chunks(records, _WRITE_CHUNK):
                sink.write(chunk)
                written += len(chunk)
                if progress is not None:
                    progress(written)
    except ValueError:  # a row the format cannot hold: no half-written file
        path.unlink(missing_ok=True)
        raise
    return path


def _chunks(rows: Iterable[Mapping[str, Any]], size: int) -> Iterator[list[Mapping[str, Any]]]:
    chunk: list[Mapping[str, Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class _Sink:
    """Writes chunks of rows to one file; a context manager that closes what it opened."""

    def __init__(self, path: Path, text_field: str) -> None:
        self.path = path
        self.text_field = text_field
        self._closers: list[Any] = []

    def __enter__(self) -> _Sink:
        return self

    def __exit__(self, *exc: object) -> None:
        for closer in reversed(self._closers):
            closer.close()

    def write(self, rows: list[Mapping[str, Any]]) -> None:
        raise NotImplementedError


class _JsonlSink(_Sink):
    def __init__(self, path: Path, text_field: str, compression: str | None = None) -> None:
        super().__init__(path, text_field)
        raw = open(path, "wb")  # noqa: SIM115 - closed by __exit__
        self._closers.append(raw)
        self.stream: IO[bytes] = raw
        if compression == "gz":
            # no file name and mtime 0 in the header: the same rows give the same bytes
            self.stream = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)
            self._closers.append(self.stream)
        elif compression == "zst":
            compressor = zstandard.ZstdCompressor(level=10)
            self.stream = compressor.stream_writer(raw, closefd=False)
            self._closers.append(self.stream)

    def write(self, rows: list[Mapping[str, Any]]) -> None:
        dumps = json.dumps
        self.stream.write(
            "".join(dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")
        )


class _ParquetSink(_Sink):
    def __init__(self, path: Path, text_field: str) -> None:
        super().__init__(path, text_field)
        self.writer: pq.ParquetWriter | None = None

    def write(self, rows: list[Mapping[str, Any]]) -> None:
        if self.writer is None:
            table = pa.Table.from_pylist(rows)
            self.writer = pq.ParquetWriter(self.path, table.schema, compression="zstd")
            self._closers.append(self.writer)
        else:
            table = pa.Table.from_pylist(rows, schema=self.writer.schema)
        self.writer.write_table(table)

    def __exit__(self, *exc: object) -> None:
        if self.writer is None:  # no rows: still a valid (empty) file
            pq.write_table(pa.table({self.text_field: pa.array([], pa.string())}), self.path)
        super().__exit__(*exc)


class _CsvSink(_Sink):
    def __init__(self, path: Path, text_field: str) -> None:
        super().__init__(path, text_field)
        self.handle = open(path, "w", encoding="utf-8", newline="")  # noqa: SIM115
        self._closers.append(self.handle)
        self.writer: Any = None

    def write(self, rows: list[Mapping[str, Any]]) -> None:
        if self.writer is None:
            self.writer = csv.DictWriter(self.handle, fieldnames=list(rows[0]), lineterminator="\n")
            self.writer.writeheader()
        self.writer.writerows(map(_csv_cells, rows))


def _csv_cells(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """``row`` with each list or dict value as JSON (the csv module would write its Python repr):
    a chat's ``messages`` become a JSON string cell, which ingest's ``chat_field`` reads."""
    if not any(isinstance(value, (list, dict)) for value in row.values()):
        return row
    return {
        name: json.dumps(value, ensure_ascii=False) if isinstance(value, (list, dict)) else value
        for name, value in row.items()
    }


class _TxtSink(_Sink):
    def __init__(self, path: Path, text_field: str) -> None:
        super().__init__(path, text_field)
        self.handle = open(path, "w", encoding="utf-8", newline="\n")  # noqa: SIM115
        self._closers.append(self.handle)
        self.first = True

    @staticmethod
    def check(row: Mapping[str, Any], text_field: str) -> None:
        """ValueError unless ``row`` has a string ``text_field`` (all a TXT file keeps)."""
        if not isinstance(row.get(text_field), str):
            fields = ", ".join(row) or "none"
            raise ValueError(
                f"a .txt file holds only the string field {text_field!r} of each row, and this "
                f"row has none (its fields: {fields}); write .jsonl, .jsonl.gz, .jsonl.zst, "
                ".parquet or .csv instead"
            )

    def write(self, rows: list[Mapping[str, Any]]) -> None:
        for row in rows:
            self.check(row, self.text_field)
            lines = row[self.text_field].splitlines()
            paragraph = "\n".join(line for line in lines if line.strip())
            if not paragraph:
                continue  # a blank paragraph cannot be written: blank lines separate them
            self.handle.write(("" if self.first else "\n") + paragraph + "\n")
            self.first = False


_WRITERS: dict[str, Callable[[Path, str], _Sink]] = {
    "jsonl": _JsonlSink,
    "jsonl.gz": lambda path, field: _JsonlSink(path, field, "gz"),
    "jsonl.zst": lambda path, field: _JsonlSink(path, field, "zst"),
    "parquet": _ParquetSink,
    "csv": _CsvSink,
    "txt": _TxtSink,
}
