"""``raw_documents``: list the input files, cut big ones into shards, ingest each shard; refuse a
run that kept no document."""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from llm_assets import storage
from llm_assets.constants import RAW_DOCUMENTS, STAGE_CODE_VERSIONS
from llm_assets.kernels.ingest.formats import detect_format, file_encoding
from llm_assets.kernels.ingest.read import IngestSpec, read_documents
from llm_assets.kernels.ingest.records import INVALID_CHAT
from llm_assets.paths import PathEscapeError, found_inside, shown
from llm_assets.stages.engine import (
    StageContext,
    StageInputError,
    StageReport,
    _catalog_session,
    _execute,
    _Planned,
    _top_reasons,
    spec_fields,
)
from llm_assets.stages.shard_io import ShardStats, _write_shard, row_group_parts
from llm_assets.warehouse.shards import fingerprint, shard_file_name, stage_dir

if TYPE_CHECKING:
    from llm_assets.warehouse.catalog import ShardRecord

DEFAULT_ROWS_PER_SHARD = 20_000
"""Lines per raw shard of a big JSONL file (the unit of work, restart and parallelism). Measured
on 2 cores against 10,000: multiprocess 5.3-5.6 s instead of 6.0-6.1 s at 200K rows and 24 s
instead of 29 s at 1M, in_process 7.9-8.2 s instead of 8.4-8.7 s at 200K; the fixed cost of a
shard (files, fsync, checksum, footer, catalog row, hand-over, memory give-back) is paid half as
often, for ~25 MB more per worker."""


def _safe_name(source_file: str) -> str:
    """A file-name-safe, readable shard prefix for an input file (plus a hash: no collisions)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", source_file)[-60:]
    return f"{readable}-{fingerprint(source_file)[:6]}"


IGNORED_LISTED = 100
"""At most this many ignored input names are kept in a materialization's metadata."""


IGNORED_PREFIXES = (".", "_")
"""Input files and folders whose names start with these are not read: hidden ones, and the
markers and work folders of Spark, Hadoop and Arrow writers (``_SUCCESS``, ``_committed_*``,
``_temporary/``, ``_metadata``), which those tools' own readers skip by the same rule, so an
output folder of theirs can be the input folder as it is."""


def list_input_files(
    input_dir: str | Path, data_root: Path | None = None, ignored: list[str] | None = None
) -> list[tuple[Path, str]]:
    """Every input file under ``input_dir`` as (path, relative posix name), sorted by name.

    Files and folders whose names start with :data:`IGNORED_PREFIXES` are not read; when given,
    ``ignored`` receives their relative names (folders ending in ``/``), so that a run can say
    what it skipped. Symlinked files and folders are followed and named through the link
    (``link_dir/linked.jsonl``). Each real folder is read
    once: a link to a folder already read (to an ancestor, a cycle, or a second name for the same
    folder) is not followed, since its files are already listed under the other name. The name
    a folder is read under is the one through the fewest links, the first in sorted order among
    those: a folder of the input folder keeps its own name whatever links to it are called.

    These fail here, before any work starts, with the file or folder in the message: an
    unsupported or unreadable file; an unreadable folder; a file or folder name that is not
    valid UTF-8 (it could not be recorded as ``source_file``; named by its bytes); with
    ``data_root``, a file or folder that a symlink leads out of both the input folder and the data
    root (the input folder itself is read wherever it is: :mod:`llm_assets.paths`).
    """
    root = Path(input_dir).expanduser()
    if not root.is_dir():
        raise StageInputError(f"input folder {shown(root)} does not exist or is not a folder")
    files = []
    skipped: list[str] = []
    within = None if data_root is None else (root.resolve(), data_root)
    walk = _walk_input_folder(root, within, skipped)
    for path, rel in sorted(walk, key=lambda f: f[1].parts):
        try:
            os.fsencode(path).decode("utf-8")
        except UnicodeDecodeError:
            raise StageInputError(
                f"input file {os.fsencode(path)!r}: its name is not valid UTF-8, so it cannot "
                "be recorded as the rows' source_file; rename it (or the folder holding it) to "
                "UTF-8"
            ) from None
        try:
            if within is not None:
                found_inside(path, *within, "input file")
            detect_format(os.path.abspath(path))
        except ValueError as exc:
            raise StageInputError(str(exc)) from exc
        if not os.access(path, os.R_OK):
            raise StageInputError(f"input file {shown(path)} is not readable")
        files.append((path, rel.as_posix()))
    skipped = sorted(
        name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        for name in skipped
    )
    if ignored is not None:
        ignored.extend(skipped)
    if not files:
        named = f" (not read, as their names start with . or _: {skipped[:5]})" if skipped else ""
        raise StageInputError(f"input folder {shown(root)} holds no input files{named}")
    return files


