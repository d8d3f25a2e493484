#!/usr/bin/env bash
# Run the whole test suite (slow tests included) on two workers; the tests that start clusters,
# daemons or CLI runs share one of them (llm_assets_tests/conftest.py). Extra arguments go to
# pytest, e.g. `-m "not slow"`, or `-n 0` for one process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
export RAY_USAGE_STATS_ENABLED=0
exec .venv/bin/python -m pytest -n 2 --dist loadgroup "$@"
