#!/usr/bin/env bash
# Create .venv (once) and install the package for what is run: `setup.sh runtime` (the pipeline:
# `pip install -e .`) or `setup.sh test` (adds the test tools, torch and the benchmark's peers:
# `.[dev,torch,peers]`).
# Idempotent, with a stamp per set, so each README command works on a fresh machine and running
# the tests after a run adds only the test extras.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  runtime) target="." ;;
  test) target=".[dev,torch,peers]" ;;
  *) echo "usage: bash scripts/setup.sh runtime|test" >&2; exit 2 ;;
esac
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=".venv/.llm-assets-$1"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  # pip's output goes to a log, shown only when it fails: a run's output stays the run's.
  log=.venv/pip-install.log
  echo "Installing llm-assets ($1: pip install -e $target) into .venv; the first time takes" \
    "a few minutes" >&2
  if ! {
    .venv/bin/python -m pip install --quiet --upgrade pip &&
      .venv/bin/python -m pip install --quiet -e "$target"
  } >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    echo "pip install failed; its whole output is in $PWD/$log" >&2
    exit 1
  fi
  touch "$stamp"
  # The test set holds the runtime: a run after the tests installs nothing more.
  if [ "$1" = test ]; then touch .venv/.llm-assets-runtime; fi
fi
