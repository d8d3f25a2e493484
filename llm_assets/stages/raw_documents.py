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
from llm_assets.kernels.ingest.arrow import NotSplittable, record_batch_spans
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
from llm_assets.storage import (
    StorageError,
    bucket_and_key,
    is_remote,
    list_files,
    local_path,
    open_input,
    storage_error,
)
from llm_assets.warehouse.shards import fingerprint, shard_file_name, stage_dir

if TYPE_CHECKING:
    from llm_assets.kernels.schema import StageResult
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
    walked = sorted(_walk_input_folder(root, within, skipped), key=lambda f: f[1].parts)
    extras = dataset_extras([rel.as_posix() for _, rel in walked])
    for path, rel in walked:
        if rel.as_posix() in extras:
            skipped.append(rel.as_posix())
            continue
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
        named = f" (not read: {skipped[:5]}: {_NOT_READ})" if skipped else ""
        raise StageInputError(f"input folder {shown(root)} holds no input files{named}")
    return files


_NOT_READ = "names starting with . or _, or a Hugging Face dataset's metadata"

HF_DATASET_METADATA = ("dataset_info.json", "state.json", "dataset_dict.json")
"""Files Hugging Face ``datasets`` writes beside its Arrow files (``save_to_disk``, its cache):
the dataset's description, not records."""


def dataset_extras(names: Sequence[str]) -> set[str]:
    """Of the relative ``names`` of an input that holds ``.arrow`` files (a Hugging Face dataset
    folder or cache), those that are not its data: :data:`HF_DATASET_METADATA`, the cache's
    ``*.lock`` files and the ``cache-*.arrow`` files ``Dataset.map`` and ``filter`` leave there
    (results of a transformation, not the dataset). Empty when no name ends in ``.arrow``."""
    if not any(name.lower().endswith(".arrow") for name in names):
        return set()
    extras = set()
    for name in names:
        base = name.rsplit("/", 1)[-1]
        cache = base.startswith("cache-") and base.endswith(".arrow")
        if base in HF_DATASET_METADATA or base.endswith(".lock") or cache:
            extras.add(name)
    return extras


@dataclass(frozen=True)
class InputFile:
    """An input file as a run plans it."""

    location: str
    """What a worker opens: an absolute local path, or an object's URL (``s3://bucket/key``)."""
    name: str
    """Its path relative to the input folder (``/``-separated): the rows' ``source_file``."""
    size: int
    version: int | str
    """What changes when the file is written again: its mtime (ns) on disk, an object's ETag."""
    mtime_s: float | None


def input_files(
    input_dir: str | Path, data_root: Path | None = None, ignored: list[str] | None = None
) -> list[InputFile]:
    """Every input file under ``input_dir``, a local folder (:func:`list_input_files`; a
    ``file://`` URL is one) or an object-storage prefix (:func:`remote_input_files`)."""
    if is_remote(str(input_dir)):
        return remote_input_files(str(input_dir), ignored)
    files = []
    for path, rel in list_input_files(local_path(str(input_dir)), data_root, ignored):
        stat = path.stat()
        files.append(
            InputFile(str(path.resolve()), rel, stat.st_size, stat.st_mtime_ns, stat.st_mtime)
        )
    return files


def remote_input_files(url: str, ignored: list[str] | None = None) -> list[InputFile]:
    """Every object under the prefix ``url`` names, by the rules of :func:`list_input_files`
    (names starting with :data:`IGNORED_PREFIXES` at any level not read, every other file
    of a supported format, sorted by name). A listing the store refuses, or an empty prefix,
    fails here, before any work, with the bucket and key in the message."""
    try:
        stored = list_files(url)
    except StorageError as exc:
        raise StageInputError(str(exc)) from exc
    skipped: set[str] = set()
    visible = []
    for found in stored:
        parts = found.name.split("/")
        hidden = next((i for i, part in enumerate(parts) if part.startswith(IGNORED_PREFIXES)), -1)
        if hidden >= 0:
            skipped.add("/".join(parts[: hidden + 1]) + ("/" if hidden < len(parts) - 1 else ""))
        else:
            visible.append(found)
    extras = dataset_extras([found.name for found in visible])
    skipped.update(extras)
    files = []
    for found in visible:
        if found.name in extras:
            continue
        try:
            detect_format(found.url)
        except ValueError as exc:
            raise StageInputError(str(exc)) from exc
        files.append(InputFile(found.url, found.name, found.size, found.version, found.mtime_s))
    if ignored is not None:
        ignored.extend(sorted(skipped))
    if not files:
        bucket, key = bucket_and_key(url)
        what = (
            f"no input files (not read: {sorted(skipped)[:5]}: {_NOT_READ})"
            if stored
            else "no object"
        )
        raise StageInputError(
            f"input location {url!r} holds {what}: bucket {bucket!r}, key prefix "
            f"{key.rstrip('/') + '/'!r}; check the prefix (raw_documents.config.input_dir)"
        )
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


