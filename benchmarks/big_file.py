"""One big input file through the whole pipeline: is the work spread over the workers?

A plain ``.jsonl`` file is cut into line ranges when it is read, but a compressed JSONL file
(``.jsonl.gz``, ``.jsonl.zst``), a CSV or TXT file, or a Parquet file is read whole by one
task. This script runs the study's workload on the same generated rows written as one file of
each kind, on each backend, and prints the wall time, each stage's seconds and how many shards
each stage had, so that a regression to "one big file = one worker" shows up as numbers.

    .venv/bin/python benchmarks/big_file.py --size 1000000 --backends multiprocess,in_process

Corpora are cached under data/generated/bench/big-file/rows-<n>/ (~0.5 KB a row per format; the
plain corpus is compare_study.py's).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
from pathlib import Path

import orjson
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from llm_assets.bench.runner import ensure_corpus, run_isolated, run_pipeline
from llm_assets.constants import CATALOG_FILE, PIPELINE_ASSETS
from llm_assets.datagen.writers import write_corpus
from llm_assets.warehouse.catalog import Catalog

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = REPO / "data" / "generated" / "bench" / "big-file"
FORMATS = ("jsonl", "jsonl.gz", "jsonl.zst", "parquet-1-group", "parquet-1k-groups")


def input_folder(data_dir: Path, size: int, fmt: str) -> Path:
    """A folder holding only the corpus of ``size`` rows as one file of format ``fmt``
    (``parquet-1-group``: one row group, as ``pandas.DataFrame.to_parquet`` writes up to 1Mi
    rows; ``parquet-1k-groups``: row groups of 1,000 rows, as ``datasets.Dataset.to_parquet``
    writes), generated once."""
    plain = ensure_corpus(data_dir.parent, size)  # the corpus compare_study.py uses
    if fmt == "jsonl":
        return plain.parent
    folder = data_dir / f"rows-{size}" / fmt
    target = folder / ("corpus.parquet" if fmt.startswith("parquet") else f"corpus.{fmt}")
    if target.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".tmp-{target.name}"
    if fmt.startswith("jsonl."):
        with open(plain, "rb") as handle:
            write_corpus(tmp, (orjson.loads(line) for line in handle))
    else:
        table = pa_json.read_json(plain)
        group = 1000 if fmt == "parquet-1k-groups" else max(1, table.num_rows)
        pq.write_table(table, tmp, row_group_size=group, compression="zstd")
    tmp.replace(target)
    return folder


def shards_per_stage(root: Path) -> dict[str, int]:
    """How many shards each stage's current output has in the warehouse at ``root``."""
    catalog = Catalog(root / CATALOG_FILE)
    return {asset: len(catalog.current_shards(asset)) for asset in PIPELINE_ASSETS}


def measure(folder: Path, backend: str, work: Path, size: int, workers: int) -> dict:
    result = run_isolated(
        run_pipeline,
        folder,
        backend,
        work_dir=work,
        workers=workers,
        size=size,
        keep_warehouse=True,
    )
    roots = sorted(work.glob(f"warehouse-{backend}-{size}-1-*"), key=os.path.getmtime)
    shards = shards_per_stage(roots[-1])
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)
    return {"result": result, "shards": shards}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=200_000)
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--backends", default="multiprocess,in_process")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--data-dir", default=str(DATA_DIR))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    data_dir = Path(args.data_dir)
    work = data_dir / f"work-{time.strftime('%Y%m%d-%H%M%S')}"
    lines = [
        f"## One {args.size:,}-row file per format, {os.cpu_count()} cores",
        "",
        "| format | backend | wall s | raw / normalized / tokenized / filtered / batches s "
        "| shards per stage | peak PSS MB |",
        "|---|---|---:|---|---|---:|",
    ]
    for fmt in [f for f in args.formats.split(",") if f]:
        folder = input_folder(data_dir, args.size, fmt)
        for backend in [b for b in args.backends.split(",") if b]:
            done = measure(folder, backend, work, args.size, args.workers)
            r = done["result"]
            stage_s = " / ".join(f"{r.stage_seconds.get(a, 0):.2f}" for a in PIPELINE_ASSETS)
            counts = " / ".join(str(done["shards"][a]) for a in PIPELINE_ASSETS)
            lines.append(
                f"| {fmt} | {backend} | {r.seconds:.2f} | {stage_s} | {counts} "
                f"| {r.peak_total_pss_mb:.0f} |"
            )
            print(lines[-1], flush=True)
    shutil.rmtree(work, ignore_errors=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
