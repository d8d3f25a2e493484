"""The stage engine: plan -> skip finished shards -> run the rest on a backend -> record.

Each stage's ``run_*`` function builds its planned shards and hands them to :func:`_execute`,
which returns a :class:`StageReport` the asset turns into metadata. The engine knows the warehouse,
the catalog and a compute backend; it knows no stage.

Restart rule: a planned shard is skipped when its output file exists and its footer names the same
input fingerprint; the folder it lives in is named by the stage fingerprint (config + code
version). So a killed run, run again, computes only what is missing. In a warehouse in object
storage only the catalog's record counts (with the object's size): an object a killed run wrote
but did not record is written again, never read.
"""

from __future__ import annotations

import functools
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow.parquet as pq

from llm_assets import storage
from llm_assets.compute.base import Logger, OnResult, ShardTaskFailed
from llm_assets.constants import PIPELINE_ASSETS, STAGE_CODE_VERSIONS
from llm_assets.stages.shard_io import ShardStats, add_parts
from llm_assets.warehouse.shards import (
    CHECKSUM_ALGORITHM,
    INPUT_FINGERPRINT,
    ROWS_IN,
    ROWS_REJECTED,
    STATS,
    completed_input_fingerprint,
    file_checksum,
    file_sha256,
    read_footer_metadata,
    remove_stale_temporaries,
)

if TYPE_CHECKING:  # workers import this module with their task; DuckDB is the driver's alone
    from llm_assets.warehouse.catalog import Catalog, ShardRecord

SECONDS_BY_PART = "seconds_by_part"
"""Report key (so also materialization metadata and catalog): seconds per part of the stage's
shard tasks (read, compute, write, commit: :data:`~llm_assets.stages.shard_io.PARTS`), summed
over the shards this run computed, in whichever processes ran them; with 2 workers busy they add
up to about twice the stage's wall time. Shards reused from an earlier run add nothing. What the
stage's wall time holds beyond them is the driver's share: planning, the catalog, waiting for
workers."""


