"""Warehouse housekeeping as a Dagster job: ``prune_warehouse`` (see
:mod:`llm_assets.warehouse.prune`), to run from the UI, ``dagster job execute`` or a schedule."""

import dagster as dg
from pydantic import Field

from llm_assets.constants import CATALOG_POOL, PRUNE_JOB
from llm_assets.warehouse.prune import DEFAULT_KEEP_BATCHES, prune
from llm_assets.warehouse.resource import WarehouseResource


class PruneConfig(dg.Config):
    dry_run: bool = Field(
        True, description="Only list what would be removed (set false to remove it)"
    )
    keep_batches: int = Field(
        DEFAULT_KEEP_BATCHES,
        description="Earlier training_batches folders kept besides the current one (a training "
        "job may still read them)",
    )


@dg.op(pool=CATALOG_POOL, description="Remove what no current output of the warehouse needs")
def prune_warehouse_op(
    context: dg.OpExecutionContext, config: PruneConfig, warehouse: WarehouseResource
) -> dict:
    """Plan the pruning, log it, and (``dry_run: false``) remove it. In the warehouse's pool,
    like every step that writes the catalog: it waits for running steps, and they for it."""
    plan = prune(
        warehouse.location,
        keep_batches=config.keep_batches,
        dry_run=config.dry_run,
        catalog=warehouse.catalog(),
    )
    context.log.info(plan.describe())
    verb = "would free (dry run: nothing removed)" if config.dry_run else "freed"
    context.log.info(f"prune_warehouse: {len(plan.remove)} folder(s) or file(s), {verb} "
                     f"{plan.bytes / 1e6:,.1f} MB")  # fmt: skip
    summary = {
        "dry_run": config.dry_run,
        "removed": 0 if config.dry_run else len(plan.remove),
        "to_remove": len(plan.remove),
        "bytes": plan.bytes,
    }
    context.add_output_metadata(
        {**summary, "plan": dg.MetadataValue.md(f"```\n{plan.describe()}\n```")}
    )
    return summary


@dg.job(name=PRUNE_JOB, description="Remove old stage folders, batches and caches no current "
        "output needs (dry run unless configured otherwise)")  # fmt: skip
def prune_warehouse() -> None:
    prune_warehouse_op()
