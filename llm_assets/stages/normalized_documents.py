"""``normalized_documents``: normalize the text of every raw shard."""

from __future__ import annotations

from dataclasses import asdict

from llm_assets.constants import NORMALIZED_DOCUMENTS, RAW_DOCUMENTS
from llm_assets.kernels.normalize import NormalizeSpec, normalize_table
from llm_assets.stages.engine import StageContext, StageReport, _catalog_session
from llm_assets.stages.filtered_documents.nothing_kept import _refuse_nothing_kept
from llm_assets.stages.map_stage import _run_map_stage


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
