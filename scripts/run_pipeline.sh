#!/usr/bin/env bash
# Run the whole pipeline job on the shipped sample (data/sample) with the embedded defaults:
# local files, the DuckDB catalog in data/warehouse, Dagster's SQLite instance in .dagster/.
# Extra arguments go to `dagster job execute`, e.g. `-c configs/ray.yaml`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh runtime
export DAGSTER_HOME="$PWD" RAY_USAGE_STATS_ENABLED=0
exec .venv/bin/dagster job execute -m llm_assets.definitions -j llm_pipeline "$@"
