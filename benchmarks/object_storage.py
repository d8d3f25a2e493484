"""What object storage costs: the study's workload with its input and warehouse in a loopback S3
server (moto) against the same on local disk.

Generates the study's corpus (``--rows``, default 200K; ``llm_assets.datagen``), starts moto's
standalone server on 127.0.0.1 and points the standard AWS environment at it, uploads the corpus
to a bucket, then runs our pipeline (``llm_assets.bench.runner.run_pipeline``: the five stages,
``configs/study.yaml``'s workload, a fresh warehouse per run) per backend, alternating local disk
and bucket run by run, ``--repetitions`` times each. ``--input local`` keeps the input on local
disk for both (the warehouse alone in the bucket). The first pair is also checked for the same
rows (every current shard). Prints the medians and the ratio bucket / local and
writes JSON to ``benchmarks/results/object_storage.json``.

Wall seconds are the driver's, from the first stage's start to the batches' record; CPU seconds
are summed over the driver and every process it started, the S3 server included.

    python benchmarks/object_storage.py --rows 200000 --backends in_process multiprocess
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pytest

from llm_assets import storage
from llm_assets.bench.runner import ensure_corpus, run_pipeline
from llm_assets.constants import PIPELINE_ASSETS
from llm_assets.machine import machine_info
from llm_assets.warehouse.catalog import Catalog

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the tests' loopback S3 server
from llm_assets_tests.s3 import moto_server, new_bucket, point_environment_at  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def _contents(catalog_path: Path, remote_root: str | None) -> dict[str, list[tuple[str, str]]]:
    """Asset -> (file name, SHA-256 of its rows) of its current shards. The rows, not the files'
    bytes: a footer holds its input's fingerprint (an object's ETag, a file's mtime) and the
    batches their inputs' write time, which differ between a bucket and a disk by design."""
    catalog = Catalog(catalog_path, remote_root=remote_root)
    return {
        asset: [
            (s.path.rsplit("/", 1)[-1], _rows_digest(storage.read_parquet(s.path)))
            for s in catalog.current_shards(asset)
        ]
        for asset in PIPELINE_ASSETS
    }


def _rows_digest(table: pa.Table) -> str:
    """SHA-256 of a table's columns in Arrow IPC, its schema's metadata left out."""
    sink = pa.BufferOutputStream()
    table = table.replace_schema_metadata(None)
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.sha256(sink.getvalue()).hexdigest()


def _run(corpus: str, backend: str, place: str, rep: int, work: Path, bucket_url: str, keep: bool):
    """One run of the pipeline, its warehouse on local disk or in the bucket."""
    result = run_pipeline(
        corpus,
        backend,
        work_dir=work / place,
        repetition=rep,
        workers=2,
        warehouse_url=f"{bucket_url}/warehouses" if place == "bucket" else None,
        keep_warehouse=keep,
    )
    stages = {k: round(v, 2) for k, v in result.stage_seconds.items()}
    print(
        f"{backend:12s} {place:6s} rep {rep}: {result.seconds:7.2f} s, CPU "
        f"{result.cpu_seconds:6.1f} s, {result.rows_out} kept; stages {json.dumps(stages)}",
        flush=True,
    )
    return result


def _identical(work: Path, bucket_url: str) -> bool:
    """Whether the kept local and bucket warehouses of the first pair hold the same rows."""
    local_dir = next((work / "local").glob("warehouse-*"))
    bucket_dir = next((work / "bucket").glob("warehouse-*"))
    local = _contents(local_dir / "catalog.duckdb", None)
    remote = _contents(bucket_dir / "catalog.duckdb", f"{bucket_url}/warehouses/{bucket_dir.name}")
    return local == remote


def _summary(backend: str, runs: dict[str, list], identical: bool) -> dict:
    """The medians of a backend's runs and the ratio bucket / local, printed and returned."""
    medians = {p: statistics.median(r.seconds for r in rs) for p, rs in runs.items()}
    cpu = {p: statistics.median(r.cpu_seconds for r in rs) for p, rs in runs.items()}
    ratio = medians["bucket"] / medians["local"]
    print(
        f"{backend}: local {medians['local']:.2f} s, bucket {medians['bucket']:.2f} s: "
        f"bucket / local = {ratio:.2f}x (CPU {cpu['local']:.1f} / {cpu['bucket']:.1f} s); "
        f"same rows in every shard: {identical}",
        flush=True,
    )
    return {
        "median_seconds": {p: round(m, 3) for p, m in medians.items()},
        "median_cpu_seconds": {p: round(c, 2) for p, c in cpu.items()},
        "ratio": round(ratio, 3),
        "identical": identical,
        "runs": {p: [round(r.seconds, 3) for r in rs] for p, rs in runs.items()},
        "stage_seconds": {
            p: [{k: round(v, 3) for k, v in r.stage_seconds.items()} for r in rs]
            for p, rs in runs.items()
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--backends", nargs="+", default=["in_process", "multiprocess"])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--input", choices=("bucket", "local"), default="bucket")
    parser.add_argument("--data-dir", default=str(RESULTS / "data"))
    args = parser.parse_args(argv)

    corpus = ensure_corpus(args.data_dir, args.rows)
    report: dict = {"machine": machine_info(), "rows": args.rows, "input": args.input}
    report["backends"] = {}
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as env:
        work = Path(tmp)
        with moto_server(work / "moto.log") as endpoint:
            point_environment_at(endpoint, env)
            bucket = new_bucket(endpoint)
            folder = corpus.parent  # the corpus alone in its folder
            sources = {"local": str(folder), "bucket": str(folder)}
            if args.input == "bucket":
                sources["bucket"] = bucket.upload_folder(folder, "input")
            for backend in args.backends:
                runs: dict[str, list] = {"local": [], "bucket": []}
                for rep in range(args.repetitions):
                    for place in ("local", "bucket"):
                        result = _run(
                            sources[place], backend, place, rep, work, bucket.url(), rep == 0
                        )
                        runs[place].append(result)
                identical = _identical(work, bucket.url())
                report["backends"][backend] = _summary(backend, runs, identical)
                for place in ("local", "bucket"):  # the first pair's warehouses, kept to compare
                    for kept in (work / place).glob("warehouse-*"):
                        shutil.rmtree(kept)
                storage.remove_tree(f"{bucket.url()}/warehouses")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "object_storage.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
