"""What the quality gate costs: the plain study workload against every filter and both dedups.

Runs our pipeline twice per backend on the same generated rows (``llm_assets.datagen``: WikiText-2
paragraph lengths, 5 % other languages, 2 % planted copies), medians of the repetitions:

* ``plain``: the study's workload (``ascii_lower``, GPT-2, drop < 10 tokens, packed batches);
* ``quality``: PII redaction, the ``default`` preset (it keeps lines for the repetition rules) and
  ``FilterSpec.standard()`` (Gopher quality and repetition, flagged words, language, exact and
  near dedup).

Then it times each filter kernel alone, in this process, on the normalized text of the same rows
(docs/s on one core), and the global dedup step. The target (issue 4): ``quality`` keeps at least
half of ``plain``'s rows/s. Writes JSON and Markdown to ``benchmarks/results/``.

    python benchmarks/quality_overhead.py --rows 200000 --backends in_process multiprocess
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from llm_assets.bench.runner import Workload, ensure_corpus, read_texts, run_pipeline
from llm_assets.kernels.dedup import (
    ExactDedupSpec,
    NearDedupSpec,
    dedup_annotate,
    resolve_duplicates,
)
from llm_assets.kernels.filters.chain import FilterSpec
from llm_assets.kernels.filters.flagged import FlaggedWordsSpec, flagged_filter
from llm_assets.kernels.filters.gopher_quality import QualitySpec, quality_filter
from llm_assets.kernels.filters.gopher_repetition import RepetitionSpec, repetition_filter
from llm_assets.kernels.filters.language import LanguageSpec, language_filter
from llm_assets.kernels.normalize import NormalizeSpec, normalize_array
from llm_assets.kernels.pii import PiiSpec, pii_kernel
from llm_assets.machine import machine_info

RESULTS = Path(__file__).resolve().parent / "results"


def quality_workload() -> Workload:
    """Every filter and both dedups on, PII redacted, text normalized with ``default``."""
    return replace(
        Workload(),
        normalize=NormalizeSpec(preset="default", pii=PiiSpec()),
        filter=FilterSpec.standard(),
    )


def time_kernels(texts: list[str], work_dir: Path) -> dict[str, dict[str, float]]:
    """Seconds, CPU seconds and docs/s of each kernel alone on every text (one process, one
    core). CPU seconds are the steadier figure on a shared machine; the first kernel is the
    ``default`` normalize preset the quality workload runs on the raw text."""
    n = len(texts)
    normalized = normalize_array(pa.array(texts, pa.string()), NormalizeSpec())
    table = pa.table(
        {
            "doc_id": pa.array([f"{i:012d}" for i in range(n)], pa.string()),
            "source_file": pa.array(["corpus.jsonl"] * n, pa.string()),
            "source_line": pa.array(range(1, n + 1), pa.int64()),
            "text": normalized,
        }
    )
    raw = table.set_column(3, "text", pa.array(texts, pa.string()))
    # (kernel, whether it reads the text as it came in: PII runs before normalization)
    kernels = {
        "normalize (default)": (lambda t: normalize_array(t["text"], NormalizeSpec()), True),
        "pii (redact)": (lambda t: pii_kernel(t, PiiSpec()), True),
        "gopher quality": (lambda t: quality_filter(t, QualitySpec()), False),
        "gopher repetition": (lambda t: repetition_filter(t, RepetitionSpec()), False),
        "flagged words": (lambda t: flagged_filter(t, FlaggedWordsSpec()), False),
        "language": (lambda t: language_filter(t, LanguageSpec()), False),
        "dedup hashes (sha256 + minhash)": (
            lambda t: dedup_annotate(t, ExactDedupSpec(), NearDedupSpec()),
            False,
        ),
    }
    out: dict[str, dict[str, float]] = {}
    batch = 8192
    for name, (kernel, reads_raw) in kernels.items():
        source = raw if reads_raw else table
        started, cpu_started = time.perf_counter(), time.process_time()
        for start in range(0, n, batch):
            kernel(source.slice(start, batch))
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu_started
        out[name] = {
            "seconds": round(seconds, 3),
            "cpu_seconds": round(cpu, 3),
            "docs_per_second": round(n / seconds, 1),
        }
        print(
            f"  {name:34s} {seconds:7.2f} s (CPU {cpu:6.2f} s) {n / seconds:10,.0f} docs/s",
            flush=True,
        )
    # The global step over annotated shards of 10,000 rows.
    annotated = dedup_annotate(table, ExactDedupSpec(), NearDedupSpec()).kept
    shards = []
    for i, start in enumerate(range(0, n, 10_000)):
        path = work_dir / f"annotated-{i:04d}.parquet"
        pq.write_table(annotated.slice(start, 10_000), path)
        shards.append((f"s{i:04d}", str(path)))
    con = duckdb.connect(str(work_dir / "dedup.duckdb"))
    con.execute(f"SET temp_directory = '{work_dir.as_posix()}'")
    con.execute("SET memory_limit = '1GB'")
    outcome = resolve_duplicates(con, shards, ExactDedupSpec(), NearDedupSpec())
    out["dedup global step (duckdb)"] = {
        "seconds": round(outcome.seconds, 3),
        "docs_per_second": round(n / outcome.seconds, 1),
        "exact_removed": outcome.exact_removed,
        "near_removed": outcome.near_removed,
    }
    print(
        f"  {'dedup global step (duckdb)':34s} {outcome.seconds:7.2f} s  "
        f"{n / outcome.seconds:10,.0f} docs/s ({outcome.exact_removed} exact, "
        f"{outcome.near_removed} near)",
        flush=True,
    )
    return out


def measure(
    corpus_dir: Path,
    backend: str,
    name: str,
    workload: Workload,
    *,
    rows: int,
    repetitions: int,
    work_dir: Path,
) -> dict:
    """Run our pipeline ``repetitions`` times on ``backend`` (2 workers), printing each run;
    the medians and every run's figures."""
    seconds, cpu, rows_out = [], [], 0
    stages: dict[str, list[float]] = {}
    for rep in range(repetitions):
        result = run_pipeline(
            corpus_dir,
            backend,
            work_dir=work_dir,
            size=rows,
            repetition=rep,
            workload=workload,
            workers=2,
        )
        seconds.append(result.seconds)
        cpu.append(result.cpu_seconds)
        rows_out = result.rows_out
        for stage, spent in result.stage_seconds.items():
            stages.setdefault(stage, []).append(spent)
        print(
            f"{backend:12s} {name:8s} rep {rep}: {result.seconds:7.2f} s "
            f"({rows / result.seconds:,.0f} rows/s, {rows_out} kept, "
            f"CPU {result.cpu_seconds:.1f} s, "
            f"peak PSS {result.peak_total_pss_mb:.0f} MB) stages "
            + json.dumps({k: round(v, 2) for k, v in result.stage_seconds.items()}),
            flush=True,
        )
    median = statistics.median(seconds)
    return {
        "median_seconds": round(median, 3),
        "rows_per_second": round(rows / median, 1),
        "rows_out": rows_out,
        "runs": [round(s, 3) for s in seconds],
        "cpu_seconds": [round(c, 2) for c in cpu],
        "median_cpu_seconds": round(statistics.median(cpu), 2),
        "median_stage_seconds": {k: round(statistics.median(v), 3) for k, v in stages.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--backends", nargs="+", default=["in_process", "multiprocess"])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--data-dir", default=str(RESULTS / "data"))
    args = parser.parse_args(argv)

    corpus = ensure_corpus(args.data_dir, args.rows)
    report: dict = {"machine": machine_info(), "rows": args.rows, "pipelines": {}, "kernels": {}}
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        for backend in args.backends:
            for name, workload in (("plain", Workload()), ("quality", quality_workload())):
                report["pipelines"][f"{backend}/{name}"] = measure(
                    corpus.parent,
                    backend,
                    name,
                    workload,
                    rows=args.rows,
                    repetitions=args.repetitions,
                    work_dir=work_dir,
                )
            plain = report["pipelines"][f"{backend}/plain"]["rows_per_second"]
            quality = report["pipelines"][f"{backend}/quality"]["rows_per_second"]
            report["pipelines"][f"{backend}/ratio"] = round(quality / plain, 3)
            cpu_ratio = (
                report["pipelines"][f"{backend}/plain"]["median_cpu_seconds"]
                / report["pipelines"][f"{backend}/quality"]["median_cpu_seconds"]
            )
            report["pipelines"][f"{backend}/cpu_ratio"] = round(cpu_ratio, 3)
            # CPU seconds do not count time the host's hypervisor takes away (vmstat "st"), so
            # their ratio stays meaningful on a noisy virtual machine.
            print(
                f"{backend}: quality/plain throughput = {quality / plain:.2f}, by CPU seconds "
                f"{cpu_ratio:.2f} (target >= 0.5)"
            )
        print("kernels alone, one core:")
        report["kernels"] = time_kernels(read_texts(corpus), work_dir)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"quality_overhead-{args.rows}.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
