"""``filtered_documents``: filter per shard, then, with deduplication on, decide the duplicates
globally and drop them per shard."""

from __future__ import annotations

import time
from typing import Any

from llm_assets.constants import FILTERED_DOCUMENTS, STAGE_CODE_VERSIONS, TOKENIZED_DOCUMENTS
from llm_assets.kernels.filters.chain import FilterSpec, filter_table
from llm_assets.kernels.filters.length import LengthFilterSpec
from llm_assets.stages.engine import (
    SECONDS_BY_PART,
    StageContext,
    StageReport,
    _catalog_session,
    _execute,
    _Planned,
)
from llm_assets.stages.filtered_documents.decontamination import _decontam
from llm_assets.stages.filtered_documents.dedup import (
    DedupApplyTask,
    _resolve_duplicates,
    run_dedup_apply,
)
from llm_assets.stages.filtered_documents.nothing_kept import _refuse_nothing_kept
from llm_assets.stages.map_stage import _run_map_stage
from llm_assets.warehouse.shards import file_sha256, fingerprint, shard_file_name, stage_dir


@_catalog_session
def run_filtered_documents(ctx: StageContext, spec: FilterSpec | LengthFilterSpec) -> StageReport:
    """Apply the document filters to every tokenized shard; then, with deduplication on, remove
    exact and near duplicates across every shard and every earlier run (three phases: filter and
    annotate per shard, decide globally in DuckDB, drop per shard)."""
    started = time.time()
    if isinstance(spec, LengthFilterSpec):
        spec = FilterSpec(length=spec)
    config = spec.stage_config()
    if spec.flagged is not None and spec.flagged.path:
        # The list's content, not only its path, decides whether shards are reused.
        config["flagged_words_sha256"] = file_sha256(spec.flagged.path)
    decontam_extra: dict[str, Any] = {}
    if spec.decontam is not None:
        decontam, config["decontam"], decontam_extra = _decontam(ctx, spec.decontam)
        spec = spec.replace(decontam=decontam)
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
