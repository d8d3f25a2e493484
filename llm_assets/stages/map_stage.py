"""The one-shard-in, one-shard-out stages (normalize, tokenize, filter): driver and worker."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from llm_assets import storage
from llm_assets.constants import STAGE_CODE_VERSIONS
from llm_assets.kernels.ingest.parquet import parquet_batch_rows
from llm_assets.kernels.ingest.read import BATCH_BYTES
from llm_assets.kernels.schema import StageResult
from llm_assets.stages.engine import (
    StageContext,
    StageReport,
    _check_sources,
    _execute,
    _Planned,
    _upstream,
)
from llm_assets.stages.raw_documents import DEFAULT_ROWS_PER_SHARD
from llm_assets.stages.shard_io import (
    KERNEL_BATCH_ROWS,
    PartTimes,
    ShardStats,
    _write_shard,
    carried_metadata,
    row_group_batches,
    row_group_parts,
    timed_reads,
)
from llm_assets.warehouse.shards import fingerprint, shard_file_name, stage_dir

if TYPE_CHECKING:
    from llm_assets.warehouse.catalog import ShardRecord


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
    of whole row groups (:func:`~llm_assets.stages.shard_io.row_group_parts`), one task and one
    output shard each, keyed ``<upstream key>.p<part>``; every stage after follows them one to
    one."""
    stage_fp = fingerprint(asset, STAGE_CODE_VERSIONS[asset], config)
    folder = stage_dir(ctx.warehouse_root, asset, stage_fp)
    planned = []
    split = 0
    for source in _upstream(ctx, upstream):
        parts: list[tuple[int, int] | None] = [None]
        if split_big_shards and source.rows_out > (limit := _rows_per_shard(source)):
            try:
                footer = storage.parquet_metadata(source.path)
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


@dataclass(frozen=True)
class MapTask:
    """Apply ``kernel(table, spec) -> StageResult`` to every batch of one shard."""

    key: str
    input_path: str
    output_path: str
    rejects_path: str
    input_fingerprint: str
    kernel: Callable[[pa.Table, Any], StageResult]
    spec: Any
    metadata: tuple[tuple[str, str], ...] = ()
    batch_rows: int = KERNEL_BATCH_ROWS
    row_groups: tuple[int, int] | None = None
    """Only these row groups of the input (first, end): one part of a big upstream shard
    (:func:`row_group_parts`); None: all of it."""


def run_map(task: MapTask) -> ShardStats:
    """Worker side of the one-to-one stages."""
    started = time.perf_counter()
    parts = PartTimes()
    with parts.part("read"):
        source = storage.parquet_file(task.input_path)
        metadata = carried_metadata(task.input_path)
    metadata.update(dict(task.metadata))

    def results() -> Iterator[StageResult]:
        batch_size = parquet_batch_rows(source.metadata, task.batch_rows, BATCH_BYTES)
        batches = row_group_batches(source, batch_size, groups=task.row_groups)
        for batch in timed_reads(batches, parts):
            yield task.kernel(pa.Table.from_batches([batch]), task.spec)

    def empty_schema() -> pa.Schema:
        return task.kernel(source.schema_arrow.empty_table(), task.spec).kept.schema

    return _write_shard(
        results(),
        key=task.key,
        output_path=task.output_path,
        rejects_path=task.rejects_path,
        input_fingerprint=task.input_fingerprint,
        empty_output_schema=empty_schema,
        metadata=metadata,
        parts=parts,
        started=started,
    )