def _walk_input_folder(
    root: Path, within: tuple[Path, Path] | None, ignored: list[str]
) -> Iterator[tuple[Path, PurePosixPath]]:
    """Every entry under ``root`` that is not a folder, as (path through the links,
    relative name), by :func:`list_input_files`' rule for links: first the tree reached without
    a link, then the symlinked folders found in it (in sorted order), then those found in them,
    and so on; a folder already read is not read again. With ``within`` (the input folder
    resolved, the data root), a symlinked folder that resolves outside both raises
    :class:`StageInputError`. Entries named with an
    :data:`IGNORED_PREFIXES` prefix are not listed: their relative names go to ``ignored``.

    Folders are recognized by their (device, inode), so a link cycle ends and nothing is listed
    twice through folder links (a symlinked *file* is a name of its own, listed like any file).
    """
    read: set[tuple[int, int]] = set()
    tops = [(root, PurePosixPath())]
    while tops:
        links: list[tuple[Path, PurePosixPath]] = []
        for top in sorted(tops, key=lambda folder: folder[1].parts):
            folders = [top]
            while folders:
                folder, rel = folders.pop()
                stat = folder.stat()
                if (stat.st_dev, stat.st_ino) in read:
                    continue
                read.add((stat.st_dev, stat.st_ino))
                try:
                    with os.scandir(folder) as scan:
                        entries = sorted(scan, key=lambda entry: entry.name)
                except OSError as exc:
                    raise StageInputError(
                        f"input folder {shown(folder)} cannot be read: {exc.strerror or exc}"
                    ) from exc
                for entry in entries:
                    path, name = folder / entry.name, rel / entry.name
                    if entry.name.startswith(IGNORED_PREFIXES):
                        ignored.append(name.as_posix() + ("/" if entry.is_dir() else ""))
                        continue
                    if not entry.is_dir():  # follows links: a dangling one is listed as a file
                        yield path, name
                    elif not entry.is_symlink():
                        folders.append((path, name))
                    else:
                        if within is not None:
                            try:
                                found_inside(path, *within, "input folder")
                            except PathEscapeError as exc:
                                raise StageInputError(str(exc)) from exc
                        links.append((path, name))
        tops = links


def line_ranges(path: Path, rows_per_shard: int) -> list[tuple[int, int, int]]:
    """Split a plain JSONL file into (start byte, end byte, first line) ranges of at most
    ``rows_per_shard`` lines, cut at line ends.

    The driver runs this before any worker starts, so it is serial time: newlines are found with
    numpy per 4 MiB block, at about 2 GB/s. (1M rows, 514 MB: 0.89 s with a Python ``find`` per
    line; 0.25 s so.)
    """
    ranges: list[tuple[int, int, int]] = []
    start, lines_in_range, offset, first_line = 0, 0, 0, 1
    with open(path, "rb") as handle:
        while block := handle.read(1 << 22):
            newlines = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 0x0A)
            # The newline that ends the current range, then every rows_per_shard-th one after it.
            first_cut = rows_per_shard - lines_in_range - 1
            for cut in newlines[first_cut::rows_per_shard].tolist():
                end = offset + cut + 1
                ranges.append((start, end, first_line))
                first_line += rows_per_shard
                start = end
            if first_cut < len(newlines):
                lines_in_range = (len(newlines) - first_cut - 1) % rows_per_shard
            else:
                lines_in_range += len(newlines)
            offset += len(block)
    if offset > start:
        ranges.append((start, offset, first_line))
    return ranges or [(0, 0, 1)]