PLAN_BLOCK_BYTES = 32 << 20
"""Bytes per range request when the driver streams a JSONL object to find its line ends: one
file at a time, so larger than a worker's blocks. Against the loopback S3 server, 256 MB took
3.7 s in 8 MiB requests and 1.7 s in 32 MiB ones."""


def line_ranges(path: str, rows_per_shard: int) -> list[tuple[int, int, int]]:
    """Split a plain JSONL file into (start byte, end byte, first line) ranges of at most
    ``rows_per_shard`` lines, cut at line ends.

    The driver runs this before any worker starts, so it is serial time: newlines are found with
    numpy per 4 MiB block, at about 2 GB/s. (1M rows, 514 MB: 0.89 s with a Python ``find`` per
    line; 0.25 s so.) An object is streamed in range requests of :data:`PLAN_BLOCK_BYTES`.
    """
    ranges: list[tuple[int, int, int]] = []
    start, lines_in_range, offset, first_line = 0, 0, 0, 1
    with open_input(path, block_size=PLAN_BLOCK_BYTES) as handle:
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


def _line_file(path: str, fmt: str) -> bool:
    """Whether ``path`` is plain JSON Lines that can be cut into line ranges: a ``.jsonl`` file,
    or a ``.json`` one (as ``Dataset.to_json`` writes JSON Lines) unless it opens a JSON array
    (read whole: its one ``corrupt_file`` reject says how to convert it)."""
    if fmt not in ("jsonl", "json"):
        return False
    if fmt == "jsonl":
        return True
    with open_input(path, block_size=1 << 16) as handle:
        head = handle.read(1 << 16).lstrip(b"\xef\xbb\xbf \t\r\n")
    return not head.startswith(b"[")


def _parquet_parts(path: str, rows_per_shard: int) -> list[tuple[int, int] | None]:
    """The row-group ranges a Parquet input file is read in, one raw shard each (about
    ``rows_per_shard`` rows, whole row groups: :func:`~llm_assets.stages.shard_io.row_group_parts`);
    ``[None]``, the whole file, when it is one range or its footer cannot be read (its task
    then records why, as a ``corrupt_file`` reject). Reads only the footer."""
    try:
        with open_input(path, block_size=1 << 16) as handle:
            metadata = pq.read_metadata(handle)
    except (pa.ArrowException, OSError, UnicodeDecodeError):
        return [None]
    parts = row_group_parts(metadata, rows_per_shard)
    return list(parts) if len(parts) > 1 else [None]


def _arrow_parts(path: str, rows_per_shard: int) -> list[tuple[int, int, int] | None]:
    """The (start byte, end byte, first row) ranges of whole record batches an Arrow input file
    is read in, about ``rows_per_shard`` rows each (:func:`record_batch_spans`); ``[None]``,
    the whole file, when it is one range or cannot be cut (its task then reads it whole and
    records what is wrong)."""
    try:
        spans = record_batch_spans(path)
    except NotSplittable:
        return [None]
    parts: list[tuple[int, int, int] | None] = []
    rows = first_row = 0
    for start, end, batch_rows in spans:
        if parts and rows + batch_rows <= rows_per_shard:
            part_start, _, part_first = parts[-1]
            parts[-1] = (part_start, end, part_first)
            rows += batch_rows
        else:
            parts.append((start, end, first_row + 1))
            rows = batch_rows
        first_row += batch_rows
    return parts if len(parts) > 1 else [None]


