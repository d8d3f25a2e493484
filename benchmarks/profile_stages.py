"""Where our pipeline spends its time: seconds per stage per backend, each stage split into its
shard tasks' read, compute, write and commit, and (in-process) the functions that take it, from
cProfile.

Runs the study's workload through the assets' own stage code on a generated corpus and writes
JSON + Markdown to benchmarks/results/. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import logging
import os
import pstats
import sys
import time
from pathlib import Path

from llm_assets.bench.report import parts_table, stage_table
from llm_assets.bench.runner import ensure_corpus, run_pipeline, summarize
from llm_assets.compute.backends import BACKENDS

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results"
DATA_DIR = REPO / "data" / "generated" / "bench"


def profile_in_process(input_dir: Path, work_dir: Path, size: int, top: int) -> str:
    """cProfile of one in-process run: the top functions by own time and by cumulative time."""
    profiler = cProfile.Profile()
    profiler.enable()
    run_pipeline(input_dir, "in_process", work_dir=work_dir, size=size, repetition=99)
    profiler.disable()
    parts = []
    for key in ("tottime", "cumulative"):
        buffer = io.StringIO()
        stats = pstats.Stats(profiler, stream=buffer).strip_dirs().sort_stats(key)
        stats.print_stats(top)
        parts.append(f"#### by {key}\n\n```\n{buffer.getvalue().strip()}\n```")
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=200_000)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--profile", action="store_true", help="also cProfile an in-process run")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--data-dir", default=str(DATA_DIR))
    parser.add_argument("--out", default=str(RESULTS_DIR))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = out / f"work-profile-{stamp}"
    corpus = ensure_corpus(args.data_dir, args.size)
    results = []
    for backend in [b for b in args.backends.split(",") if b]:
        run_pipeline(
            corpus.parent, backend, work_dir=work, workers=args.workers, size=1, repetition=0
        )
        results.append(
            run_pipeline(
                corpus.parent, backend, work_dir=work, workers=args.workers, size=args.size
            )
        )
    summaries = summarize(results)
    totals = ", ".join(f"{r.backend} {r.seconds:.2f} s" for r in results)
    report = (
        f"## Seconds per stage, {args.size:,} rows\n\nWhole runs: {totals}.\n\n"
        f"{stage_table(summaries)}\n\n### Where each stage's time goes\n\n"
        f"{parts_table(summaries)}\n"
    )
    if args.profile:
        report += "\n### cProfile of an in-process run\n\n"
        report += profile_in_process(corpus.parent, work, args.size, args.top) + "\n"
    (out / f"profile-{stamp}.md").write_text(report)
    (out / f"profile-{stamp}.json").write_text(json.dumps([r.as_dict() for r in results], indent=2))
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
