"""Names and defaults shared across the package: one place for each."""

from __future__ import annotations

RAW_DOCUMENTS = "raw_documents"
NORMALIZED_DOCUMENTS = "normalized_documents"
TOKENIZED_DOCUMENTS = "tokenized_documents"
FILTERED_DOCUMENTS = "filtered_documents"
TRAINING_BATCHES = "training_batches"
BENCHMARK_REPORT = "benchmark_report"

PIPELINE_ASSETS: tuple[str, ...] = (
    RAW_DOCUMENTS,
    NORMALIZED_DOCUMENTS,
    TOKENIZED_DOCUMENTS,
    FILTERED_DOCUMENTS,
    TRAINING_BATCHES,
)
"""The stages in order. Also the allow-list of names the catalog may turn into SQL views."""

STAGE_CODE_VERSIONS: dict[str, str] = {
    RAW_DOCUMENTS: "5",
    NORMALIZED_DOCUMENTS: "4",
    TOKENIZED_DOCUMENTS: "4",
    FILTERED_DOCUMENTS: "5",
    TRAINING_BATCHES: "4",
}
"""Bump a stage's version when its output for the same input and config changes: its shards (and
everything downstream) are then recomputed instead of reused."""

GROUP_NAME = "llm_pipeline"
PIPELINE_JOB = "llm_pipeline"
BENCHMARK_JOB = "benchmark"
PRUNE_JOB = "prune_warehouse"
CATALOG_POOL = "llm_assets_warehouse"
"""Dagster concurrency pool of every step that writes the warehouse catalog (DuckDB allows one
writing process per file)."""

DEFAULT_INPUT_DIR = "data/sample"
DEFAULT_WAREHOUSE_DIR = "data/warehouse"
CATALOG_FILE = "catalog.duckdb"
ROWS_REJECTED_CHECK = "rows_reconcile"
