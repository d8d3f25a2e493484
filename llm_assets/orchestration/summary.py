"""The ``Run summary`` that ends a pipeline run: what each stage kept and dropped (and why), where
the batches are, and the Python that opens them.

Logged by the run's last step (:func:`last_step`), so it ends the output of ``dagster job
execute`` and the run's log in the UI. Everything in it is read from the warehouse catalog: the
run's materializations (rows in, out and rejected per stage) and the rejects views (the reasons).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from llm_assets.constants import PIPELINE_ASSETS, TRAINING_BATCHES
from llm_assets.storage import is_remote
from llm_assets.warehouse.catalog import Catalog
from llm_assets.warehouse.shards import stage_dir

TOP_REASONS = 3
"""Reject reasons named per stage, the most frequent first."""


@dataclass(frozen=True)
class StageSummary:
    """One stage of a run: rows in, kept (out) and rejected, and the top reject reasons."""

    asset: str
    rows_in: int
    rows_out: int
    rows_rejected: int
    reasons: Sequence[tuple[str, int]] = ()


def last_step(steps: Collection[str]) -> str | None:
    """The pipeline asset that runs last among ``steps`` (they run in :data:`PIPELINE_ASSETS`
    order, one after the other), or None when none of them is one."""
    ours = [asset for asset in PIPELINE_ASSETS if asset in steps]
    return ours[-1] if ours else None


def stage_summaries(catalog: Catalog, run_id: str, steps: Collection[str]) -> list[StageSummary]:
    """The stages of ``steps`` that run ``run_id`` materialized, in pipeline order."""
    assets = [asset for asset in PIPELINE_ASSETS if asset in steps]
    rows = catalog.query(
        "SELECT asset, rows_in, rows_out, rows_rejected FROM materializations "
        "WHERE run_id = ? AND list_contains(?, asset) "
        "QUALIFY row_number() OVER (PARTITION BY asset ORDER BY finished_at DESC) = 1",
        [run_id, assets],
    )
    found = {row[0]: row for row in rows}
    summaries = []
    for asset in assets:
        if asset not in found:
            continue
        _, rows_in, rows_out, rows_rejected = found[asset]
        reasons = _top_reasons(catalog, asset) if rows_rejected else []
        summaries.append(StageSummary(asset, rows_in, rows_out, rows_rejected, reasons))
    return summaries


def _top_reasons(catalog: Catalog, asset: str) -> list[tuple[str, int]]:
    """The most frequent reasons among ``asset``'s current rejects (those of its last run)."""
    if asset not in PIPELINE_ASSETS:  # a SQL identifier: names from the allow-list only
        raise ValueError(f"{asset!r} is not a pipeline asset")
    rows = catalog.query(
        f"SELECT reason, count(*) AS n FROM {asset}_rejects "
        f"GROUP BY reason ORDER BY n DESC, reason LIMIT {TOP_REASONS}"
    )
    return [(str(reason), int(n)) for reason, n in rows]


def _stage_line(stage: StageSummary, width: int) -> str:
    share = stage.rows_rejected / stage.rows_in if stage.rows_in else 0.0
    share_text = "" if not stage.rows_rejected else f" ({share:.0%})" if share >= 0.01 else " (<1%)"
    reasons = ", ".join(f"{reason} {n:,}" for reason, n in stage.reasons)
    return (
        f"  {stage.asset:<{width}} {stage.rows_in:>10,} {stage.rows_out:>10,} "
        f"{stage.rows_rejected:>10,}{share_text:<7}  {reasons}"
    ).rstrip()


def format_summary(
    stages: Sequence[StageSummary],
    warehouse: str | Path,
    batches: Path | None,
    catalog_path: Path | None = None,
) -> str:
    """The summary's text: a table of the stages, the batches' folder and how to open it (a
    warehouse in object storage names its local ``catalog_path`` too)."""
    width = max([len("stage"), *(len(s.asset) for s in stages)])
    lines = [
        "Run summary",
        f"  {'stage':<{width}} {'rows in':>10} {'kept':>10} {'rejected':>10}{'':<7}  top reasons",
        *(_stage_line(stage, width) for stage in stages),
    ]
    if any(stage.asset == TRAINING_BATCHES for stage in stages):
        lines.append(f"  ({TRAINING_BATCHES}: documents in, sequences kept)")
    if batches is None:
        lines.append(f"Batches: none yet in {warehouse} (materialize {TRAINING_BATCHES})")
        return "\n".join(lines)
    lines += [
        f"Batches: {batches}",
        "Open them in Python:",
        "    from llm_assets.reader import TokenBatchDataset",
        f'    ds = TokenBatchDataset.from_warehouse("{warehouse}", split="train"'
        + (f', catalog_path="{catalog_path}")' if catalog_path is not None else ")"),
    ]
    return "\n".join(lines)


def run_summary(
    catalog: Catalog, warehouse: str | Path, run_id: str, steps: Collection[str]
) -> str:
    """The ``Run summary`` of run ``run_id``, whose steps are ``steps``, in ``warehouse`` (a
    local folder or an object-storage URL)."""
    remote = is_remote(str(warehouse))
    current = catalog.current_fingerprint(TRAINING_BATCHES)
    batches = None
    if current is not None:
        folder = stage_dir(warehouse, TRAINING_BATCHES, current)
        batches = folder if remote else folder.resolve()
    stages = stage_summaries(catalog, run_id, steps)
    return format_summary(stages, warehouse, batches, catalog.path if remote else None)
