#!/usr/bin/env bash
# Run the whole test suite (slow tests included). Extra arguments go to pytest, e.g. `-m "not slow"`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
export RAY_USAGE_STATS_ENABLED=0
exec .venv/bin/python -m pytest "$@"