def _plan_file(
    file: InputFile, spec: IngestSpec, rows_per_shard: int, folder: Path
) -> list[_Planned]:
    """The shards one input file is read in: line ranges of a big plain JSONL file, row-group
    ranges of a big Parquet file, record-batch ranges of a big Arrow file, else the whole file."""
    path, rel = file.location, file.name
    fmt = detect_format(path)
    # UTF-16 or UTF-32 (transcoded as read): its lines are not cut at b"\n", read whole.
    encoding = file_encoding(path)
    cut = encoding is None and _line_file(path, fmt)
    ranges = line_ranges(path, rows_per_shard) if cut else [None]
    if fmt == "json" and len(ranges) == 1:
        ranges = [None]  # read whole: the fingerprint of a .json file read whole
    if fmt == "arrow":
        ranges = _arrow_parts(path, rows_per_shard)
    groups = _parquet_parts(path, rows_per_shard) if fmt == "parquet" else [None]
    if len(groups) > 1:
        ranges = [None] * len(groups)
    planned = []
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
        input_fp = fingerprint(rel, file.size, file.version, where)
        out = str(folder / shard_file_name(shard))
        rej = str(folder / "rejects" / shard_file_name(shard))
        task = IngestTask(
            key=shard,
            path=path,
            source_file=rel,
            spec=spec,
            output_path=out,
            rejects_path=rej,
            input_fingerprint=input_fp,
            byte_range=byte_range,
            first_line=line_range[2] if line_range else 1,
            row_groups=row_groups,
        )
        planned.append(_Planned(shard, out, rej, input_fp, (path,), task))
    return planned


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
    resolved = (
        str(input_dir).rstrip("/")
        if is_remote(str(input_dir))
        else str(Path(local_path(str(input_dir))).expanduser().resolve())
    )
    fields = spec_fields(spec)
    if spec.chat_field is not None:
        # 2: tool calls are read (they were invalid_chat rejects) and weights must be 0 or 1.
        fields["chat_reader"] = 2
    config = {"input_dir": resolved, "rows_per_shard": rows_per_shard, **fields}
    stage_fp = fingerprint(asset, STAGE_CODE_VERSIONS[asset], {**fields, "rows": rows_per_shard})
    folder = stage_dir(ctx.warehouse_root, asset, stage_fp)
    planned: list[_Planned] = []
    ignored: list[str] = []
    for file in input_files(input_dir, data_root, ignored):
        try:
            planned.extend(_plan_file(file, spec, rows_per_shard, folder))
        except OSError as exc:  # the object went away or the store refused: name it
            raise StageInputError(str(storage_error(exc, file.location))) from exc
    ctx.log.info(f"{asset}: {len(planned)} shard(s) planned from {input_dir}")
    if ignored:
        ctx.log.info(
            f"{asset}: not read, as their names start with . or _ (hidden, or markers of Spark "
            f"and Hadoop writers) or are a Hugging Face dataset's metadata: {len(ignored)} "
            f"file(s) or folder(s): {ignored[:10]}"
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
    """Worker side of ``raw_documents``: opens its input itself (a local path or an object's
    URL, read with range requests); an object the store refuses fails the task naming the
    bucket and key."""
    from llm_assets.kernels.schema import DOCUMENT_SCHEMA

    results = read_documents(
        task.path,
        task.source_file,
        task.spec,
        byte_range=task.byte_range,
        first_line=task.first_line,
        row_groups=task.row_groups,
    )
    if is_remote(task.path):
        results = _naming_the_object(results, task.path)
    return _write_shard(
        results,
        key=task.key,
        output_path=task.output_path,
        rejects_path=task.rejects_path,
        input_fingerprint=task.input_fingerprint,
        empty_output_schema=lambda: DOCUMENT_SCHEMA,
        metadata={},
    )


def _naming_the_object(results: Iterator[StageResult], url: str) -> Iterator[StageResult]:
    """``results``, read from the object at ``url``; an error of the store while reading (the
    object deleted since it was listed, access denied, the endpoint gone) as a
    :class:`StorageError` naming its bucket and key. Errors writing the shard are not wrapped."""
    try:
        yield from results
    except StorageError:
        raise
    except OSError as exc:
        raise storage_error(exc, url) from exc
