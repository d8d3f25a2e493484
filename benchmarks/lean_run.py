"""A small run's fixed cost: the shipped sample through ``dagster job execute`` against a
five-asset Dagster job whose assets do nothing, both as users start them (a fresh process, a
fresh warehouse each time, the same Dagster instance settings), run in turn so that the ratio
holds while the machine's speed drifts.

    .venv/bin/python benchmarks/lean_run.py --runs 5 --config configs/multiprocess.yaml

Prints each command's median wall and CPU seconds and the median of the paired ratios (target
of issue 37: the sample within 1.5x of the no-op job).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]

NOOP_JOB = """
import dagster as dg

@dg.asset
def a(): return 1
@dg.asset
def b(a): return a
@dg.asset
def c(b): return b
@dg.asset
def d(c): return c
@dg.asset
def e(d): return d

defs = dg.Definitions(
    assets=[a, b, c, d, e],
    jobs=[dg.define_asset_job("noop", executor_def=dg.in_process_executor)],
)
"""


def _timed(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of ``command`` and its children; raises if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--config", action="append", default=[], help="extra -c config files")
    args = parser.parse_args(argv)
    dagster = str(Path(sys.executable).with_name("dagster"))
    work = Path(tempfile.mkdtemp(prefix="lean-run-"))
    try:
        (work / "noop_job.py").write_text(NOOP_JOB)
        home = work / "home"
        home.mkdir()
        shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
        env = {**os.environ, "DAGSTER_HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0"}
        run_config = work / "run.yaml"
        warehouse = work / "warehouse"
        run_config.write_text(
            yaml.safe_dump(
                {
                    "ops": {
                        "raw_documents": {"config": {"input_dir": str(REPO / "data" / "sample")}}
                    },
                    "resources": {"warehouse": {"config": {"root": str(warehouse)}}},
                }
            )
        )
        ours = [dagster, "job", "execute", "-m", "llm_assets.definitions", "-j", "llm_pipeline"]
        for config in [*args.config, str(run_config)]:
            ours += ["-c", str(Path(config).resolve())]
        noop = [dagster, "job", "execute", "-f", str(work / "noop_job.py"), "-j", "noop"]
        figures: dict[str, list[tuple[float, float]]] = {"sample": [], "noop": []}
        for run in range(args.runs + 1):  # the first pair warms the disk cache, not counted
            shutil.rmtree(warehouse, ignore_errors=True)
            sample = _timed(ours, work, env)
            empty = _timed(noop, work, env)
            if run:
                figures["sample"].append(sample)
                figures["noop"].append(empty)
                print(f"run {run}: sample {sample[0]:.2f} s, no-op job {empty[0]:.2f} s")
        ratios = [s[0] / n[0] for s, n in zip(figures["sample"], figures["noop"], strict=True)]
        for name, rows in figures.items():
            wall = statistics.median(w for w, _ in rows)
            cpu = statistics.median(c for _, c in rows)
            print(f"{name}: median wall {wall:.2f} s, CPU {cpu:.2f} s")
        print(
            f"sample / no-op job, median of {len(ratios)} paired runs: "
            f"{statistics.median(ratios):.2f}x (target <= 1.5x)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
