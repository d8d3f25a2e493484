"""Driver side of every stage: plan the shards, skip the finished ones, run the rest, record.

This is what a Dagster asset calls (and what the benchmarks call, so they measure the assets' own
code). It knows the warehouse and a compute backend, not Dagster. Each ``run_*`` function returns
a :class:`StageReport` the asset turns into metadata.

Restart rule: a planned shard is skipped when its output file exists and its footer names the same
input fingerprint; the folder it lives in is named by the stage fingerprint (config + code
version). So a killed run, run again, computes only what is missing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from llm_assets.compute.base import Logger, OnResult, ShardTaskFailed
from llm_assets.constants import (
    FILTERED_DOCUMENTS,
    NORMALIZED_DOCUMENTS,
    PIPELINE_ASSETS,
    RAW_DOCUMENTS,
    STAGE_CODE_VERSIONS,
    TOKENIZED_DOCUMENTS,
    TRAINING_BATCHES,
)
from llm_assets.kernels.batching import (
    BatchSpec,
    LabelQuota,
    balance_quotas,
    batch_schema_metadata,
    derive_boundaries,
    length_histogram,
    spread_quotas,
)
from llm_assets.kernels.decontam import CONTAMINATED, DecontamSpec, EvalSetError, eval_index
from llm_assets.kernels.dedup import (
    SEEN_TABLE,
    DedupOutcome,
    ExactDedupSpec,
    NearDedupSpec,
    resolve_duplicates,
)
from llm_assets.kernels.filters import FilterSpec, LengthFilterSpec, filter_table
from llm_assets.kernels.ingest import (
    INVALID_CHAT,
    IngestSpec,
    detect_format,
    file_encoding,
)
from llm_assets.kernels.mixture import MixtureSpec, file_matches, mixture_targets
from llm_assets.kernels.normalize import NormalizeSpec, normalize_table
from llm_assets.kernels.schema import INPUT_IDS, LABEL, PROMPT_TOKENS
from llm_assets.kernels.tokenization import (
    ENGINES,
    TokenizerError,
    TokenizerSpec,
    chat_template_text,
    tokenize_table,
)
from llm_assets.paths import PathEscapeError, inside
from llm_assets.tasks import (
    MIXTURE_DOCUMENTS,
    MIXTURE_TOKENS,
    SPLITS,
    DedupApplyTask,
    GatherTask,
    IngestTask,
    MapTask,
    MegatronTask,
    ScatterTask,
    ShardStats,
    add_parts,
    carried_metadata,
    label_counts,
    megatron_done,
    read_scatter_manifest,
    read_scatter_pieces,
    row_group_parts,
    run_dedup_apply,
    run_gather,
    run_ingest,
    run_map,
    run_megatron,
    run_scatter,
    scatter_columns,
    scatter_done,
    scatter_key,
    scatter_pieces,
    source_counts,
    trainable,
    trainable_label_counts,
)
from llm_assets.warehouse.catalog import Catalog, ShardRecord
from llm_assets.warehouse.layout import (
    DEDUP_MEMO,
    SCATTER_FOLDER,
    scatter_folder_name,
    scatter_settings,
)
from llm_assets.warehouse.shards import (
    CHECKSUM_ALGORITHM,
    INPUT_FINGERPRINT,
    ROWS_IN,
    ROWS_REJECTED,
    STATS,
    completed_input_fingerprint,
    decoded_column_bytes,
    file_checksum,
    file_sha256,
    fingerprint,
    read_footer_metadata,
    remove_stale_temporaries,
    shard_file_name,
    stage_dir,
    temporary_path,
)

TOKENIZER_META = "llm_assets.tokenizer."
SECONDS_BY_PART = "seconds_by_part"
"""Report key (so also materialization metadata and catalog): seconds per part of the stage's
shard tasks (read, compute, write, commit: :data:`~llm_assets.tasks.PARTS`), summed over the
shards this run computed, in whichever processes ran them; with 2 workers busy they add up to
about twice the stage's wall time. Shards reused from an earlier run add nothing. What the stage's
wall time holds beyond them is the driver's share: planning, the catalog, waiting for workers."""
DEFAULT_ROWS_PER_SHARD = 20_000
"""Lines per raw shard of a big JSONL file (the unit of work, restart and parallelism). Measured
on 2 cores against 10,000: multiprocess 5.3-5.6 s instead of 6.0-6.1 s at 200K rows and 24 s
instead of 29 s at 1M, in_process 7.9-8.2 s instead of 8.4-8.7 s at 200K; the fixed cost of a
shard (files, fsync, checksum, footer, catalog row, hand-over, memory give-back) is paid half as
often, for ~25 MB more per worker."""
RECORD_EVERY_S = 1.0
"""Finished shards are recorded in the catalog in groups, at most this long after they finish (a
DuckDB commit costs ~20 ms; a shard finished but not yet recorded is still found by its footer)."""
SHUFFLE_BUCKET_BYTES = 8 * 1024 * 1024
"""Target size of one shuffle bucket: decoded bytes of the columns the shuffle holds
(:func:`~llm_assets.tasks.scatter_columns`, token ids as Parquet's 32-bit values), which bounds the
memory of one gather task. At 8 MB a gather task peaks ~40 MB above a worker's idle size (16 MB:
~80 MB); n_buckets is part of the scatter fingerprint, so changing it never reuses stale buckets."""
PADDED_TOKENS_PER_BUCKET = 4 * 1024 * 1024
"""Target size of one shuffle bucket of the ``padded`` layout, in padded tokens (rows times
``seq_len``), so that short documents padded to a long ``seq_len`` are bounded too: a padded
gather of 4 Mi padded tokens peaks ~120 MB above idle (ids, mask and labels, and the Parquet
writer's pages). Before, only the token bytes counted: 3,000 documents of ~30 tokens padded to
32,768 went to one gather task, which peaked at 1.4 GB (now 24 buckets, 518 MB for the whole
in-process run, 394 MB at ``seq_len`` 1024)."""
DEDUP_MEMORY_LIMIT = "1GB"
"""DuckDB's memory cap for the global dedup step; past it DuckDB spills to the warehouse."""


class Runner(Protocol):
    """What stages need from compute: a backend or the Dagster compute resource."""

    def run(
        self, fn: Callable[[Any], Any], tasks: Sequence[Any], on_result: OnResult | None = ...
    ) -> list[Any]: ...


class StageInputError(ValueError):
    """Bad input or config found before any work starts; the message names the file or field."""


class WarehouseWriteError(OSError):
    """The warehouse folder cannot be written (full disk, read-only or not a folder). Shards that
    were finished stay recorded and are reused by the next run; nothing partial is recorded."""


_WRITE_ERRORS = ("No space left", "Permission denied", "Read-only file system", "Disk quota")