def _line_file(path: Path, fmt: str) -> bool:
    """Whether ``path`` is plain JSON Lines that can be cut into line ranges: a ``.jsonl`` file,
    or a ``.json`` one (as ``Dataset.to_json`` writes JSON Lines) unless it opens a JSON array
    (read whole: its one ``corrupt_file`` reject says how to convert it)."""
    if fmt not in ("jsonl", "json"):
        return False
    if fmt == "jsonl":
        return True
    with open(path, "rb") as handle:
        head = handle.read(1 << 16).lstrip(b"\xef\xbb\xbf \t\r\n")
    return not head.startswith(b"[")


def _parquet_parts(path: Path, rows_per_shard: int) -> list[tuple[int, int] | None]:
    """The row-group ranges a Parquet input file is read in, one raw shard each (about
    ``rows_per_shard`` rows, whole row groups: :func:`~llm_assets.stages.shard_io.row_group_parts`);
    ``[None]``, the whole file, when it is one range or its footer cannot be read (its task
    then records why, as a ``corrupt_file`` reject). Reads only the footer."""
    try:
        metadata = pq.read_metadata(path)
    except (pa.ArrowException, OSError, UnicodeDecodeError):
        return [None]
    parts = row_group_parts(metadata, rows_per_shard)
    return list(parts) if len(parts) > 1 else [None]


@_catalog_session
def run_raw_documents(
    ctx: StageContext,
    input_dir: str | Path,
    spec: IngestSpec,
    rows_per_shard: int,
    data_root: Path | None = None,
) -> StageReport:
    """Ingest every input file into raw shards (big plain JSONL files split by line ranges, big
    Parquet files by row groups).
    With ``data_root``, a link in the input folder must lead inside it or the data root."""
    if rows_per_shard < 1:
        raise StageInputError(f"rows_per_shard must be >= 1, got {rows_per_shard}")
    asset = RAW_DOCUMENTS
    # Resolved: the same folder given as a relative, absolute or linked path is one config.
    resolved = str(Path(input_dir).expanduser().resolve())
    fields = spec_fields(spec)
    if spec.chat_field is not None:
        # 2: tool calls are read (they were invalid_chat rejects) and weights must be 0 or 1.
        fields["chat_reader"] = 2
    config = {"input_dir": resolved, "rows_per_shard": rows_per_shard, **fields}
    stage_fp = fingerprint(asset, STAGE_CODE_VERSIONS[asset], {**fields, "rows": rows_per_shard})
    folder = stage_dir(ctx.warehouse_root, asset, stage_fp)
    planned: list[_Planned] = []
    ignored: list[str] = []
    for path, rel in list_input_files(input_dir, data_root, ignored):
        stat = path.stat()
        fmt = detect_format(str(path))
        # UTF-16 or UTF-32 (transcoded as read): its lines are not cut at b"\n", read whole.
        encoding = file_encoding(str(path))
        cut = encoding is None and _line_file(path, fmt)
        ranges = line_ranges(path, rows_per_shard) if cut else [None]
        if fmt == "json" and len(ranges) == 1:
            ranges = [None]  # read whole: the fingerprint of a .json file read whole
        groups = _parquet_parts(path, rows_per_shard) if fmt == "parquet" else [None]
        if len(groups) > 1:
            ranges = [None] * len(groups)
        for chunk, line_range in enumerate(ranges):
            shard = f"{_safe_name(rel)}-{chunk:05d}"
            byte_range = (line_range[0], line_range[1]) if line_range else None
            row_groups = groups[chunk] if len(groups) > 1 else None
            # A whole file (row_groups None) keeps the input fingerprint of a whole file; a UTF-16
            # or UTF-32 one gets its own (transcoded as read: untranscoded, every record is a
            # reject).
            where = byte_range if row_groups is None else ("row_groups", *row_groups)
            if encoding is not None:
                where = ("encoding", encoding)
            input_fp = fingerprint(rel, stat.st_size, stat.st_mtime_ns, where)
            out = str(folder / shard_file_name(shard))
            rej = str(folder / "rejects" / shard_file_name(shard))
            task = IngestTask(
                key=shard,
                path=str(path.resolve()),
                source_file=rel,
                spec=spec,
                output_path=out,
                rejects_path=rej,
                input_fingerprint=input_fp,
                byte_range=byte_range,
                first_line=line_range[2] if line_range else 1,
                row_groups=row_groups,
            )
            planned.append(_Planned(shard, out, rej, input_fp, (str(path.resolve()),), task))
    ctx.log.info(f"{asset}: {len(planned)} shard(s) planned from {input_dir}")
    if ignored:
        ctx.log.info(
            f"{asset}: not read, as their names start with . or _ (hidden, or markers of Spark "
            f"and Hadoop writers): {len(ignored)} file(s) or folder(s): {ignored[:10]}"
        )
    report = _execute(
        ctx,
        asset=asset,
        stage_fp=stage_fp,
        folder=folder,
        config=config,
        planned=planned,
        fn=run_ingest,
        extra={"ignored_inputs": ignored[:IGNORED_LISTED], "ignored_inputs_count": len(ignored)},
    )
    # After _execute: the shards and rejects are written and recorded (the rejects view is
    # current), so a refused run loses nothing and its rejects can be queried. A re-run reuses
    # the shards and is refused the same way.
    files = [plan.task.source_file for plan in planned]
    _warn_files_without_documents(ctx, report, files)
    _refuse_no_documents(ctx, report, spec, resolved, len(set(files)))
    return report