RECORD_EVERY_S = 1.0
"""Finished shards are recorded in the catalog in groups, at most this long after they finish (a
DuckDB commit costs ~20 ms; a shard finished but not yet recorded is still found by its footer)."""
PROGRESS_EVERY_S = 2.0
"""At most one "shard done" line per this many seconds: a run of many quick shards logs its
progress, not a line (and a Dagster event) per shard; the stage's closing line gives the totals."""


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
    """Fail before any work, with the folder named, when a stage cannot write its output (in
    object storage: a probe object written and deleted, so a missing bucket, refused
    credentials or an unreachable endpoint fail the stage at once, naming the bucket)."""
    if storage.is_remote(str(folder)):
        probe_url = storage.join(folder, f"_write-probe-{uuid.uuid4().hex[:8]}")
        storage.write_bytes(probe_url, b"ok")
        storage.remove(probe_url)
        return
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

    warehouse_root: str | Path
    """A local folder or an object-storage URL (:func:`~llm_assets.storage.location_path`)."""
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
    computed from the recorded ones (else a shard edited or cut by hand, then a downstream asset
    materialized on its own, would poison that asset for good, every check passing). The
    upstream asset, materialized again, computes such shards again from its own input."""
    # Once per file: the parts of a big upstream shard all name it.
    unique = {source.path: source for source in sources}.values()
    sizes = _remote_sizes(unique)
    bad = [source for source in unique if not _unchanged(source, source.path, sizes)]
    if bad:
        upstream = bad[0].asset
        raise StageInputError(
            f"{asset}: {len(bad)} {upstream} shard file(s) changed or damaged since they were "
            f"recorded (checksum differs from the catalog's, or the rejects file is gone): "
            f"{[source.path for source in bad[:3]]}; materialize {upstream} again first (it "
            f"computes them again), then {asset}"
        )


OPTIONS_ADDED_UNSET = ("chat_field", "chat_template", "chat_answers")
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
    config_json = _json(config)
    ensure_writable(folder)
    remove_stale_temporaries(folder)
    records, todo = _skip_finished(ctx, asset, stage_fp, planned, config_json)
    ctx.log.info(f"{asset}: computing {len(todo)} shard(s) on {ctx.backend}")
    computed: dict[int, dict[str, Any]] = {}
    parts = _run_and_record(
        ctx, asset, stage_fp, folder, planned, todo, records, fn, config_json, computed
    )
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
    for i, record in enumerate(ordered):
        # A shard computed now reported its footer's statistics; a reused one's are read.
        stats = computed[i] if i in computed else shard_stats(record.path)
        for key, value in stats.items():
            report.extra[key] = report.extra.get(key, 0) + value
    finished = time.time()
    report.seconds = finished - started
    if materialize:
        _record_materialization(ctx, report, config, started, finished)
    return report


def _skip_finished(
    ctx: StageContext,
    asset: str,
    stage_fp: str,
    planned: Sequence[_Planned],
    config_json: str,
) -> tuple[dict[int, ShardRecord], list[int]]:
    """The planned shards already finished (by index: their catalog records, those a killed run
    left unrecorded rebuilt from their footers and recorded) and the indexes of those to compute:
    missing, of another input, or changed since recorded. Refuses upstream shards changed since
    recorded (:func:`_check_sources`) before any is computed."""
    code_version = STAGE_CODE_VERSIONS[asset]
    known = {(r.shard, r.input_fingerprint): r for r in ctx.catalog.stage_shards(asset, stage_fp)}
    records: dict[int, ShardRecord] = {}
    todo: list[int] = []
    recovered: list[ShardRecord] = []
    changed: list[str] = []
    sizes = _remote_sizes(known.values())
    for i, plan in enumerate(planned):
        if storage.is_remote(plan.output_path):
            # Recorded only once complete; what a killed run left unrecorded is never read.
            record = known.get((plan.shard, plan.input_fingerprint))
            if record is not None and _unchanged(record, plan.output_path, sizes):
                records[i] = record
            else:
                if record is not None:
                    changed.append(plan.shard)
                todo.append(i)
            continue
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
    return records, todo


def _run_and_record(
    ctx: StageContext,
    asset: str,
    stage_fp: str,
    folder: Path,
    planned: Sequence[_Planned],
    todo: Sequence[int],
    records: dict[int, ShardRecord],
    fn: Callable[[Any], ShardStats],
    config_json: str,
    computed: dict[int, dict[str, Any]],
) -> dict[str, float]:
    """Run the ``todo`` shards' tasks on the backend, adding each finished shard's record to
    ``records`` and to the catalog (in groups, :data:`RECORD_EVERY_S`; a failed run keeps what it
    finished), and its statistics (those its footer holds: ``ShardStats.extra``) to
    ``computed``; the seconds per part of the tasks, summed."""
    from llm_assets.warehouse.catalog import ShardRecord

    code_version = STAGE_CODE_VERSIONS[asset]
    done = 0
    parts: dict[str, float] = {}
    unrecorded: list[ShardRecord] = []
    last_recorded = last_progress = time.monotonic()

    def record_finished() -> None:
        nonlocal last_recorded
        ctx.catalog.record_shards(unrecorded)
        unrecorded.clear()
        last_recorded = time.monotonic()

    def on_result(j: int, stats: ShardStats) -> None:
        nonlocal done, parts, last_progress
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
            node=stats.node,
        )
        records[todo[j]] = record
        computed[todo[j]] = stats.extra
        unrecorded.append(record)
        if time.monotonic() - last_recorded >= RECORD_EVERY_S:
            record_finished()
        done += 1
        if done < len(todo) and time.monotonic() - last_progress >= PROGRESS_EVERY_S:
            last_progress = time.monotonic()
            ctx.log.info(
                f"{asset}: shard {plan.shard} done ({done}/{len(todo)}): {stats.rows_in} in, "
                f"{stats.rows_out} out, {stats.rows_rejected} rejected, {stats.seconds:.2f} s"
            )

    try:
        run_on_backend(ctx, asset, folder, fn, [planned[i].task for i in todo], on_result)
    finally:
        record_finished()  # a failed run keeps what it finished
    return parts


def _record_materialization(
    ctx: StageContext, report: StageReport, config: dict[str, Any], started: float, finished: float
) -> None:
    """Record the stage's outcome as its asset's current output, then its reject counts (the
    rejects view follows the current output) and its summary line."""
    asset = report.asset
    ctx.catalog.record_materialization(
        materialization_id=f"{ctx.run_id}:{asset}",
        asset=asset,
        fingerprint=report.fingerprint,
        run_id=ctx.run_id,
        backend=ctx.backend,
        config=config,
        code_version=STAGE_CODE_VERSIONS[asset],
        started_at=started,
        finished_at=finished,
        shards=report.shards,
        shards_skipped=report.skipped,
        extra=report.extra,
    )
    report.reject_reasons = reject_reason_counts(ctx.catalog, asset)
    ctx.log.info(
        f"{asset}: {report.rows_in} rows in, {report.rows_out} out, {report.rows_rejected} "
        f"rejected in {report.seconds:.2f} s"
    )


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


def _remote_sizes(records: Iterable[ShardRecord]) -> dict[str, int | None]:
    """The sizes of the files of ``records`` that are in object storage (outputs and rejects),
    one listing per folder (:func:`~llm_assets.storage.file_sizes`)."""
    paths = [p for r in records for p in (r.path, r.rejects_path) if p and storage.is_remote(p)]
    return storage.file_sizes(paths) if paths else {}


def _unchanged(record: ShardRecord, path: str, sizes: dict[str, int | None] | None = None) -> bool:
    """Whether a finished shard's file still has the checksum its catalog row recorded (and its
    rejects file, if it has one, is still there), so that a file damaged, edited or deleted since
    is computed again rather than reused (and its damage handed to the next stage). XXH3 over a
    file the run just read is ~0.1 s per GB. In object storage, where that would download every
    shard again, the object's size stands for its checksum (objects are written whole, so a cut
    object cannot appear; one replaced by another of the same size goes unseen)."""
    if storage.is_remote(path):

        def size(location: str) -> int | None:
            return sizes[location] if sizes and location in sizes else storage.file_size(location)

        if record.rejects_path and size(record.rejects_path) is None:
            return False
        return size(path) == record.bytes
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
    from llm_assets.warehouse.catalog import ShardRecord

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
    sizes = storage.file_sizes(s.path for s in shards)
    missing = [s.path for s in shards if sizes[s.path] is None]
    if missing:
        raise StageInputError(
            f"{asset} shard file(s) recorded in the catalog are gone: {missing[:3]}; "
            f"materialize {asset} again"
        )
    return shards


def _top_reasons(reasons: dict[str, int], n: int = 3) -> str:
    ranked = sorted(reasons.items(), key=lambda item: (-item[1], item[0]))
    text = ", ".join(f"{reason}: {count}" for reason, count in ranked[:n])
    return text + (f", and {len(ranked) - n} other reason(s)" if len(ranked) > n else "")