def ensure_writable(folder: Path) -> None:
    """Fail before any work, with the folder named, when a stage cannot write its output."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-probe-{uuid.uuid4().hex[:8]}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        raise WarehouseWriteError(
            f"the warehouse folder {str(folder)!r} is not writable: {exc.strerror or exc}"
        ) from exc


def run_on_backend(
    ctx: StageContext, asset: str, folder: Path, fn: Any, tasks: Any, on_result: Any = None
) -> None:
    """Run shard tasks; a task that failed because the disk is full or read-only becomes a
    :class:`WarehouseWriteError` that says so (other failures pass through unchanged)."""
    try:
        ctx.compute.run(fn, tasks, on_result)
    except ShardTaskFailed as exc:
        if any(marker in exc.error for marker in _WRITE_ERRORS):
            raise WarehouseWriteError(
                f"{asset}: cannot write to the warehouse folder {str(folder)!r} (shard "
                f"{exc.key!r}: {exc.error}). Free space or fix permissions and run again: "
                "finished shards are kept and reused, nothing partial was recorded"
            ) from exc
        raise


@dataclass
class StageContext:
    """Everything a stage needs besides its own config."""

    warehouse_root: Path
    catalog: Catalog
    compute: Runner
    log: Logger
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    backend: str = "in_process"


@dataclass
class StageReport:
    """The outcome of one stage, for asset metadata and the benchmark."""

    asset: str
    fingerprint: str
    folder: str
    shards: list[ShardRecord]
    computed: int
    skipped: int
    seconds: float
    reject_reasons: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rows_in(self) -> int:
        return sum(s.rows_in for s in self.shards)

    @property
    def rows_out(self) -> int:
        return sum(s.rows_out for s in self.shards)

    @property
    def rows_rejected(self) -> int:
        return sum(s.rows_rejected for s in self.shards)


@dataclass(frozen=True)
class _Planned:
    shard: str
    output_path: str
    rejects_path: str | None
    input_fingerprint: str
    input_shards: tuple[str, ...]
    task: Any
    sources: tuple[ShardRecord, ...] = ()
    """The upstream shards the task reads, checked against the catalog before it runs."""


def _check_sources(asset: str, sources: Iterable[ShardRecord]) -> None:
    """Refuse to compute from upstream shard files that changed since they were recorded (their
    checksum is not the catalog's): the output would be named, and reused ever after, as if
    computed from the recorded ones (before: a shard edited or cut by hand, then a downstream
    asset materialized on its own, poisoned that asset for good, every check passing). The
    upstream asset, materialized again, computes such shards again from its own input."""
    # Once per file: the parts of a big upstream shard all name it.
    unique = {source.path: source for source in sources}.values()
    bad = [source for source in unique if not _unchanged(source, source.path)]
    if bad:
        upstream = bad[0].asset
        raise StageInputError(
            f"{asset}: {len(bad)} {upstream} shard file(s) changed or damaged since they were "
            f"recorded (checksum differs from the catalog's, or the rejects file is gone): "
            f"{[source.path for source in bad[:3]]}; materialize {upstream} again first (it "
            f"computes them again), then {asset}"
        )


def _spec_config(spec: Any) -> dict[str, Any]:
    return asdict(spec) if hasattr(spec, "__dataclass_fields__") else dict(spec)


OPTIONS_ADDED_UNSET = ("chat_field", "chat_template", "chat_answers", "decontam")
"""Spec options added after warehouses were written: left unset (None) they are not part of a
stage's config or fingerprint, so such warehouses keep their folders and reuse every shard."""


def spec_fields(spec: Any) -> dict[str, Any]:
    """A spec's fields as its stage's config and fingerprint see them (see
    :data:`OPTIONS_ADDED_UNSET`)."""
    fields = asdict(spec)
    for name in OPTIONS_ADDED_UNSET:
        if name in fields and fields[name] is None:
            del fields[name]
    return fields


def _execute(
    ctx: StageContext,
    *,
    asset: str,
    stage_fp: str,
    folder: Path,
    config: dict[str, Any],
    planned: Sequence[_Planned],
    fn: Callable[[Any], ShardStats],
    extra: dict[str, Any] | None = None,
    materialize: bool = True,
    started: float | None = None,
) -> StageReport:
    """Skip finished shards, run the rest on the backend, record everything in the catalog.

    ``materialize=False`` records the shards but leaves the asset's current output (and its SQL
    views) alone: for an intermediate phase of a stage. ``started`` (``time.time()``) is when a
    stage of several phases began, so that its seconds, its catalog record and its summary line
    cover every phase, not only this last one."""
    started = time.time() if started is None else started
    code_version = STAGE_CODE_VERSIONS[asset]
    config_json = _json(config)
    ensure_writable(folder)
    remove_stale_temporaries(folder)
    known = {(r.shard, r.input_fingerprint): r for r in ctx.catalog.stage_shards(asset, stage_fp)}
    records: dict[int, ShardRecord] = {}
    todo: list[int] = []
    recovered: list[ShardRecord] = []
    changed: list[str] = []
    for i, plan in enumerate(planned):
        done_for = completed_input_fingerprint(plan.output_path)
        if done_for is None and Path(plan.output_path).exists():
            changed.append(plan.shard)  # there, but its footer does not read: cut or damaged
        if done_for == plan.input_fingerprint:
            record = known.get((plan.shard, plan.input_fingerprint))
            if record is not None and not _unchanged(record, plan.output_path):
                changed.append(plan.shard)
                todo.append(i)
                continue
            if record is None:
                # Written by a run killed before it could record the shard: record it now.
                record = _record_from_footer(
                    asset, stage_fp, plan, config_json, code_version, ctx.run_id
                )
                recovered.append(record)
            records[i] = record
        else:
            todo.append(i)
    _check_sources(asset, (source for i in todo for source in planned[i].sources))
    if changed:
        ctx.log.warning(
            f"{asset}: {len(changed)} finished shard file(s) changed or damaged since they were "
            f"recorded (checksum differs from the catalog's, or the rejects file is gone), "
            f"computed again: {changed[:5]}"
        )
    if recovered:
        ctx.catalog.record_shards(recovered)
        ctx.log.info(f"{asset}: {len(recovered)} finished shard(s) recovered from their footers")
    if records:
        ctx.log.info(f"{asset}: {len(records)} of {len(planned)} shard(s) already complete, reused")
    ctx.log.info(f"{asset}: computing {len(todo)} shard(s) on {ctx.backend}")
    done = 0
    parts: dict[str, float] = {}
    unrecorded: list[ShardRecord] = []
    last_recorded = time.monotonic()

    def record_finished() -> None:
        nonlocal last_recorded
        ctx.catalog.record_shards(unrecorded)
        unrecorded.clear()
        last_recorded = time.monotonic()

    def on_result(j: int, stats: ShardStats) -> None:
        nonlocal done, parts
        parts = add_parts(parts, stats.parts)
        plan = planned[todo[j]]
        record = ShardRecord(
            asset=asset,
            fingerprint=stage_fp,
            shard=plan.shard,
            path=stats.path,
            rejects_path=stats.rejects_path,
            rows_in=stats.rows_in,
            rows_out=stats.rows_out,
            rows_rejected=stats.rows_rejected,
            bytes=stats.bytes,
            checksum=stats.checksum,
            input_fingerprint=plan.input_fingerprint,
            input_shards=plan.input_shards,
            config=config_json,
            code_version=code_version,
            run_id=ctx.run_id,
            seconds=stats.seconds,
        )
        records[todo[j]] = record
        unrecorded.append(record)
        if time.monotonic() - last_recorded >= RECORD_EVERY_S:
            record_finished()
        done += 1
        ctx.log.info(
            f"{asset}: shard {plan.shard} done ({done}/{len(todo)}): {stats.rows_in} in, "
            f"{stats.rows_out} out, {stats.rows_rejected} rejected, {stats.seconds:.2f} s"
        )

    try:
        run_on_backend(ctx, asset, folder, fn, [planned[i].task for i in todo], on_result)
    finally:
        record_finished()  # a failed run keeps what it finished
    # A worker killed mid-shard leaves its temporary files; its retry wrote new ones.
    if stale := remove_stale_temporaries(folder):
        ctx.log.info(f"{asset}: removed {stale} temporary file(s) of interrupted attempts")
    ordered = [records[i] for i in range(len(planned))]
    report = StageReport(
        asset=asset,
        fingerprint=stage_fp,
        folder=str(folder),
        shards=ordered,
        computed=len(todo),
        skipped=len(planned) - len(todo),
        seconds=0.0,
        extra=dict(extra or {}),
    )
    report.extra[SECONDS_BY_PART] = _rounded_parts(
        add_parts(report.extra.get(SECONDS_BY_PART, {}), parts)
    )
    for record in ordered:
        for key, value in shard_stats(record.path).items():
            report.extra[key] = report.extra.get(key, 0) + value
    finished = time.time()
    report.seconds = finished - started
    if not materialize:
        return report
    ctx.catalog.record_materialization(
        materialization_id=f"{ctx.run_id}:{asset}",
        asset=asset,
        fingerprint=stage_fp,
        run_id=ctx.run_id,
        backend=ctx.backend,
        config=config,
        code_version=code_version,
        started_at=started,
        finished_at=finished,
        shards=ordered,
        shards_skipped=report.skipped,
        extra=report.extra,
    )
    report.reject_reasons = reject_reason_counts(ctx.catalog, asset)
    ctx.log.info(
        f"{asset}: {report.rows_in} rows in, {report.rows_out} out, {report.rows_rejected} "
        f"rejected in {report.seconds:.2f} s"
    )
    return report


def _rounded_parts(parts: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 4) for k, v in parts.items()}


def _catalog_session(fn: Callable[..., StageReport]) -> Callable[..., StageReport]:
    """Run a whole stage on one catalog connection (see :meth:`Catalog.session`)."""

    @functools.wraps(fn)
    def wrapper(ctx: StageContext, *args: Any, **kwargs: Any) -> StageReport:
        with ctx.catalog.session():
            return fn(ctx, *args, **kwargs)

    return wrapper


def shard_stats(path: str) -> dict[str, int | float]:
    """The additive statistics a shard wrote into its footer (empty for most stages)."""
    raw = read_footer_metadata(path).get(STATS)
    return json.loads(raw) if raw else {}


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _unchanged(record: ShardRecord, path: str) -> bool:
    """Whether a finished shard's file still has the checksum its catalog row recorded (and its
    rejects file, if it has one, is still there), so that a file damaged, edited or deleted since
    is computed again rather than reused (and its damage handed to the next stage). XXH3 over a
    file the run just read is ~0.1 s per GB."""
    if record.rejects_path and not Path(record.rejects_path).exists():
        return False  # its rejects are lost: computed again, so no reject goes missing
    legacy = not record.checksum.startswith(f"{CHECKSUM_ALGORITHM}:")  # a bare SHA-256
    try:
        return (file_sha256(path) if legacy else file_checksum(path)) == record.checksum
    except OSError:
        return False


def _record_from_footer(
    asset: str, stage_fp: str, plan: _Planned, config_json: str, code_version: str, run_id: str
) -> ShardRecord:
    """Rebuild a shard's catalog row from the file itself (the catalog may have missed it when a
    run was killed between writing the shard and recording it)."""
    meta = read_footer_metadata(plan.output_path)
    rows_out = pq.read_metadata(plan.output_path).num_rows
    rows_rejected = int(meta.get(ROWS_REJECTED, 0))
    return ShardRecord(
        asset=asset,
        fingerprint=stage_fp,
        shard=plan.shard,
        path=plan.output_path,
        rejects_path=plan.rejects_path if rows_rejected else None,
        rows_in=int(meta.get(ROWS_IN, rows_out)),
        rows_out=rows_out,
        rows_rejected=rows_rejected,
        bytes=os.path.getsize(plan.output_path),
        checksum=file_checksum(plan.output_path),
        input_fingerprint=meta[INPUT_FINGERPRINT],
        input_shards=plan.input_shards,
        config=config_json,
        code_version=code_version,
        run_id=run_id,
    )


def reject_reason_counts(catalog: Catalog, asset: str) -> dict[str, int]:
    """Rejects per reason over the asset's current shards (SQL over the rejects view)."""
    rows = catalog.query(
        f"SELECT reason, count(*) FROM {asset}_rejects GROUP BY reason ORDER BY 2 DESC, 1"
    )
    return {reason: int(n) for reason, n in rows}


def _config_difference(ours: str, theirs: str) -> str:
    """The settings two recorded configs (JSON) differ in, as ``key: ours -> theirs``."""
    try:
        mine, other = json.loads(ours), json.loads(theirs)
    except ValueError:
        return f"this run's {ours}, that run's {theirs}"
    if not isinstance(mine, dict) or not isinstance(other, dict):
        return f"this run's {ours}, that run's {theirs}"
    keys = sorted(k for k in mine.keys() | other.keys() if mine.get(k) != other.get(k))
    if not keys:
        return "another code version"
    return "; ".join(f"{k}: this run's {mine.get(k)!r}, that run's {other.get(k)!r}" for k in keys)


def _upstream(ctx: StageContext, asset: str) -> list[ShardRecord]:
    """The current shards of ``asset``, which this stage reads, after checking that they are
    what this run built. Runs take turns per step, not per run, so another run (a manual run
    beside a sensor run) may have materialized ``asset``, or a stage before it, in between; if
    its config differs from this run's (another input folder, preset, tokenizer...), reading on
    would build this run's step on the other run's data, unnoticed (every check passes). That
    fails here, saying so. Only stages this run materialized itself are compared."""
    shards = ctx.catalog.current_shards(asset)
    if not shards:
        raise StageInputError(
            f"{asset} has no shards in the catalog {ctx.catalog.path}: materialize it first"
        )
    chain = PIPELINE_ASSETS[: PIPELINE_ASSETS.index(asset) + 1]
    for earlier, (ours, latest) in ctx.catalog.materialization_states(chain, ctx.run_id).items():
        if ours is None or latest.run_id == ctx.run_id:
            continue
        if (latest.fingerprint, latest.config) != (ours.fingerprint, ours.config):
            raise StageInputError(
                f"{earlier} was materialized again by run {latest.run_id} with another config "
                f"({_config_difference(ours.config, latest.config)}) after this run "
                f"materialized it: this step would read data built from that run's {earlier}, "
                "not this run's. Run this run again; runs with different configs share the "
                "warehouse's current outputs, so run them one after the other, or give each "
                "its own warehouse root"
            )
    missing = [s.path for s in shards if not Path(s.path).exists()]
    if missing:
        raise StageInputError(
            f"{asset} shard file(s) recorded in the catalog are gone: {missing[:3]}; "
            f"materialize {asset} again"
        )
    return shards