NO_TEXT_REASONS = ("missing_text", "non_string_text")
"""Raw reject reasons that say the records' text is not where ``text_field`` points."""


FILES_WITHOUT_DOCUMENTS_LISTED = 10
"""At most this many input files that gave no document are named, each with its top reason."""


class NoDocumentsError(StageInputError):
    """``raw_documents`` read records but kept none (every one a reject): every later stage
    would be empty and the training loop would run zero steps. Raised after the shards and
    rejects are recorded, so the rejects can be queried (``raw_documents_rejects``)."""


def _warn_files_without_documents(
    ctx: StageContext, report: StageReport, files: Sequence[str]
) -> None:
    """A WARNING naming each input file that had records but gave no document (all its
    records rejected) while other files did give documents, with its top reject reason: a file
    in another layout (its text in another field, another CSV delimiter) or an empty one is
    otherwise lost among the other files' rows. Reads only those files' rejects (their reason
    column)."""
    if report.rows_out == 0:
        return  # the whole input gave nothing: _refuse_no_documents says so
    per_file: dict[str, list[ShardRecord]] = {}
    for name, record in zip(files, report.shards, strict=True):
        per_file.setdefault(name, []).append(record)
    empty = [
        (name, records)
        for name, records in per_file.items()
        if sum(r.rows_in for r in records) and not sum(r.rows_out for r in records)
    ]
    if not empty:
        return
    described = []
    for name, records in empty[:FILES_WITHOUT_DOCUMENTS_LISTED]:
        reasons: Counter[str] = Counter()
        for record in records:
            if record.rejects_path and storage.exists(record.rejects_path):
                column = storage.read_parquet(record.rejects_path, columns=["reason"])["reason"]
                reasons.update(column.to_pylist())
        rows = sum(r.rows_in for r in records)
        described.append(f"{name!r} ({rows} record(s); {_top_reasons(dict(reasons), 1)})")
    more = f" and {len(empty) - len(described)} more" if len(empty) > len(described) else ""
    ctx.log.warning(
        f"{RAW_DOCUMENTS}: {len(empty)} input file(s) gave no document, every record rejected, "
        f"while other files did: {'; '.join(described)}{more}. Query their rejects: SELECT "
        f"source_file, reason, count(*) FROM {RAW_DOCUMENTS}_rejects GROUP BY ALL"
    )


