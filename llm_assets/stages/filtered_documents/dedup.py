"""Global deduplication: the DuckDB step that decides the duplicates (memoized), and the
per-shard task that drops them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from llm_assets import storage
from llm_assets.constants import (
    FILTERED_DOCUMENTS,
    NORMALIZED_DOCUMENTS,
    RAW_DOCUMENTS,
    TOKENIZED_DOCUMENTS,
)
from llm_assets.kernels.dedup import (
    SEEN_TABLE,
    DedupOutcome,
    ExactDedupSpec,
    NearDedupSpec,
    resolve_duplicates,
)
from llm_assets.kernels.filters.chain import FilterSpec
from llm_assets.kernels.ingest.parquet import parquet_batch_rows
from llm_assets.kernels.ingest.read import BATCH_BYTES
from llm_assets.kernels.schema import DOC_ID, REASON, VALUE, StageResult, drop_rows
from llm_assets.stages.engine import StageContext, StageReport
from llm_assets.stages.shard_io import (
    KERNEL_BATCH_ROWS,
    PartTimes,
    ShardStats,
    _write_shard,
    carried_metadata,
    row_group_batches,
    timed_reads,
)
from llm_assets.storage import is_remote, location_path
from llm_assets.warehouse.layout import DEDUP_MEMO
from llm_assets.warehouse.shards import fingerprint, remove_stale_temporaries

DEDUP_MEMORY_LIMIT = "1GB"
"""DuckDB's memory cap for the global dedup step; past it DuckDB spills to the warehouse."""


def _holds(path: Path, table: pa.Table) -> bool:
    """Whether the Parquet file at ``path`` reads and holds exactly ``table`` (the dedup
    decisions, a few bytes per duplicate: reading them back costs little, and a file damaged
    since, cut or with flipped bytes, is caught instead of misapplied)."""
    try:
        return storage.read_parquet(path).equals(table)
    except (OSError, pa.ArrowException):
        return False


def _dedup_scope(ctx: StageContext, filter_fingerprint: str) -> str:
    """Whose history the dedup step reads and extends: the filter stage's config and those of
    the stages before it (their current folders). Text normalized another way is another corpus
    with another notion of "first seen" (with the filter config alone, a warehouse that had run
    the default preset, then ``ascii_lower``, would keep another copy of a duplicate than a fresh
    warehouse running ``ascii_lower``)."""
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
    # DuckDB spills to a local disk: beside the catalog when the warehouse is in object storage.
    local_root = (
        ctx.catalog.path.parent if is_remote(str(ctx.warehouse_root)) else ctx.warehouse_root
    )
    spill = Path(local_root) / ".duckdb_tmp"
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
        buffer = pa.BufferOutputStream()
        pq.write_table(outcome.drops, buffer)
        storage.write_bytes(path, buffer.getvalue().to_pybytes())
    outcome = replace(outcome, path=str(path))
    _write_dedup_memo(memo_path, after, outcome)
    return outcome


def _seen_state(con: Any, scope: str) -> list[Any]:
    """How many documents the dedup history of ``scope`` holds, its last run number and a digest
    of its (document, run) rows, so that any edit of it shows (a catalog without the history, or
    with an earlier release's, has none to compare)."""
    import duckdb  # the driver's alone: the apply tasks of this module's workers never need it

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
        memo = json.loads(storage.read_text(path))
        if memo.get("key") != key:
            return None
        drops_path = location_path(memo["path"])
        drops = storage.read_parquet(drops_path)
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
    storage.write_bytes(path, json.dumps(memo, sort_keys=True).encode())


@dataclass(frozen=True)
class DedupApplyTask:
    """Remove the documents the global dedup step chose from one annotated shard.

    The output keeps ``content_hash`` (to query) but not the MinHash columns (they stay in the
    annotated shard, which is the near-dedup index). Its rejects are the annotated shard's rejects
    (the per-document filters) followed by the duplicates, so the asset's rejects view holds both.
    """

    key: str
    input_path: str
    input_rejects_path: str | None
    drops_path: str
    output_path: str
    rejects_path: str
    input_fingerprint: str
    batch_rows: int = KERNEL_BATCH_ROWS


def run_dedup_apply(task: DedupApplyTask) -> ShardStats:
    """Worker side of the second half of ``filtered_documents`` with deduplication on."""
    from llm_assets.kernels.dedup import DEDUP_STAGE, MINHASH, MINHASH_BANDS

    started = time.perf_counter()
    parts = PartTimes()
    with parts.part("read"):
        source = storage.parquet_file(task.input_path)
        drops = storage.read_parquet(task.drops_path, filters=[("shard", "=", task.key)])
    columns = [n for n in source.schema_arrow.names if n not in (MINHASH, MINHASH_BANDS)]
    decided = dict(
        zip(
            drops[DOC_ID].to_pylist(),
            zip(drops[REASON].to_pylist(), drops[VALUE].to_pylist(), strict=True),
            strict=True,
        )
    )
    drop_ids = pa.array(list(decided), pa.string())
    metadata = carried_metadata(task.input_path)
    output_schema = source.schema_arrow.empty_table().select(columns).schema

    def results() -> Iterator[StageResult]:
        if task.input_rejects_path and storage.exists(task.input_rejects_path):
            with storage.parquet_file(task.input_rejects_path) as rejects:
                size = parquet_batch_rows(rejects.metadata, task.batch_rows, BATCH_BYTES)
                for earlier in timed_reads(row_group_batches(rejects, size), parts):
                    yield StageResult(output_schema.empty_table(), pa.Table.from_batches([earlier]))
        batch_size = parquet_batch_rows(source.metadata, task.batch_rows, BATCH_BYTES)
        for batch in timed_reads(row_group_batches(source, batch_size, columns), parts):
            table = pa.Table.from_batches([batch], schema=output_schema)
            mask = pc.is_in(table[DOC_ID], value_set=drop_ids)
            gone = table.filter(mask)[DOC_ID].to_pylist()
            yield drop_rows(
                table,
                mask,
                stage=DEDUP_STAGE,
                reasons=[decided[d][0] for d in gone],
                values=[decided[d][1] for d in gone],
            )

    return _write_shard(
        results(),
        key=task.key,
        output_path=task.output_path,
        rejects_path=task.rejects_path,
        input_fingerprint=task.input_fingerprint,
        empty_output_schema=lambda: output_schema,
        metadata=metadata,
        parts=parts,
        started=started,
    )