# --- raw_documents --------------------------------------------------------------------------------
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
    ``data_root``, a folder or file, a symlink included, that resolves outside the data root.
    """
    root = Path(input_dir)
    if data_root is not None:
        try:
            inside(root, data_root, "input folder")
        except PathEscapeError as exc:
            raise StageInputError(str(exc)) from exc
    if not root.is_dir():
        raise StageInputError(f"input folder {str(root)!r} does not exist or is not a folder")
    files = []
    skipped: list[str] = []
    walk = _walk_input_folder(root, data_root, skipped)
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
            if data_root is not None:
                inside(path, data_root, "input file")
            detect_format(str(path))
        except ValueError as exc:
            raise StageInputError(str(exc)) from exc
        if not os.access(path, os.R_OK):
            raise StageInputError(f"input file {str(path)!r} is not readable")
        files.append((path, rel.as_posix()))
    skipped = sorted(
        name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        for name in skipped
    )
    if ignored is not None:
        ignored.extend(skipped)
    if not files:
        named = f" (not read, as their names start with . or _: {skipped[:5]})" if skipped else ""
        raise StageInputError(f"input folder {str(root)!r} holds no input files{named}")
    return files


def _walk_input_folder(
    root: Path, data_root: Path | None, ignored: list[str]
) -> Iterator[tuple[Path, PurePosixPath]]:
    """Every entry under ``root`` that is not a folder, as (path through the links,
    relative name), by :func:`list_input_files`' rule for links: first the tree reached without
    a link, then the symlinked folders found in it (in sorted order), then those found in them,
    and so on; a folder already read is not read again. A symlinked folder that resolves outside
    ``data_root`` raises :class:`StageInputError`. Entries named with an
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
                        f"input folder {str(folder)!r} cannot be read: {exc.strerror or exc}"
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
                        if data_root is not None:
                            try:
                                inside(path, data_root, "input folder")
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
    ``rows_per_shard`` rows, whole row groups: :func:`~llm_assets.tasks.row_group_parts`);
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
    With ``data_root``, the input folder and every file in it must resolve inside it."""
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
            ranges = [None]  # read whole, as before .json files were cut: same fingerprint
        groups = _parquet_parts(path, rows_per_shard) if fmt == "parquet" else [None]
        if len(groups) > 1:
            ranges = [None] * len(groups)
        for chunk, line_range in enumerate(ranges):
            shard = f"{_safe_name(rel)}-{chunk:05d}"
            byte_range = (line_range[0], line_range[1]) if line_range else None
            row_groups = groups[chunk] if len(groups) > 1 else None
            # A whole file (row_groups None) keeps the input fingerprint it always had; a UTF-16
            # or UTF-32 one gets its own (before it was transcoded, every record was a reject).
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


def _top_reasons(reasons: dict[str, int], n: int = 3) -> str:
    ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    text = ", ".join(f"{reason}: {count}" for reason, count in ranked[:n])
    return text + (f", and {len(ranked) - n} other reason(s)" if len(ranked) > n else "")


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
            if record.rejects_path and Path(record.rejects_path).exists():
                column = pq.read_table(record.rejects_path, columns=["reason"])["reason"]
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


# --- normalize / tokenize / filter ----------------------------------------------------------------
def _run_map_stage(
    ctx: StageContext,
    *,
    asset: str,
    upstream: str,
    kernel: Callable[[Any, Any], Any],
    spec: Any,
    config: dict[str, Any],
    metadata: dict[str, str] | None = None,
    materialize: bool = True,
    split_big_shards: bool = False,
    extra: dict[str, Any] | None = None,
) -> StageReport:
    """One task per upstream shard, its output shard keyed like it (``extra``: what the
    materialization shows besides the shards' counts). With ``split_big_shards``
    (the stage after ``raw_documents``), an upstream shard of more rows than the raw stage's
    ``rows_per_shard`` (one big input file that could not be cut when read) is cut into parts
    of whole row groups (:func:`~llm_assets.tasks.row_group_parts`), one task and one output
    shard each, keyed ``<upstream key>.p<part>``; every stage after follows them one to one."""
    stage_fp = fingerprint(asset, STAGE_CODE_VERSIONS[asset], config)
    folder = stage_dir(ctx.warehouse_root, asset, stage_fp)
    planned = []
    split = 0
    for source in _upstream(ctx, upstream):
        parts: list[tuple[int, int] | None] = [None]
        if split_big_shards and source.rows_out > (limit := _rows_per_shard(source)):
            try:
                footer = pq.read_metadata(source.path)
            except (OSError, pa.ArrowException):
                _check_sources(asset, [source])  # damaged since recorded: says what to do
                raise
            ranges = row_group_parts(footer, limit)
            if len(ranges) > 1:
                parts = list(ranges)
                split += 1
        for i, groups in enumerate(parts):
            key = source.shard if groups is None else f"{source.shard}.p{i:05d}"
            # An unsplit shard keeps the input fingerprint of releases that never split.
            input_fp = fingerprint(source.checksum, *(() if groups is None else (groups,)))
            out = str(folder / shard_file_name(key))
            rej = str(folder / "rejects" / shard_file_name(key))
            task = MapTask(
                key=key,
                input_path=source.path,
                output_path=out,
                rejects_path=rej,
                input_fingerprint=input_fp,
                kernel=kernel,
                spec=spec,
                metadata=tuple(sorted((metadata or {}).items())),
                row_groups=groups,
            )
            planned.append(_Planned(key, out, rej, input_fp, (source.path,), task, (source,)))
    if split:
        ctx.log.info(
            f"{asset}: {split} big {upstream} shard(s) cut into parts of whole row groups, "
            f"{len(planned)} shard(s) in all"
        )
    return _execute(
        ctx,
        asset=asset,
        stage_fp=stage_fp,
        folder=folder,
        config=config,
        planned=planned,
        fn=run_map,
        extra=extra,
        materialize=materialize,
    )


def _rows_per_shard(raw: ShardRecord) -> int:
    """The ``rows_per_shard`` a raw shard was ingested with (its recorded config)."""
    try:
        value = json.loads(raw.config).get("rows_per_shard")
    except (ValueError, AttributeError):
        value = None
    return value if isinstance(value, int) and value >= 1 else DEFAULT_ROWS_PER_SHARD


@_catalog_session
def run_normalized_documents(ctx: StageContext, spec: NormalizeSpec) -> StageReport:
    """Normalize the text of every raw shard."""
    report = _run_map_stage(
        ctx,
        asset=NORMALIZED_DOCUMENTS,
        upstream=RAW_DOCUMENTS,
        kernel=normalize_table,
        spec=spec,
        config=asdict(spec),
        split_big_shards=True,
    )
    _refuse_nothing_kept(ctx, report)
    return report


def tokenizer_metadata(spec: TokenizerSpec) -> dict[str, str]:
    """The tokenizer's identity, stored in every shard footer from tokenization onwards."""
    tok = spec.identity()
    return {
        f"{TOKENIZER_META}name": tok.name,
        f"{TOKENIZER_META}engine": tok.engine,
        f"{TOKENIZER_META}fingerprint": tok.fingerprint,
        f"{TOKENIZER_META}vocab_size": str(tok.vocab_size),
        f"{TOKENIZER_META}eos_id": "" if tok.eos_id is None else str(tok.eos_id),
        f"{TOKENIZER_META}pad_id": str(tok.pad_id),
    }


@_catalog_session
def run_tokenized_documents(ctx: StageContext, spec: TokenizerSpec) -> StageReport:
    """Tokenize every normalized shard; the tokenizer's name and fingerprint go in the footer."""
    meta = tokenizer_metadata(spec)
    # The fingerprint of the vocabulary, not only its name, decides whether shards are reused.
    config = {**spec_fields(spec), "tokenizer_fingerprint": meta[f"{TOKENIZER_META}fingerprint"]}
    template = chat_template_text(spec)
    if template is not None:
        # The template's text, not its name: the built-in one may change between releases, and
        # a tokenizer folder's own is read from a file its fingerprint does not cover.
        config["chat_template_sha256"] = hashlib.sha256(template.encode()).hexdigest()
        # 2: the learned tokens end with the template's end of a turn (1: the answer alone).
        # 3: learned_spans (earlier answers of chat_answers: all), and the prompt rendered from
        # the messages as they are (control tokens marked only to check they are not written).
        config["chat_completion"] = 3
    config.pop("threads", None)
    report = _run_map_stage(
        ctx,
        asset=TOKENIZED_DOCUMENTS,
        upstream=NORMALIZED_DOCUMENTS,
        kernel=tokenize_table,
        spec=spec,
        config=config,
        metadata=meta,
    )
    report.extra["tokens"] = int(
        ctx.catalog.query(f"SELECT coalesce(sum(n_tokens), 0) FROM {TOKENIZED_DOCUMENTS}")[0][0]
    )
    report.extra["tokenizer"] = meta[f"{TOKENIZER_META}name"]
    report.extra["tokenizer_fingerprint"] = meta[f"{TOKENIZER_META}fingerprint"]
    _refuse_nothing_kept(ctx, report)
    return report


@_catalog_session
def run_filtered_documents(ctx: StageContext, spec: FilterSpec | LengthFilterSpec) -> StageReport:
    """Apply the document filters to every tokenized shard; then, with deduplication on, remove
    exact and near duplicates across every shard and every earlier run (three phases: filter and
    annotate per shard, decide globally in DuckDB, drop per shard)."""
    started = time.time()
    if isinstance(spec, LengthFilterSpec):
        spec = FilterSpec(length=spec)
    config = spec_fields(spec)
    if spec.flagged is not None and spec.flagged.path:
        # The list's content, not only its path, decides whether shards are reused.
        config["flagged_words_sha256"] = file_sha256(spec.flagged.path)
    decontam_extra: dict[str, Any] = {}
    if spec.decontam is not None:
        decontam, config["decontam"], decontam_extra = _decontam(ctx, spec.decontam)
        spec = replace(spec, decontam=decontam)
    if not spec.dedup:
        report = _run_map_stage(
            ctx,
            asset=FILTERED_DOCUMENTS,
            upstream=TOKENIZED_DOCUMENTS,
            kernel=filter_table,
            spec=spec,
            config=config,
            extra=decontam_extra,
        )
        _refuse_nothing_kept(ctx, report)
        return report
    annotated = _run_map_stage(
        ctx,
        asset=FILTERED_DOCUMENTS,
        upstream=TOKENIZED_DOCUMENTS,
        kernel=filter_table,
        spec=spec,
        config={**config, "phase": "annotate"},
        materialize=False,
    )
    stage_fp = fingerprint(FILTERED_DOCUMENTS, STAGE_CODE_VERSIONS[FILTERED_DOCUMENTS], config)
    folder = stage_dir(ctx.warehouse_root, FILTERED_DOCUMENTS, stage_fp)
    ctx.log.info(f"{FILTERED_DOCUMENTS}: deduplicating {annotated.rows_out} documents globally")
    outcome = _resolve_duplicates(ctx, annotated, spec, folder)
    drops, drops_path = outcome.drops, outcome.path
    ctx.log.info(
        f"{FILTERED_DOCUMENTS}: {outcome.exact_removed} exact and {outcome.near_removed} near "
        f"duplicate(s) in {outcome.near_clusters} cluster(s) ({outcome.candidate_pairs} candidate "
        f"pairs) found in {outcome.seconds:.2f} s"
    )
    per_shard: dict[str, list[str]] = {}
    for shard, doc_id, reason, value in zip(
        drops["shard"].to_pylist(),
        drops["doc_id"].to_pylist(),
        drops["reason"].to_pylist(),
        drops["value"].to_pylist(),
        strict=True,
    ):
        per_shard.setdefault(shard, []).append(f"{doc_id}\0{reason}\0{value}")
    planned = []
    for source in annotated.shards:
        input_fp = fingerprint(source.checksum, per_shard.get(source.shard, []))
        out = str(folder / shard_file_name(source.shard))
        rej = str(folder / "rejects" / shard_file_name(source.shard))
        task = DedupApplyTask(
            key=source.shard,
            input_path=source.path,
            input_rejects_path=source.rejects_path,
            drops_path=drops_path,
            output_path=out,
            rejects_path=rej,
            input_fingerprint=input_fp,
        )
        planned.append(_Planned(source.shard, out, rej, input_fp, (source.path,), task, (source,)))
    extra = {
        "exact_duplicates": outcome.exact_removed,
        "near_duplicates": outcome.near_removed,
        "near_duplicate_clusters": outcome.near_clusters,
        "near_duplicate_candidate_pairs": outcome.candidate_pairs,
        "dedup_seconds": round(outcome.seconds, 3),
        "filter_seconds": round(annotated.seconds, 3),
        **decontam_extra,
        SECONDS_BY_PART: annotated.extra[SECONDS_BY_PART],  # the annotate phase's, then apply's
    }
    report = _execute(
        ctx,
        asset=FILTERED_DOCUMENTS,
        stage_fp=stage_fp,
        folder=folder,
        config=config,
        planned=planned,
        fn=run_dedup_apply,
        extra=extra,
        started=started,  # all three phases, not only the last
    )
    _refuse_nothing_kept(ctx, report)
    return report


def _documents_normalization(ctx: StageContext) -> NormalizeSpec:
    """How the documents ``filtered_documents`` reads were normalized, by their lineage: the
    config recorded with the ``normalized_documents`` shards the current tokenized shards were
    made from (not the latest normalization, which a run of that asset alone may have changed
    since). Without lineage (a catalog that lost it), the latest materialization's config; the
    default preset if there is none. Decontamination normalizes the eval sets alike, PII
    redaction excepted (eval sets are public text)."""
    sources = sorted(
        {
            path
            for shard in ctx.catalog.current_shards(TOKENIZED_DOCUMENTS)
            for path in shard.input_shards
        }
    )
    configs = [
        str(config)
        for (config,) in ctx.catalog.query(
            "SELECT DISTINCT CAST(config AS VARCHAR) FROM shards "
            "WHERE asset = ? AND list_contains(?, path) ORDER BY 1",
            [NORMALIZED_DOCUMENTS, sources],
        )
    ]
    if len(configs) > 1:
        ctx.log.warning(
            f"{FILTERED_DOCUMENTS}: the tokenized documents come from {len(configs)} "
            "normalized_documents configs; decontamination normalizes the eval sets like the "
            "first of them"
        )
    if not configs:
        states = ctx.catalog.materialization_states([NORMALIZED_DOCUMENTS], ctx.run_id)
        if NORMALIZED_DOCUMENTS not in states:
            return NormalizeSpec()
        ours, latest = states[NORMALIZED_DOCUMENTS]
        configs = [(ours or latest).config]
    recorded = json.loads(configs[0])
    default = NormalizeSpec()
    return NormalizeSpec(
        preset=recorded.get("preset", default.preset),
        unicode_form=recorded.get("unicode_form", default.unicode_form),
        strip_html=bool(recorded.get("strip_html", default.strip_html)),
    )


def _decontam(
    ctx: StageContext, spec: DecontamSpec
) -> tuple[DecontamSpec, dict[str, Any], dict[str, Any]]:
    """The decontamination spec with the documents' normalization, built into its n-gram index
    here, before any shard (a bad eval set fails the run, named); its part of the stage config
    (the eval files by name and content, so an edited eval set filters again and a moved one
    does not); and the counts the materialization shows."""
    spec = replace(spec, normalize=_documents_normalization(ctx))
    started = time.time()
    try:
        index = eval_index(spec)
    except EvalSetError as exc:
        raise StageInputError(f"filtered_documents.config.decontaminate: {exc}") from exc
    ctx.log.info(
        f"{FILTERED_DOCUMENTS}: decontaminating against {len(spec.files)} eval file(s): "
        f"{index.records} records, {index.texts} texts, of which {index.checked} have "
        f"{spec.min_ngram}+ words and are checked ({index.short} shorter are not), "
        f"{len(index.hashes)} distinct n-grams of {list(index.lengths)} words; read in "
        f"{time.time() - started:.2f} s"
    )
    config = {
        **asdict(spec),
        "files": [[name, file_checksum(path)] for path, name in spec.files],
    }
    extra = {
        "decontaminate_eval_files": len(spec.files),
        "decontaminate_eval_texts": index.texts,
        "decontaminate_eval_texts_checked": index.checked,
        "decontaminate_eval_ngrams": len(index.hashes),
    }
    return spec, config, extra


class NothingKeptError(StageInputError):
    """A stage after ``raw_documents`` had documents but kept none (or ``training_batches`` got
    none): training would run zero steps. Raised after the stage's shards and rejects are
    recorded, so the rejects can be queried (``<asset>_rejects``)."""


_SETTING_OF_REASON = {
    "empty_after_normalize": "normalized_documents.config.preset (or strip_html)",
    "pii_density": "normalized_documents.config.pii / pii_max_density",
    "missing_prompt_field": (
        "tokenized_documents.config.prompt_template (the fields it names) or chat_template "
        "(its conversation, in raw_documents.config.chat_field)"
    ),
    "chat_template_error": "tokenized_documents.config.chat_template",
    "special_token_in_chat": "tokenized_documents.config.chat_template (and the tokenizer)",
    "too_few_tokens": "filtered_documents.config.min_tokens",
    "too_many_tokens": "filtered_documents.config.max_tokens",
    CONTAMINATED: "filtered_documents.config.decontaminate (the eval sets, ngram, min_ngram)",
    "wrong_language": "filtered_documents.config.language.languages (or enabled: false)",
    "low_language_score": "filtered_documents.config.language.min_score (or enabled: false)",
    "missing_label": "filtered_documents.config.label_field",
    "unmapped_label": "filtered_documents.config.label_mapping",
    "flagged_words": "filtered_documents.config.flagged_words (or enabled: false)",
    "exact_duplicate": "filtered_documents.config.dedup.exact",
    "near_duplicate": "filtered_documents.config.dedup.near",
}
"""The setting to look at when a reject reason takes every document; the Gopher quality and
repetition reasons are many (``too_few_words``, ``dup_line_ratio``...): their blocks are named
by prefix in :func:`_setting_of`."""


def _setting_of(reason: str) -> str:
    if reason in _SETTING_OF_REASON:
        return _SETTING_OF_REASON[reason]
    if reason.startswith(("dup_", "top_")):
        return "filtered_documents.config.repetition (or enabled: false)"
    return "filtered_documents.config.quality (or enabled: false)"


def _refuse_nothing_kept(ctx: StageContext, report: StageReport) -> None:
    """Raise :class:`NothingKeptError` when documents came in and the stage rejected all of
    them (a language list that excludes the corpus, a prompt template naming fields the rows
    lack, bounds no document meets...), naming the reject counts by reason and the setting of
    the top one (before: the run succeeded, with a batches folder of no file)."""
    if report.rows_in == 0 or report.rows_out > 0:
        return
    reasons = report.reject_reasons or {"(unknown)": report.rows_rejected}
    top = max(reasons.items(), key=lambda item: (item[1], item[0]))[0]
    raise NothingKeptError(
        f"{report.asset}: no document kept: all {report.rows_in} document(s) were rejected "
        f"({_top_reasons(reasons, 5)}), so training would run zero steps. Look at "
        f"{_setting_of(top)} ({top}). Every reject is recorded: SELECT source_file, "
        f"source_line, reason, value FROM {report.asset}_rejects (catalog {ctx.catalog.path})."
    )


def _holds(path: Path, table: pa.Table) -> bool:
    """Whether the Parquet file at ``path`` reads and holds exactly ``table`` (the dedup
    decisions, a few bytes per duplicate: reading them back costs little, and a file damaged
    since, cut or with flipped bytes, is caught instead of misapplied)."""
    try:
        return pq.read_table(path).equals(table)
    except (OSError, pa.ArrowException):
        return False


def _dedup_scope(ctx: StageContext, filter_fingerprint: str) -> str:
    """Whose history the dedup step reads and extends: the filter stage's config and those of
    the stages before it (their current folders). Text normalized another way is another corpus
    with another notion of "first seen" (before: the filter config alone, so a warehouse that
    had run the default preset, then ``ascii_lower``, kept another copy of a duplicate than a
    fresh warehouse running ``ascii_lower``)."""
    upstream = [
        sorted({s.fingerprint for s in ctx.catalog.current_shards(asset)})
        for asset in (RAW_DOCUMENTS, NORMALIZED_DOCUMENTS, TOKENIZED_DOCUMENTS)
    ]
    return fingerprint(filter_fingerprint, upstream)


def _resolve_duplicates(
    ctx: StageContext, annotated: StageReport, spec: FilterSpec, folder: Path
) -> DedupOutcome:
    """The global step: DuckDB over every annotated shard (and the ``dedup_seen`` table of earlier
    runs) decides the duplicates; the decisions are written atomically to one Parquet file named
    by their content, which every apply task reads its own shard's part of.

    Its outcome is a function of the annotated shards (their checksums), the dedup settings, the
    scope and that scope's history. An unchanged re-run finds the same shards and the history as
    the last step left it (that step recorded every document in it): the memo
    (:data:`DEDUP_MEMO`) then gives the outcome without running the step (at 500K rows, 3 s and
    ~0.8 GB of memory in DuckDB saved on every scheduled run that found nothing new)."""
    started = time.perf_counter()
    exact = spec.exact_dedup or ExactDedupSpec(enabled=False)
    near = spec.near_dedup or NearDedupSpec(enabled=False)
    scope = _dedup_scope(ctx, annotated.fingerprint)
    memo_path = folder / "dedup" / DEDUP_MEMO
    spill = Path(ctx.warehouse_root) / ".duckdb_tmp"
    spill.mkdir(parents=True, exist_ok=True)
    with ctx.catalog.connect() as con:

        def key() -> str:
            """The step's inputs, the scope's history as it stands now included."""
            shards = [(s.shard, s.checksum) for s in annotated.shards]
            history = _seen_state(con, scope)
            return fingerprint(scope, asdict(exact), asdict(near), shards, history)

        if (memo := _dedup_memo(memo_path, key())) is not None:
            ctx.log.info(
                f"{FILTERED_DOCUMENTS}: the annotated shards and the dedup history are those of "
                "the last dedup step: its decisions reused"
            )
            return replace(memo, seconds=time.perf_counter() - started)
        con.execute(f"SET temp_directory = '{spill.as_posix()}'")
        con.execute(f"SET memory_limit = '{DEDUP_MEMORY_LIMIT}'")
        outcome = resolve_duplicates(
            con, [(s.shard, s.path) for s in annotated.shards], exact, near, scope=scope
        )
        after = key()
    path = folder / "dedup" / f"drops-{_drops_digest(outcome.drops)}.parquet"
    remove_stale_temporaries(path.parent)  # what a killed run left
    if not _holds(path, outcome.drops):
        # Missing, or damaged since (it is named by its content, so it is simply written again).
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = temporary_path(path)
        pq.write_table(outcome.drops, tmp)
        os.replace(tmp, path)
    outcome = replace(outcome, path=str(path))
    _write_dedup_memo(memo_path, after, outcome)
    return outcome


def _seen_state(con: Any, scope: str) -> list[Any]:
    """How many documents the dedup history of ``scope`` holds, its last run number and a digest
    of its (document, run) rows, so that any edit of it shows (a catalog without the history, or
    with an earlier release's, has none to compare)."""
    try:
        count, last, digest = con.execute(
            # One string per row: hash(a, b) combines linearly, so swapping the runs of two
            # sets of odd sizes gave the same xor.
            "SELECT count(*), coalesce(max(run), 0), "
            "coalesce(bit_xor(hash(doc_id || '#' || run::VARCHAR)), 0) "
            f"FROM {SEEN_TABLE} WHERE scope = ?",
            [scope],
        ).fetchone()
    except duckdb.Error:
        return ["none"]
    return [int(count), int(last), int(digest)]


def _drops_digest(drops: pa.Table) -> str:
    """The content name of a dedup decisions table."""
    # Column by column: a list per column serializes ~3x faster than a dict per row.
    return fingerprint([drops[name].to_pylist() for name in drops.column_names])


def _dedup_memo(path: Path, key: str) -> DedupOutcome | None:
    """The outcome the memo at ``path`` holds if it was recorded for ``key`` and its decisions
    file is still there, whole (it reads back to the content its name says), else None."""
    try:
        memo = json.loads(path.read_text())
        if memo.get("key") != key:
            return None
        drops_path = Path(memo["path"])
        drops = pq.read_table(drops_path)
        if drops_path.name != f"drops-{_drops_digest(drops)}.parquet":
            return None
        return DedupOutcome(
            drops=drops,
            exact_removed=int(memo["exact_removed"]),
            near_removed=int(memo["near_removed"]),
            near_clusters=int(memo["near_clusters"]),
            candidate_pairs=int(memo["candidate_pairs"]),
            seconds=0.0,
            path=str(drops_path),
        )
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return None


def _write_dedup_memo(path: Path, key: str, outcome: DedupOutcome) -> None:
    memo = {
        "key": key,
        "path": outcome.path,
        "exact_removed": outcome.exact_removed,
        "near_removed": outcome.near_removed,
        "near_clusters": outcome.near_clusters,
        "candidate_pairs": outcome.candidate_pairs,
    }
    tmp = temporary_path(path)
    tmp.write_text(json.dumps(memo, sort_keys=True))
    os.replace(tmp, path)


# --- training_batches -----------------------------------------------------------------------------
COMPLETE_MARKER = "_COMPLETE.json"
"""Written in a batches folder as the last step of a run that wrote and recorded all of it, and
removed before a run changes any of its files (as ``llm_assets.reader.COMPLETE_MARKER``, which
refuses a folder without it): so a folder a run stopped in the middle of, with only some of its
files, is never read as a whole set. Its content (:func:`_completion_marker`) is a function of the
folder's files, so a re-run writes the same bytes. Named with ``_`` like Spark's ``_SUCCESS``:
no reader takes it for a batch file, and input listings skip it."""


def shuffle_bucket_count(
    paths: Sequence[str],
    minimum: int = 1,
    padded_len: int = 0,
    text: bool = False,
    repeat: int = 1,
) -> int:
    """How many shuffle buckets the filtered shards at ``paths`` need: at least ``minimum``, and
    enough that none holds more than :data:`SHUFFLE_BUCKET_BYTES` of the columns the shuffle
    reads, nor (with ``padded_len``, the length every row is padded to) more than
    :data:`PADDED_TOKENS_PER_BUCKET` padded tokens. ``text``: the shuffle reads the text too
    (``augment``); ``repeat``: each document is there this many times (``augment_copies + 1``:
    the variants are held as their documents are), so both counts are multiplied by it.

    Counted from the footers (decoded sizes and row counts), not the files' sizes: the codec of
    the shards, and their text column unless ``text``, do not change the count."""
    total = repeat * sum(
        decoded_column_bytes(path, scatter_columns(pq.read_schema(path).names, text=text))
        for path in paths
    )
    buckets = -(-total // SHUFFLE_BUCKET_BYTES)
    if padded_len:
        rows = repeat * sum(pq.read_metadata(path).num_rows for path in paths)
        buckets = max(buckets, -(-rows * padded_len // PADDED_TOKENS_PER_BUCKET))
    return max(minimum, buckets)


@_catalog_session
def run_training_batches(
    ctx: StageContext,
    spec: BatchSpec,
    compression_level: int | None = None,
    megatron: bool = False,
) -> StageReport:
    """Shuffle globally with bounded memory (scatter to hash buckets, then sort each bucket) and
    pack or pad every (split, bucket) into one Parquet file.

    Unlike the document stages, whose shards are one per input shard and replaced one for one,
    the batch files are a set whose size follows the data (one per split and shuffle bucket), so
    their folder is named by the stage config *and* the upstream state (every filtered shard's
    checksum): ``training_batches/<fingerprint>/`` holds exactly one consistent set, a pure
    function of its name. Another upstream state writes another folder (never over this one's
    files, never beside them), and coming back to this one reuses it, catalog rows included. The
    scatter files are content-addressed too (``training_batches/_scatter/<shard>-<input>/``), so
    every batch config and upstream state shares those of the shards it has in common.

    The folder's :data:`COMPLETE_MARKER` is removed before the run writes anything into it and
    written as its very last step (after the catalog's record), so a run stopped mid-gather leaves
    a folder the reader refuses; a complete folder reused without its marker (an earlier release's)
    gets it, nothing recomputed."""
    started = time.time()
    asset = TRAINING_BATCHES
    upstream = _upstream(ctx, FILTERED_DOCUMENTS)
    if not sum(source.rows_out for source in upstream):
        raise NothingKeptError(
            f"{asset}: {FILTERED_DOCUMENTS} holds no document, so the batches would be empty "
            "and training would run zero steps: see why in the catalog (SELECT stage, reason, "
            f"count(*) FROM rejects GROUP BY ALL ORDER BY 3 DESC; catalog {ctx.catalog.path}), "
            "and materialize the stages before it again"
        )
    # The padded layout pads every row to seq_len (pad_to: longest, to at most seq_len): short
    # documents grow many times over, so its buckets are also bounded in padded tokens.
    n_buckets = shuffle_bucket_count(
        [s.path for s in upstream],
        spec.shuffle_buckets,
        padded_len=spec.seq_len if spec.layout == "padded" else 0,
        text=spec.augment != "none",
        repeat=spec.augment_copies + 1,
    )
    config = {**asdict(spec), "compression_level": compression_level}
    if spec.balance == "none":  # the folders of runs without it keep their names
        del config["balance"], config["max_copies"]
    if spec.augment == "none":  # likewise
        del config["augment"], config["augment_copies"], config["augment_rate"]
    if spec.mixture is None:  # likewise
        del config["mixture"]
    mixed = spec.mixture is not None
    if spec.layout == "packed" and spec.overflow == "truncate":
        config["cut_eos"] = "masked"  # the EOS after a cut SFT document is not learned
    # What the scatter of one shard depends on besides its bytes; with every shard's checksum,
    # what every batch file depends on besides the config (the files' source_fingerprint).
    scatter_fp_base = scatter_settings(
        spec.seed, spec.validation_fraction, n_buckets, spec.augment != "none", mixed
    )
    all_fp = fingerprint([s.checksum for s in upstream], *scatter_fp_base)
    stage_fp = fingerprint(asset, STAGE_CODE_VERSIONS[asset], config, all_fp)
    folder = stage_dir(ctx.warehouse_root, asset, stage_fp)
    scatter_root = stage_dir(ctx.warehouse_root, asset, SCATTER_FOLDER)
    meta = carried_metadata(upstream[0].path)
    schema = pq.read_schema(upstream[0].path)
    token_type = schema.field(INPUT_IDS).type.value_type
    eos_id = _eos_id(meta, spec, megatron, sft=PROMPT_TOKENS in schema.names)
    if spec.layout == "packed" and LABEL in schema.names:
        raise StageInputError(label_needs_a_padded_layout(spec.layout))
    labelled = LABEL in schema.names
    if spec.balance != "none" and not labelled:
        raise StageInputError(balance_needs_labels(spec.balance))
    if spec.balance != "none" and megatron:
        raise StageInputError(balance_without_megatron(spec.balance))
    if mixed and megatron:
        raise StageInputError(MIXTURE_WITHOUT_MEGATRON)
    augment_tokenizer = _augment_tokenizer(spec, schema.names, meta, megatron)

    if spec.layout == "bucketed" and spec.bucket_boundaries is None:
        spec = replace(spec, bucket_boundaries=_derived_boundaries(ctx, spec))
        ctx.log.info(f"{asset}: length buckets from the data: {spec.bucket_boundaries}")
    created_at = _created_at(ctx)
    tokenizer_extra = {
        # What a training script passes to the reader's expected_tokenizer_fingerprint.
        "tokenizer": meta.get(f"{TOKENIZER_META}name", ""),
        "tokenizer_fingerprint": meta.get(f"{TOKENIZER_META}fingerprint", ""),
    }
    if stale := remove_stale_temporaries(scatter_root):
        ctx.log.info(f"{asset}: removed {stale} scatter folder(s) of interrupted runs")
    if (done := _complete_batches(ctx, stage_fp, folder, megatron, all_fp)) is not None:
        # The folder of this upstream state and config is complete: reuse it as it is, without
        # the shuffle, whose intermediate files may be gone (``_scatter/`` is safe to delete).
        records, recorded = done
        ctx.log.info(f"{asset}: {folder} is complete for this input and config: reused as it is")
        planned = [
            _Planned(r.shard, r.path, r.rejects_path, r.input_fingerprint, r.input_shards, None)
            for r in records
        ]
        extra: dict[str, Any] = {
            **{
                k: recorded[k]
                for k in _RECORDED_BATCH_EXTRAS
                if k in recorded and (megatron or k != "megatron")
            },
            "scatter_seconds": 0.0,
            "shuffle_buckets": n_buckets,
            "source_fingerprint": all_fp,
            **tokenizer_extra,
            SECONDS_BY_PART: {},
        }
    else:
        # This run writes into the folder (its batch files, its Megatron export): it is not one
        # complete set until the end, so its marker goes first, and comes back last.
        if _unmark_complete(folder):
            ctx.log.info(f"{asset}: {folder} is written again: its {COMPLETE_MARKER} removed")
        scatter_started = time.perf_counter()
        scatter_tasks = []
        scatter_dirs = []
        for source in upstream:
            input_fp = fingerprint(source.checksum, *scatter_fp_base)
            name = scatter_folder_name(
                source.shard,
                source.checksum,
                spec.seed,
                spec.validation_fraction,
                n_buckets,
                text=spec.augment != "none",
                sources=mixed,
            )
            out_dir = str(scatter_root / name)
            scatter_dirs.append(out_dir)
            if not scatter_done(out_dir, input_fp, labelled=labelled, sources=mixed):
                _check_sources(asset, [source])
                scatter_tasks.append(
                    ScatterTask(source.shard, source.path, out_dir, input_fp, spec, n_buckets)
                )
        ctx.log.info(
            f"{asset}: shuffling into {n_buckets} bucket(s); scattering {len(scatter_tasks)} of "
            f"{len(upstream)} shard(s)"
        )
        ensure_writable(scatter_root)
        scatter_parts: dict[str, float] = {}

        def scattered(_: int, stats: dict[str, Any]) -> None:
            nonlocal scatter_parts
            scatter_parts = add_parts(scatter_parts, stats.get("parts", {}))

        run_on_backend(ctx, asset, scatter_root, run_scatter, scatter_tasks, scattered)
        scatter_seconds = time.perf_counter() - scatter_started

        counts: Counter[str] = Counter()
        lengths: Counter[int] = Counter()
        label_counts: dict[str, Counter[str]] = {}
        file_counts: dict[str, dict[str, list[int]]] = {}
        for directory in scatter_dirs:
            manifest = read_scatter_manifest(directory)
            counts.update(manifest["counts"])
            lengths.update({int(n): d for n, d in manifest["lengths"].items()})
            for key, per_label in manifest.get("labels", {}).items():
                label_counts.setdefault(key, Counter()).update(per_label)
            for key, per_file in manifest.get("sources", {}).items():
                held = file_counts.setdefault(key, {})
                for name, (docs, tokens) in per_file.items():
                    was = held.setdefault(name, [0, 0])
                    was[0] += int(docs)
                    was[1] += int(tokens)
        pieces = scatter_pieces(scatter_dirs)
        prompted = PROMPT_TOKENS in schema.names
        if spec.mixture is not None:
            quotas, planned_mixture = _mixture_quotas(
                ctx, spec.mixture, spec, file_counts, n_buckets, pieces, prompted
            )
        else:
            quotas = _balance_quotas(ctx, spec, label_counts, n_buckets, pieces, prompted)
        planned = []
        for split in SPLITS:
            for bucket in range(n_buckets):
                key = scatter_key(split, bucket)
                if not counts.get(key):
                    continue
                out = str(folder / shard_file_name(key))
                file_meta = {
                    k.decode(): v.decode()
                    for k, v in batch_schema_metadata(
                        spec=spec,
                        tokenizer_name=meta.get(f"{TOKENIZER_META}name", ""),
                        tokenizer_fingerprint=meta.get(f"{TOKENIZER_META}fingerprint", ""),
                        vocab_size=int(meta.get(f"{TOKENIZER_META}vocab_size", "0") or 0),
                        split=split,
                        input_fingerprint=all_fp,
                        created_at=created_at,
                    ).items()
                }
                rej = str(folder / "rejects" / shard_file_name(key))
                task = GatherTask(
                    key=key,
                    split=split,
                    bucket=bucket,
                    pieces=tuple(pieces[key]),
                    output_path=out,
                    input_fingerprint=all_fp,
                    spec=spec,
                    eos_id=eos_id,
                    pad_id=int(meta[f"{TOKENIZER_META}pad_id"]),
                    token_type=str(token_type),
                    metadata=tuple(sorted({**meta, **file_meta}.items())),
                    compression_level=compression_level,
                    rejects_path=rej,
                    balance=quotas.get(bucket, ()) if split == "train" else (),
                    repeat=spec.augment_copies + 1 if split == "train" else 1,
                    tokenizer=augment_tokenizer if split == "train" else None,
                )
                planned.append(
                    _Planned(key, out, rej, all_fp, tuple(s.path for s in upstream), task)
                )
        extra = {
            "scatter_seconds": scatter_seconds,
            "shuffle_buckets": n_buckets,
            "source_fingerprint": all_fp,
            **tokenizer_extra,
            SECONDS_BY_PART: scatter_parts,
            # Kept in the catalog's record, so that reusing the folder later reports them too.
            "length_histogram": length_histogram(
                np.array(list(lengths), np.int64),
                spec.seq_len,
                weights=np.array(list(lengths.values())),
            ),
        }
        if spec.bucket_boundaries:
            extra["bucket_boundaries"] = list(spec.bucket_boundaries)
        if labelled:
            extra["label_documents_in"] = _per_split(label_counts)
        if spec.mixture is not None:
            extra["mixture_planned"] = planned_mixture
        if megatron:
            # From the scatter files, like the gather: before it, so that the catalog's record of
            # the materialization holds the export's paths and its time. In the batches' own folder,
            # so it belongs to one upstream state as they do.
            filled = [
                s for s in SPLITS if any(k.startswith(f"{s}-") and n for k, n in counts.items())
            ]
            extra["megatron"] = _write_megatron(
                ctx, folder, tuple(scatter_dirs), n_buckets, meta, all_fp, filled
            )
    report = _execute(
        ctx,
        asset=asset,
        stage_fp=stage_fp,
        folder=folder,
        config=config,
        planned=planned,
        fn=run_gather,
        extra=extra,
        started=started,  # every phase (and the planning), not only the gather
    )
    # Last: written and recorded, the folder is marked complete (or left as marked, when reused).
    if _mark_complete(folder, stage_fp, all_fp, report.shards) and done is not None:
        ctx.log.info(
            f"{asset}: {folder} marked complete ({COMPLETE_MARKER}): it was complete, and its "
            "marker missing (written by a release before the markers, or a run stopped before "
            "marking) or out of date"
        )
    report.extra["documents"] = report.rows_in
    report.extra["sequences"] = report.rows_out
    if labelled:
        report.extra["label_documents"] = _label_documents(report)
        ctx.log.info(f"{asset}: documents per class label: {report.extra['label_documents']}")
    if spec.mixture is not None:
        _report_mixture(ctx, report, spec.mixture)
    _log_augment(ctx, report, spec)
    _warn_lost_tokens(ctx, report, spec)
    ctx.log.info(
        f"{asset}: {extra['scatter_seconds']:.2f} s of the {report.seconds:.2f} s were scattering"
    )
    return report


def label_needs_a_padded_layout(layout: str) -> str:
    """Why ``filtered_documents.config.label_field`` and the ``packed`` layout do not go
    together: a packed block joins several documents, so it has no ``label`` column and every
    label would be dropped without a word."""
    return (
        f"{FILTERED_DOCUMENTS}.config.label_field is set (labelled data), but "
        f"{TRAINING_BATCHES}.config.layout is {layout!r}: a packed block joins several documents "
        "and has no label column, so every label would be dropped. Set "
        f"{TRAINING_BATCHES}.config.layout to 'padded' or 'bucketed' (one document per row, "
        "with its label), or unset label_field"
    )


def balance_needs_labels(balance: str) -> str:
    """Why ``balance`` needs labelled documents: it evens out the classes of a ``label`` column."""
    return (
        f"{TRAINING_BATCHES}.config.balance is {balance!r}, but {FILTERED_DOCUMENTS} has no "
        "label column: balance evens out the class labels of the train split. Set "
        f"{FILTERED_DOCUMENTS}.config.label_field (and label_mapping), or balance: none"
    )


def balance_without_megatron(balance: str) -> str:
    """Why ``balance`` and the Megatron export do not go together."""
    return (
        f"{TRAINING_BATCHES}.config.balance is {balance!r} and megatron is true: the Megatron-LM "
        "export holds every document once, without labels, so it would not be balanced like "
        "the Parquet batches. Set megatron: false, or balance: none"
    )


def _augment_tokenizer(
    spec: BatchSpec, columns: Sequence[str], meta: Mapping[str, str], megatron: bool
) -> TokenizerSpec | None:
    """``augment``: the tokenizer that encodes the variants of the copies, the one that made the
    documents' ids (named in their footers); None without ``augment``. Refused (a
    :class:`StageInputError` naming the settings): SFT and chat rows (a variant of an answer
    would no longer answer its prompt), the Megatron export (it holds every document once), and
    a tokenizer whose files changed since ``tokenized_documents`` ran (the variants' ids would
    not be those of the documents')."""
    if spec.augment == "none":
        return None
    asset = TRAINING_BATCHES
    if PROMPT_TOKENS in columns:
        raise StageInputError(augment_without_prompts(spec.augment))
    if megatron:
        raise StageInputError(augment_without_megatron(spec.augment))
    name = meta.get(f"{TOKENIZER_META}name", "")
    engine = meta.get(f"{TOKENIZER_META}engine", "auto")
    recorded = meta.get(f"{TOKENIZER_META}fingerprint", "")
    try:
        tokenizer = TokenizerSpec(name=name, engine=engine if engine in ENGINES else "auto")
        found = tokenizer.identity().fingerprint
    except TokenizerError as err:
        raise StageInputError(
            f"{asset}.config.augment needs the tokenizer that made the documents' ids "
            f"({name!r}) to encode the variants, and it cannot be built: {err}"
        ) from err
    if found != recorded:
        raise StageInputError(
            f"{asset}.config.augment: the tokenizer {name!r} has changed since "
            f"{TOKENIZED_DOCUMENTS} ran (fingerprint {found}, the documents' ids were made by "
            f"{recorded}): the variants' ids would not match the documents'. Materialize "
            f"{TOKENIZED_DOCUMENTS} again, or set augment: none"
        )
    return tokenizer


def augment_without_prompts(augment: str) -> str:
    """Why ``augment`` and SFT or chat rows do not go together."""
    return (
        f"{TRAINING_BATCHES}.config.augment is {augment!r}, but the documents are SFT or chat "
        "rows (a prompt before the text): a word edit of an answer would no longer answer its "
        f"prompt. Set augment: none, or unset {TOKENIZED_DOCUMENTS}.config.prompt_template and "
        "chat_template (balance: oversample repeats SFT rows as they are)"
    )


def augment_without_megatron(augment: str) -> str:
    """Why ``augment`` and the Megatron export do not go together."""
    return (
        f"{TRAINING_BATCHES}.config.augment is {augment!r} and megatron is true: the "
        "Megatron-LM export holds every document once, so it would not hold the variants the "
        "Parquet batches do. Set megatron: false, or augment: none"
    )


AUGMENT_UNCHANGED_WARNING = 0.5
"""Share of the variants left as their document (too few words for their edit) above which
``augment`` logs a WARNING: text without spaces between words (Chinese, Japanese) is one word."""


def _log_augment(ctx: StageContext, report: StageReport, spec: BatchSpec) -> None:
    """``augment``: how many variants each edit made, logged; a WARNING when most copies could
    not be varied (:data:`AUGMENT_UNCHANGED_WARNING`)."""
    if spec.augment == "none":
        return
    made = int(report.extra.get("augmented", 0))
    edits = {
        key.removeprefix("augmented_"): int(value)
        for key, value in sorted(report.extra.items())
        if key.startswith("augmented_")
    }
    ctx.log.info(
        f"{TRAINING_BATCHES}: augment {spec.augment}: {made:,} train rows are variants of their "
        "documents"
        + (" (" + ", ".join(f"{edit} {n:,}" for edit, n in edits.items()) + ")" if edits else "")
    )
    unchanged = edits.get("unchanged", 0)
    if made and unchanged > AUGMENT_UNCHANGED_WARNING * made:
        ctx.log.warning(
            f"{TRAINING_BATCHES}: augment {spec.augment}: {unchanged:,} of the {made:,} copies "
            "are their documents unchanged: too few words to edit (a word is a run of "
            "non-space characters, so text without spaces between words is one word)"
        )


def _per_split(label_counts: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """Documents per class label of each split, from counts per (split, bucket) key."""
    totals: dict[str, Counter[str]] = {split: Counter() for split in SPLITS}
    for key, per_label in label_counts.items():
        totals[key.rsplit("-", 1)[0]].update(per_label)
    return {split: dict(sorted(c.items())) for split, c in totals.items()}


BALANCE_COPIES_WARNING = 10
"""Copies of one document above which ``balance: oversample`` logs a WARNING (set
``max_copies``), and the share (1/this) of the train split below which an undersample does."""


def _balance_quotas(
    ctx: StageContext,
    spec: BatchSpec,
    label_counts: Mapping[str, Mapping[str, int]],
    n_buckets: int,
    pieces: Mapping[str, Sequence[Any]],
    prompted: bool,
) -> dict[int, tuple[LabelQuota, ...]]:
    """The class quotas of each train bucket (``spec.balance``), logged per class, with a WARNING
    for what it cannot even out or evens out at a cost: one class, classes only in validation,
    more than :data:`BALANCE_COPIES_WARNING` copies of a document, an undersample keeping less
    than a tenth of the split.

    The classes counted are those of the documents the layout uses: with prompts (SFT and chat
    rows), each train bucket is read once more to leave out its ``prompt_fills_sequence``
    rejects (:func:`~llm_assets.tasks.trainable_label_counts`), else the scatter's counts are
    those."""
    if spec.balance == "none":
        return {}
    train: dict[int, Mapping[str, int]] = {}
    for bucket in range(n_buckets):
        key = scatter_key("train", bucket)
        if prompted and key in pieces:
            table = read_scatter_pieces(pieces[key])
            train[bucket] = {} if table is None else trainable_label_counts(table, spec)
        else:
            train[bucket] = label_counts.get(key, {})
    quotas = balance_quotas(train, spec.balance, spec.max_copies)
    classes = {q.label: q for bucket in quotas.values() for q in bucket}
    given = _per_split(label_counts)
    asset = TRAINING_BATCHES
    ctx.log.info(
        f"{asset}: balance {spec.balance}: train documents per class "
        + ", ".join(
            f"{label!r} {classes[label].documents:,} -> {classes[label].target:,}"
            for label in sorted(classes)
        )
        + (
            " (the documents the layout uses: prompt_fills_sequence rejects left out)"
            if prompted
            else ""
        )
    )
    if len(classes) < 2:
        ctx.log.warning(
            f"{asset}: balance {spec.balance}: the train split has "
            f"{len(classes)} class(es) ({', '.join(map(repr, sorted(classes)))}): nothing to "
            "even out"
        )
    if only := sorted(set(given["validation"]) - set(classes)):
        ctx.log.warning(
            f"{asset}: class(es) {', '.join(map(repr, only))} only in validation: no train "
            "document to balance"
        )
    most = {label: -(-q.target // q.documents) for label, q in classes.items() if q.documents}
    if spec.balance == "oversample" and most and max(most.values()) > BALANCE_COPIES_WARNING:
        heavy = sorted((label for label, n in most.items() if n > BALANCE_COPIES_WARNING))
        ctx.log.warning(
            f"{asset}: balance oversample repeats each train document of "
            + ", ".join(
                f"{label!r} up to {most[label]} times ({classes[label].documents:,} documents)"
                for label in heavy
            )
            + ": the model would fit those few examples; set max_copies to cap it"
        )
    documents = sum(q.documents for q in classes.values())
    kept = sum(q.target for q in classes.values())
    if spec.balance == "undersample" and kept * BALANCE_COPIES_WARNING < documents:
        ctx.log.warning(
            f"{asset}: balance undersample keeps {kept:,} of {documents:,} train documents: "
            "the smallest class decides; oversample (with max_copies) keeps them all"
        )
    return quotas


MIXTURE_WITHOUT_MEGATRON = (
    f"{TRAINING_BATCHES}.config.mixture is set and megatron is true: the Megatron-LM export "
    "holds every document once, so it would not be mixed like the Parquet batches. Megatron-LM "
    "blends sources itself (--data-path with a weight before each prefix): set megatron: false, "
    "or leave mixture.sources empty"
)
"""Why ``mixture`` and the Megatron export do not go together."""


def _mixture_quotas(
    ctx: StageContext,
    mixture: MixtureSpec,
    spec: BatchSpec,
    file_counts: Mapping[str, Mapping[str, Sequence[int]]],
    n_buckets: int,
    pieces: Mapping[str, Sequence[Any]],
    prompted: bool,
) -> tuple[dict[int, tuple[LabelQuota, ...]], dict[str, dict[str, Any]]]:
    """The quotas of each source of the mixture in each train bucket, and what they plan per
    source (its weight and share, its train documents and tokens, the documents it keeps and
    the tokens they are expected to hold), logged, with a WARNING where the mixture costs much:
    more than :data:`BALANCE_COPIES_WARNING` copies of a document, an undersample keeping less
    than a tenth of the split, a source left with no document, or ``max_copies`` keeping a source
    below its share.

    Every input file of the batches' documents must belong to a source, and every source must
    have train documents: else a :class:`StageInputError` names the files or the source. With
    prompts (SFT and chat rows), each train bucket is read once more to count only the documents
    the layout uses (:func:`~llm_assets.tasks.trainable`), as the balance of the classes does."""
    asset = TRAINING_BATCHES
    files: dict[str, int] = {}
    for per_file in file_counts.values():
        for name, (docs, _) in per_file.items():
            files[name] = files.get(name, 0) + int(docs)
    source_of = {name: mixture.source_of(name) for name in sorted(files)}
    if unmatched := [name for name, source in source_of.items() if source is None]:
        shown = ", ".join(repr(name) for name in unmatched[:5])
        more = f" and {len(unmatched) - 5} more" if len(unmatched) > 5 else ""
        raise StageInputError(
            f"{asset}.config.mixture: {sum(files[n] for n in unmatched):,} document(s) of "
            f"{len(unmatched)} input file(s) belong to no source: {shown}{more}. Every input "
            "file must belong to one: add it to a source's files (paths and patterns relative "
            "to the input folder; a last source with files: ['*'] holds every file left)"
        )
    train: dict[int, dict[str, int]] = {}
    tokens: dict[str, int] = {}
    for bucket in range(n_buckets):
        key = scatter_key("train", bucket)
        if prompted and key in pieces:
            table = read_scatter_pieces(pieces[key])
            per_file = {} if table is None else source_counts(trainable(table, spec))
        else:
            per_file = file_counts.get(key, {})
        held: dict[str, int] = {}
        for name, (docs, n_tokens) in per_file.items():
            source = source_of[name]
            assert source is not None
            held[source] = held.get(source, 0) + int(docs)
            tokens[source] = tokens.get(source, 0) + int(n_tokens)
        train[bucket] = held
    documents = {s.name: sum(b.get(s.name, 0) for b in train.values()) for s in mixture.sources}
    for source in mixture.sources:
        if documents[source.name]:
            continue
        given = [name for name, held_by in source_of.items() if held_by == source.name]
        named = [
            name
            for name in source_of
            if any(file_matches(pattern, name) for pattern in source.files)
        ]
        if not given and named:
            earlier = sorted({str(source_of[name]) for name in named})
            why = (
                f"its files ({', '.join(repr(n) for n in named[:5])}"
                f"{', ...' if len(named) > 5 else ''}) belong to the earlier source(s) "
                f"{earlier}, which name them too: a file belongs to the first source that names "
                f"it, so put {source.name!r} before them (a catch-all such as '*' goes last)"
            )
        elif given:
            why = (
                f"its {sum(files[n] for n in given):,} document(s) (in {len(given)} file(s)) are "
                "all in the validation split"
                + (" or fill their sequence with the prompt" if prompted else "")
            )
        else:
            known = ", ".join(repr(n) for n in sorted(files)[:5])
            why = (
                f"its files match none of the {len(files)} input file(s) the filtered documents "
                f"come from ({known}{', ...' if len(files) > 5 else ''}): check its files, and "
                "whether the filters rejected all of its documents (SELECT reason, count(*) FROM "
                "rejects WHERE source_file LIKE '<pattern>' GROUP BY ALL)"
            )
        raise StageInputError(
            f"{asset}.config.mixture: source {source.name!r} (files {list(source.files)}) has "
            f"no train document: {why}"
        )
    amounts = {
        name: tokens.get(name, 0) if mixture.by == "tokens" else n for name, n in documents.items()
    }
    if mixture.by == "tokens" and (empty := [n for n, a in amounts.items() if not a]):
        raise StageInputError(
            f"{asset}.config.mixture: source(s) {empty} have train documents but no token: "
            "weigh by documents (mixture.by: documents)"
        )
    targets = mixture_targets(documents, amounts, mixture)
    quotas = spread_quotas(train, targets)
    shares = mixture.shares
    amount_total = sum(amounts.values())
    expected = {name: amounts[name] * targets[name] / documents[name] for name in documents}
    expected_total = sum(expected.values()) or 1
    unit = "tokens" if mixture.by == "tokens" else "documents"
    planned = {
        source.name: {
            "weight": source.weight,
            "share": round(shares[source.name], 6),
            "train_documents": documents[source.name],
            "train_tokens": tokens.get(source.name, 0),
            "share_before": round(amounts[source.name] / amount_total, 6),
            "documents": targets[source.name],
            "expected_share": round(expected[source.name] / expected_total, 6),
        }
        for source in mixture.sources
    }
    ctx.log.info(
        f"{asset}: mixture {mixture.mode} by {mixture.by}: train "
        + ", ".join(
            f"{name!r} {p['train_documents']:,} documents ({p['share_before']:.1%} of the "
            f"{unit}) -> {p['documents']:,} ({p['expected_share']:.1%}, share {p['share']:.1%})"
            for name, p in planned.items()
        )
        + (
            " (the documents the layout uses: prompt_fills_sequence rejects left out)"
            if prompted
            else ""
        )
        + (
            f"; then every train document {spec.augment_copies + 1} times (augment_copies "
            f"{spec.augment_copies}: the shares stay)"
            if spec.augment_copies
            else ""
        )
    )
    most = {name: -(-targets[name] // documents[name]) for name in documents}
    if mixture.mode == "oversample" and max(most.values()) > BALANCE_COPIES_WARNING:
        heavy = sorted(name for name, n in most.items() if n > BALANCE_COPIES_WARNING)
        ctx.log.warning(
            f"{asset}: mixture oversample repeats each train document of "
            + ", ".join(
                f"{name!r} up to {most[name]} times ({documents[name]:,} documents)"
                for name in heavy
            )
            + ": the model would fit those few examples; set mixture.max_copies to cap it"
        )
    if mixture.max_copies is not None:
        capped = [n for n, p in planned.items() if p["expected_share"] < p["share"] - 0.005]
        if capped:
            ctx.log.warning(
                f"{asset}: mixture max_copies {mixture.max_copies} keeps "
                + ", ".join(
                    f"{n!r} at {planned[n]['expected_share']:.1%} (share {planned[n]['share']:.1%})"
                    for n in capped
                )
                + f" of the {unit}: more copies would be needed to reach the weights"
            )
    kept, given_total = sum(targets.values()), sum(documents.values())
    if mixture.mode == "undersample" and kept * BALANCE_COPIES_WARNING < given_total:
        ctx.log.warning(
            f"{asset}: mixture undersample keeps {kept:,} of {given_total:,} train documents: "
            "the source shortest of its share decides; mode: oversample (with max_copies) keeps "
            "them all"
        )
    if gone := [name for name, n in targets.items() if not n]:
        ctx.log.warning(
            f"{asset}: mixture leaves source(s) {gone} without a train document: their share "
            "is less than one document"
        )
    return quotas, planned


def _report_mixture(ctx: StageContext, report: StageReport, mixture: MixtureSpec) -> None:
    """The documents and tokens of each source in the train batch files (copies counted, before
    the layout cuts or pads), from their footers' statistics (so a reused folder reports them
    too), as ``mixture`` in the report, logged beside the shares the weights ask for."""
    held: dict[str, dict[str, int]] = {
        s.name: {"documents": 0, "tokens": 0} for s in mixture.sources
    }
    for key in list(report.extra):
        for prefix, count in ((MIXTURE_DOCUMENTS, "documents"), (MIXTURE_TOKENS, "tokens")):
            if key.startswith(prefix):
                name = key.removeprefix(prefix)
                held.setdefault(name, {"documents": 0, "tokens": 0})[count] = int(
                    report.extra.pop(key)
                )
    totals = {f: sum(h[f] for h in held.values()) or 1 for f in ("documents", "tokens")}
    shares = mixture.shares
    report.extra["mixture"] = {
        name: {
            "share": round(shares.get(name, 0.0), 6),
            "documents": h["documents"],
            "tokens": h["tokens"],
            "document_share": round(h["documents"] / totals["documents"], 6),
            "token_share": round(h["tokens"] / totals["tokens"], 6),
        }
        for name, h in held.items()
    }
    unit = "token_share" if mixture.by == "tokens" else "document_share"
    ctx.log.info(
        f"{TRAINING_BATCHES}: the train split's mixture by {mixture.by}: "
        + ", ".join(
            f"{name!r} {m[unit]:.1%} (share {m['share']:.1%}; {m['documents']:,} documents, "
            f"{m['tokens']:,} tokens)"
            for name, m in report.extra["mixture"].items()
        )
    )


def _label_documents(report: StageReport) -> dict[str, dict[str, int]]:
    """Documents per class label of each split in the batch files (copies counted): read from
    their ``label`` column, so a folder reused as it is reports them too."""
    totals: dict[str, Counter[str]] = {split: Counter() for split in SPLITS}
    for shard in report.shards:
        if not Path(shard.path).exists():
            continue
        column = pq.read_table(shard.path, columns=[LABEL])[LABEL]
        totals[shard.shard.rsplit("-", 1)[0]].update(label_counts(column))
    return {split: dict(sorted(c.items())) for split, c in totals.items()}


LOST_TOKENS_WARNING = 0.10
"""Share of the documents' tokens cut off (``truncated_tokens``) or dropped (``dropped_tokens``)
by the batches' layout above which ``training_batches`` logs a WARNING."""


def _warn_lost_tokens(ctx: StageContext, report: StageReport, spec: BatchSpec) -> None:
    """A WARNING when the layout left out more than :data:`LOST_TOKENS_WARNING` of the tokens
    it was given: documents cut to ``seq_len`` (layouts ``padded`` and ``bucketed``, and
    ``packed`` with ``overflow: truncate``), or the last partial blocks dropped
    (``drop_remainder``). The counts are in the metadata too, where nobody looks."""
    tokens = int(report.extra.get("tokens", 0))
    truncated = int(report.extra.get("truncated_tokens", 0))
    dropped = int(report.extra.get("dropped_tokens", 0))
    given = tokens + truncated + dropped
    report.extra["truncated_fraction"] = truncated / given if given else 0.0
    if given and truncated > LOST_TOKENS_WARNING * given:
        if spec.layout == "packed":
            why = f"overflow 'truncate' cuts every document to seq_len - 1 ({spec.seq_len - 1})"
            keep = "Overflow 'split' keeps them (a long document continues in the next block)"
        else:
            why = f"layout {spec.layout!r} keeps at most seq_len ({spec.seq_len}) of a document"
            keep = "Layout 'packed' keeps them (a long document continues in the next block)"
        ctx.log.warning(
            f"{TRAINING_BATCHES}: {truncated:,} of the documents' {given:,} tokens "
            f"({truncated / given:.0%}) were cut off and are not in the batches: {why}. "
            f"{keep}, or raise seq_len (see the length_histogram metadata)"
        )
    if given and dropped > LOST_TOKENS_WARNING * given:
        ctx.log.warning(
            f"{TRAINING_BATCHES}: {dropped:,} of the documents' {given:,} tokens "
            f"({dropped / given:.0%}) were dropped with drop_remainder (the last partial block "
            "of each file): set drop_remainder to false to keep them, or lower shuffle_buckets"
        )


_RECORDED_BATCH_EXTRAS = (
    "length_histogram",
    "bucket_boundaries",
    "megatron",
    "label_documents_in",
    "mixture_planned",
)
"""What a reuse of a complete batches folder reports from the catalog's record of the run that
wrote it (computed from the shuffle's files, which the reuse does not read)."""


def _complete_batches(
    ctx: StageContext, stage_fp: str, folder: Path, megatron: bool, input_fp: str
) -> tuple[list[ShardRecord], dict[str, Any]] | None:
    """The shards and recorded extras of the last materialization of this batches folder, when
    every file it recorded is still there as written (input fingerprint, :func:`_unchanged`) and,
    with ``megatron``, the export is complete; else None (the stage runs its phases)."""
    rows = ctx.catalog.query(
        "SELECT shards, extra FROM materializations WHERE asset = ? AND fingerprint = ? "
        "ORDER BY finished_at DESC LIMIT 1",
        [TRAINING_BATCHES, stage_fp],
    )
    if not rows:
        return None
    shards, extra = rows[0]
    records = ctx.catalog.stage_shards(TRAINING_BATCHES, stage_fp)
    if len(records) != shards:
        return None
    for record in records:
        if completed_input_fingerprint(record.path) != record.input_fingerprint:
            return None
        if not _unchanged(record, record.path):
            return None
    recorded = json.loads(extra) if extra else {}
    if megatron and not all(
        megatron_done(prefix, input_fp) for prefix in recorded.get("megatron", {}).values()
    ):
        return None
    if megatron and not recorded.get("megatron"):
        return None
    return sorted(records, key=lambda r: _split_bucket(r.shard)), recorded


def _completion_marker(
    folder: Path, stage_fp: str, source_fp: str, records: Sequence[ShardRecord]
) -> dict[str, Any]:
    """What :data:`COMPLETE_MARKER` holds (the reader's ``COMPLETE_MARKER`` says how it is read):
    every batch file with its rows, bytes and checksum (from the catalog's records of files
    checked or just written), and each complete Megatron export (:func:`megatron_done`) with its
    files' sizes. No run id or time: a re-run that writes the same files writes the same marker
    (the catalog's materializations say which run wrote the folder)."""
    files = {}
    for record in records:
        path = Path(record.path)
        files[path.name] = {
            "rows": record.rows_out,
            "bytes": path.stat().st_size,
            "checksum": record.checksum,
        }
    exports = {}
    for split in SPLITS:
        prefix = folder / "megatron" / f"{split}_text_document"
        if megatron_done(prefix, source_fp):
            sidecar = json.loads(Path(f"{prefix}.json").read_text())
            exports[split] = {
                "prefix": prefix.relative_to(folder).as_posix(),
                "bin_bytes": Path(f"{prefix}.bin").stat().st_size,
                "idx_bytes": Path(f"{prefix}.idx").stat().st_size,
                "documents": sidecar.get("documents"),
                "tokens": sidecar.get("tokens"),
            }
    return {
        "format": 1,
        "asset": TRAINING_BATCHES,
        "fingerprint": stage_fp,
        "source_fingerprint": source_fp,
        "files": files,
        "megatron": exports,
    }


def _mark_complete(
    folder: Path, stage_fp: str, source_fp: str, records: Sequence[ShardRecord]
) -> bool:
    """Write the folder's :data:`COMPLETE_MARKER` unless it is there with this content (a reused
    folder keeps its marker as it is); True when written. Atomic as the shards are: a temporary
    name (:func:`temporary_path`, which ``remove_stale_temporaries`` clears after a kill), fsync,
    rename into place."""
    marker = _completion_marker(folder, stage_fp, source_fp, records)
    path = folder / COMPLETE_MARKER
    try:
        if json.loads(path.read_text()) == marker:
            return False
    except (OSError, ValueError):
        pass  # missing or unreadable: written below
    tmp = temporary_path(path)
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(marker, indent=1, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True


def _unmark_complete(folder: Path) -> bool:
    """Remove the folder's :data:`COMPLETE_MARKER` (before a run writes any of its files); True
    when there was one."""
    try:
        (folder / COMPLETE_MARKER).unlink()
    except FileNotFoundError:
        return False
    return True


def _split_bucket(key: str) -> tuple[int, int]:
    """(split index, bucket) of a gather shard key (:func:`~llm_assets.tasks.scatter_key`)."""
    split, _, bucket = key.rpartition("-")
    return SPLITS.index(split), int(bucket)


def _eos_id(meta: dict[str, str], spec: BatchSpec, megatron: bool, *, sft: bool) -> int | None:
    """The tokenizer's EOS id from the filtered shards' footer, or None when it has none; a
    :class:`StageInputError` before any batching work when the config needs one."""
    text = meta.get(f"{TOKENIZER_META}eos_id", "")
    if text:
        return int(text)
    needs = [
        why
        for wanted, why in (
            (spec.layout == "packed", "layout packed separates documents with it"),
            (megatron, "megatron: true ends every document with it"),
            (sft and spec.layout != "packed", "SFT rows in layout padded or bucketed end with it"),
        )
        if wanted
    ]
    if needs:
        name = meta.get(f"{TOKENIZER_META}name", "?")
        raise StageInputError(
            f"{TRAINING_BATCHES}: the tokenizer {name!r} has no EOS token, and "
            f"{'; '.join(needs)}: use a tokenizer that has one, or layout padded or bucketed "
            "(without megatron, and for plain text rather than SFT rows)"
        )
    return None


def _write_megatron(
    ctx: StageContext,
    folder: Path,
    scatter_dirs: tuple[str, ...],
    n_buckets: int,
    meta: dict[str, str],
    input_fp: str,
    splits: Sequence[str],
) -> dict[str, str]:
    """One Megatron-LM dataset per split of ``splits`` (those with documents) under
    ``<folder>/megatron/``, reused when complete. A split without documents gets none: Megatron
    cannot memory-map an empty ``.bin`` (with ``validation_fraction: 0``, no validation set).

    ``folder`` is the batches' folder, named by the upstream state like them: the export of
    another state goes to that state's folder, so no ``.bin`` of one state ever sits beside the
    ``.idx`` or sidecar of another."""
    tasks = []
    prefixes = {}
    if empty := [s for s in SPLITS if s not in splits]:
        ctx.log.info(f"{TRAINING_BATCHES}: no Megatron dataset for {empty}: no document")
    for split in splits:
        prefix = str(folder / "megatron" / f"{split}_text_document")
        prefixes[split] = prefix
        if not megatron_done(prefix, input_fp):
            tasks.append(
                MegatronTask(
                    key=f"megatron-{split}",
                    split=split,
                    n_buckets=n_buckets,
                    scatter_dirs=scatter_dirs,
                    prefix=prefix,
                    vocab_size=int(meta[f"{TOKENIZER_META}vocab_size"]),
                    eos_id=int(meta[f"{TOKENIZER_META}eos_id"]),  # checked by _eos_id
                    input_fingerprint=input_fp,
                )
            )
    ctx.log.info(f"{TRAINING_BATCHES}: writing {len(tasks)} Megatron dataset(s) (.bin/.idx)")
    remove_stale_temporaries(folder / "megatron")  # what a killed export left
    run_on_backend(ctx, TRAINING_BATCHES, folder / "megatron", run_megatron, tasks)
    return prefixes


def _derived_boundaries(ctx: StageContext, spec: BatchSpec) -> tuple[int, ...]:
    """Length-bucket bounds at evenly spaced quantiles of the filtered documents' lengths."""
    k = spec.length_buckets
    quantiles = [i / k for i in range(1, k)]
    row = ctx.catalog.query(
        f"SELECT quantile_cont(least(n_tokens, ?), ?::DOUBLE[]) FROM {FILTERED_DOCUMENTS}",
        [spec.seq_len, quantiles],
    )
    values = row[0][0] if row and row[0][0] is not None else []
    return derive_boundaries(values, spec.seq_len)


def _created_at(ctx: StageContext) -> str:
    """Reproducible creation time of the batches: ``SOURCE_DATE_EPOCH`` when set (the
    reproducible-builds convention), else the newest modification time of the input files, so a
    re-run on the same inputs writes byte-identical files."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch is None:
        mtimes = [
            Path(p).stat().st_mtime
            for shard in ctx.catalog.current_shards(RAW_DOCUMENTS)
            for p in shard.input_shards
            if Path(p).exists()
        ]
        epoch = str(int(max(mtimes, default=0)))
    stamp = datetime.fromtimestamp(int(epoch), tz=timezone.utc)
    return stamp.isoformat().replace("+00:00", "Z")