def _refuse_no_documents(
    ctx: StageContext, report: StageReport, spec: IngestSpec, input_dir: str, n_files: int
) -> None:
    """Raise :class:`NoDocumentsError` when records were read but none was kept, naming the
    reject counts by reason and, when the text was not found, ``text_field``."""
    if report.rows_in == 0 or report.rows_out > 0:
        return
    reasons = report.reject_reasons or {"(unknown)": report.rows_rejected}
    message = (
        f"{RAW_DOCUMENTS}: no document kept: all {report.rows_in} record(s) of {n_files} input "
        f"file(s) under {input_dir!r} were rejected ({_top_reasons(reasons)}), so every later "
        "stage would be empty and training would run zero steps."
    )
    not_found = NO_TEXT_REASONS if spec.chat_field is None else (*NO_TEXT_REASONS, INVALID_CHAT)
    no_text = sum(reasons.get(reason, 0) for reason in not_found)
    if no_text * 2 > report.rows_rejected:
        if spec.chat_field is not None:
            message += (
                f" The conversations are read from the field {spec.chat_field!r} (raw_documents."
                "config.chat_field), which these records lack or hold as no conversation ending "
                "with an assistant message: set chat_field to the field or column that holds "
                "the messages"
            )
        else:
            message += (
                f" The text is read from the field {spec.text_field!r} (raw_documents.config."
                "text_field), which these records lack or hold as a non-string: set "
                "raw_documents.config.text_field to the field or column that holds the text"
            )
        if any(name.lower().endswith(".csv") for name in _input_names(report)):
            message += f" (and, for CSV files, check csv_delimiter: now {spec.csv_delimiter!r})"
        message += "."
        first = ctx.catalog.query(
            f"SELECT source_file, source_line, value, sample FROM {RAW_DOCUMENTS}_rejects "
            "WHERE list_contains(?, reason) ORDER BY source_file, source_line LIMIT 1",
            [list(not_found)],
        )
        if first:
            source_file, line, value, sample = first[0]
            message += f" First such record ({source_file}:{line}): {value}"
            message += f"; {sample[:120]!r}." if sample else "."
    elif reasons.get("empty_file", 0) * 2 > report.rows_rejected:
        message += " The input files are empty."
    message += (
        f" Every reject is recorded: SELECT source_file, source_line, reason, value FROM "
        f"{RAW_DOCUMENTS}_rejects (catalog {ctx.catalog.path})."
    )
    raise NoDocumentsError(message)


def _input_names(report: StageReport) -> set[str]:
    return {path for record in report.shards for path in record.input_shards}


@dataclass(frozen=True)
class IngestTask:
    """Read one input file (or one line range of a JSONL file) into one raw shard."""

    key: str
    path: str
    source_file: str
    spec: IngestSpec
    output_path: str
    rejects_path: str
    input_fingerprint: str
    byte_range: tuple[int, int] | None = None
    first_line: int = 1
    row_groups: tuple[int, int] | None = None
    """Of a Parquet file, only these row groups (first, end): one part of a big file."""


def run_ingest(task: IngestTask) -> ShardStats:
    """Worker side of ``raw_documents``."""
    from llm_assets.kernels.schema import DOCUMENT_SCHEMA

    results = read_documents(
        task.path,
        task.source_file,
        task.spec,
        byte_range=task.byte_range,
        first_line=task.first_line,
        row_groups=task.row_groups,
    )
    return _write_shard(
        results,
        key=task.key,
        output_path=task.output_path,
        rejects_path=task.rejects_path,
        input_fingerprint=task.input_fingerprint,
        empty_output_schema=lambda: DOCUMENT_SCHEMA,
        metadata={},
    )
