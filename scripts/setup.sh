#!/usr/bin/env bash
# Create .venv (once) and install the package with its test tools. Idempotent; used by the other
# scripts, so each README command works on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.llm-assets-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[dev,torch]"
  touch "$stamp"
fi
