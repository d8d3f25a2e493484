"""Compare our pipeline with the published study's runners on the same generated rows.

Generates the data (llm_assets.datagen), runs the study's runners, the peers (HF datasets and
datatrove, when installed: pip install -e '.[peers]') and our pipeline (medians of the
repetitions, a warm-up first), measures the tokenizer-only ceiling and the in-memory kernels bound
(the study's job with our kernels, nothing written), prints a table and the ratios
against the targets, and writes JSON + Markdown to benchmarks/results/. See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

from llm_assets.bench.ceiling import Ceiling, KernelsBound, kernels_bound, tokenizer_ceiling
from llm_assets.bench.peers import PEER_RUNNERS, installed_peers
from llm_assets.bench.reference import REFERENCE_RUNNERS, STUDY_MIN_TOKENS
from llm_assets.bench.report import markdown_report, write_charts
from llm_assets.bench.runner import (
    OURS,
    REFERENCE,
    BenchmarkPlan,
    DiskSpaceError,
    RunResult,
    Summary,
    check_corpus_space,
    ensure_corpus,
    read_lines,
    read_texts,
    run_benchmark,
    summarize,
)
from llm_assets.compute.backends import BACKENDS
from llm_assets.machine import git_commit, machine_info
from llm_assets.warehouse.benchmarks import record_results
from llm_assets.warehouse.catalog import Catalog

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results"
DATA_DIR = REPO / "data" / "generated" / "bench"


def _names(text: str) -> list[str]:
    """``a,b`` -> ``['a', 'b']`` (empty items and surrounding spaces dropped)."""
    return [x.strip() for x in text.split(",") if x.strip()]


def _count(text: str, minimum: int = 1) -> int:
    """One row count of at least ``minimum`` (``32000``, ``32_000``), else an argparse error
    naming it."""
    try:
        value = int(text.strip().replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a row count") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{text!r}: a row count here must be >= {minimum}")
    return value


def sizes_arg(text: str) -> list[int]:
    """``--sizes``: comma-separated positive row counts, at least one."""
    sizes = [_count(x) for x in _names(text)]
    if not sizes:
        raise argparse.ArgumentTypeError("give at least one size, e.g. 1000,32000")
    return sizes


def _choices(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    """Comma-separated names, each one of ``allowed``, else an argparse error naming it."""
    names = _names(text)
    for name in names:
        if name not in allowed:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {name!r}; choose from {', '.join(allowed)}"
            )
    return names


def backends_arg(text: str) -> list[str]:
    """``--backends``: comma-separated names of our backends."""
    return _choices(text, BACKENDS, "backend")


def reference_arg(text: str) -> list[str]:
    """``--reference``: comma-separated names of the study's runners ('' for none)."""
    return _choices(text, REFERENCE_RUNNERS, "study runner")


def peers_arg(text: str) -> list[str]:
    """``--peers``: comma-separated names of the peers ('' for none)."""
    return _choices(text, PEER_RUNNERS, "peer")


def caps_arg(text: str) -> dict[str, int]:
    """``--reference-max-rows``: ``runner=rows`` pairs, comma-separated (0: never run it)."""
    caps = {}
    for item in _names(text):
        runner, sep, rows = item.partition("=")
        names = _choices(runner, REFERENCE_RUNNERS, "study runner")
        if not sep or len(names) != 1:
            raise argparse.ArgumentTypeError(f"{item!r} is not runner=rows (e.g. ray=32000)")
        caps[names[0]] = _count(rows, minimum=0)
    return caps


def _summary(summaries: list[Summary], size: int, runner: str, backend: str) -> Summary | None:
    for s in summaries:
        if (s.size, s.runner, s.backend) == (size, runner, backend):
            return s
    return None


def _get(summaries: list[Summary], size: int, runner: str, backend: str) -> RunResult | None:
    found = _summary(summaries, size, runner, backend)
    return found.median if found else None


def _each_speedup(ours: Summary | None, base: RunResult | None) -> str:
    """The speed-up (rows/s) of every repetition of ``ours`` over the median of ``base``, as a
    range: whether the slowest repetition meets a target too, not only the median."""
    if ours is None or base is None or base.rows_per_second <= 0:
        return ""
    rows = ours.median.rows_per_second * ours.median.seconds  # the same rows every repetition
    ratios = [rows / seconds / base.rows_per_second for seconds in ours.seconds_all if seconds > 0]
    return f" (each repetition {min(ratios):.2f}-{max(ratios):.2f})" if ratios else ""


def _target(name: str, value: float | None, op: str, threshold: float, detail: str) -> dict:
    if value is None:
        return {"target": name, "value": None, "threshold": f"{op} {threshold:g}", "met": None,
                "detail": detail + " (not measured)"}  # fmt: skip
    met = value >= threshold if op == ">=" else value <= threshold
    return {"target": name, "value": round(value, 3), "threshold": f"{op} {threshold:g}",
            "met": met, "detail": detail}  # fmt: skip


def evaluate_targets(
    summaries: list[Summary], ceilings: dict[int, Ceiling], mid: int, big: int, small: int
) -> list[dict[str, Any]]:
    """The issue's targets, each with its measured ratio and whether it is met."""

    def ratio(a: RunResult | None, b: RunResult | None, attr: str = "rows_per_second"):
        return getattr(a, attr) / getattr(b, attr) if a and b else None

    ref_mid = _get(summaries, mid, REFERENCE, "single")
    ours = {b: _get(summaries, mid, OURS, b) for b in BACKENDS}
    each = {b: _each_speedup(_summary(summaries, mid, OURS, b), ref_mid) for b in BACKENDS}
    big_in = _get(summaries, big, OURS, "in_process")
    targets = [
        _target(f"in_process rows/s vs study single @{mid:,}",
                ratio(ours["in_process"], ref_mid), ">=", 7,
                "x reference single process" + each["in_process"]),
        _target(f"multiprocess rows/s vs study single @{mid:,}",
                ratio(ours["multiprocess"], ref_mid), ">=", 10,
                "x reference single process" + each["multiprocess"]),
        _target(f"multiprocess rows/s vs our in_process @{big:,}",
                ratio(_get(summaries, big, OURS, "multiprocess"), big_in), ">=", 1.5,
                "x" + _each_speedup(_summary(summaries, big, OURS, "multiprocess"), big_in)),
        _target(f"ray rows/s vs study single @{mid:,}",
                ratio(ours["ray"], ref_mid), ">=", 8,
                "x reference single (Ray start included)" + each["ray"]),
        _target(f"ray wall time vs our in_process @{small:,}",
                ratio(_get(summaries, small, OURS, "ray"),
                      _get(summaries, small, OURS, "in_process"), "seconds"), "<=", 2,
                "x in_process seconds"),
    ]  # fmt: skip
    for s in summaries:
        if s.runner != OURS:
            continue
        limit = 1536 if s.backend == "ray" else 600
        targets.append(
            _target(
                f"peak PSS {s.backend} @{s.size:,}",
                s.median.peak_total_pss_mb,
                "<=",
                limit,
                "MB, all processes",
            )
        )
    for backend in BACKENDS:
        a, b = _get(summaries, mid, OURS, backend), _get(summaries, big, OURS, backend)
        growth = (b.peak_total_pss_mb / a.peak_total_pss_mb - 1) * 100 if a and b else None
        targets.append(
            _target(f"peak memory growth {backend} {mid:,} -> {big:,}", growth, "<=", 15, "%")
        )
    for size, ceiling in sorted(ceilings.items()):
        best = min(
            (s for s in summaries if s.runner == OURS and s.size == size),
            key=lambda s: s.median.seconds,
            default=None,
        )
        value = best.median.rows_per_second / ceiling.rows_per_second * 100 if best else None
        targets.append(
            _target(f"pipeline vs tokenizer-only ceiling @{size:,}", value, ">=", 70,
                    f"% ({best.backend if best else '-'} vs {ceiling.rows_per_second:,.0f} rows/s)")
        )  # fmt: skip
        # The same against row-by-row tokenization (the study's way), for reference.
        row_by_row = ceiling.rows / max(ceiling.row_by_row_seconds, 1e-9)
        value = best.median.rows_per_second / row_by_row * 100 if best else None
        targets.append(
            _target(f"pipeline vs row-by-row tokenizer ceiling @{size:,}", value, ">=", 70,
                    f"% ({best.backend if best else '-'} vs {row_by_row:,.0f} rows/s)")
        )  # fmt: skip
    return targets


def targets_markdown(targets: list[dict[str, Any]]) -> str:
    """The targets as a Markdown table."""
    lines = ["| target | measured | required | met |", "|---|---:|---|---|"]
    for t in targets:
        met = "n/a" if t["met"] is None else ("yes" if t["met"] else "**NO**")
        value = "-" if t["value"] is None else f"{t['value']:,.2f}"
        lines.append(f"| {t['target']} | {value} {t['detail']} | {t['threshold']} | {met} |")
    return "\n".join(lines)


def ceilings_markdown(ceilings: dict[int, Ceiling]) -> str:
    """Tokenizer-only throughput per size."""
    lines = [
        "| rows | best rows/s | tokens/s | row by row: 1 thread s | tiktoken threads s | "
        "processes s | by distinct words: 1 process s | processes s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, c in sorted(ceilings.items()):
        lines.append(
            f"| {size:,} | {c.rows_per_second:,.0f} | {c.tokens_per_second:,.0f} | "
            f"{c.single_thread_seconds:.2f} | {c.threads_seconds:.2f} | "
            f"{c.processes_seconds:.2f} | {c.by_words_seconds:.2f} | "
            f"{c.by_words_processes_seconds:.2f} |"
        )
    return "\n".join(lines)


def where_time_goes_markdown(
    summaries: list[Summary], ceilings: dict[int, Ceiling], bounds: dict[int, KernelsBound]
) -> str:
    """Per size: the tokenizer-only ceiling, the in-memory kernels bound and our fastest backend,
    each as rows/s and as a share of the ceiling."""
    lines = [
        "| rows | tokenizer only rows/s | kernels in memory rows/s (% of ceiling) | "
        "our fastest rows/s (% of ceiling, % of kernels) |",
        "|---:|---:|---:|---:|",
    ]
    for size in sorted(set(ceilings) | set(bounds)):
        ceiling, bound = ceilings.get(size), bounds.get(size)
        best = min(
            (s for s in summaries if s.runner == OURS and s.size == size),
            key=lambda s: s.median.seconds,
            default=None,
        )

        def share(rate: float | None, of: Any) -> str:
            return f"{rate / of.rows_per_second * 100:.0f} %" if rate and of else "-"

        bound_rate = bound.rows_per_second if bound else None
        ours = best.median.rows_per_second if best else None
        lines.append(
            f"| {size:,} | {f'{ceiling.rows_per_second:,.0f}' if ceiling else '-'} | "
            f"{f'{bound_rate:,.0f}' if bound_rate else '-'} ({share(bound_rate, ceiling)}) | "
            f"{f'{ours:,.0f} {best.backend}' if best else '-'} "
            f"({share(ours, ceiling)}, {share(ours, bound)}) |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The command line: sizes, what to run, how often, where to write."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=sizes_arg, default="1000,32000,200000",
                        help="rows, comma-separated")  # fmt: skip
    parser.add_argument("--backends", type=backends_arg, default=",".join(BACKENDS))
    parser.add_argument("--reference", type=reference_arg, default=",".join(REFERENCE_RUNNERS),
                        help="study runners to re-measure ('' for none)")  # fmt: skip
    parser.add_argument("--peers", type=peers_arg, default=",".join(PEER_RUNNERS),
                        help="peers to run when installed ('' for none)")  # fmt: skip
    parser.add_argument("--reference-max-rows", type=caps_arg, default="ray=32000",
                        help="runner=rows caps, e.g. ray=32000,multiprocessing=200000")  # fmt: skip
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0, help="0 = every core")
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument("--no-ceiling", action="store_true")
    parser.add_argument("--mid", type=int, default=200_000, help="size of the speed-up targets")
    parser.add_argument("--big", type=int, default=1_000_000, help="size of the growth targets")
    parser.add_argument("--small", type=int, default=32_000, help="size of the Ray wall target")
    parser.add_argument("--data-dir", default=str(DATA_DIR))
    parser.add_argument("--out", default=str(RESULTS_DIR))
    parser.add_argument(
        "--catalog", default="", help="also append each result to this DuckDB file when measured"
    )
    parser.add_argument("--seed", type=int, default=0)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments (a bad one is a one-line usage error, exit 2), run the benchmark and
    write its report."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    log = logging.getLogger("compare_study")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

    sizes = sorted(set(args.sizes))
    try:
        plan = BenchmarkPlan(
            sizes=tuple(sizes),
            backends=tuple(args.backends),
            reference_runners=tuple(args.reference),
            peer_runners=installed_peers(args.peers, print),
            repetitions=args.repetitions,
            workers=args.workers,
            warmup=not args.no_warmup,
            reference_max_rows=args.reference_max_rows,
            seed=args.seed,
        )
        check_corpus_space(args.data_dir, sizes)
    except (ValueError, DiskSpaceError) as exc:
        parser.error(str(exc))
    workers = args.workers or (os.cpu_count() or 1)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for size in sizes:
        log.info(f"corpus of {size:,} rows: {ensure_corpus(args.data_dir, size, args.seed)}")
    ceilings: dict[int, Ceiling] = {}
    if not args.no_ceiling:
        for size in sizes:
            texts = read_texts(ensure_corpus(args.data_dir, size, args.seed))
            ceilings[size] = tokenizer_ceiling(texts, workers)
            log.info(
                f"tokenizer-only ceiling @{size:,}: {ceilings[size].rows_per_second:,.0f} rows/s"
            )
    bounds: dict[int, KernelsBound] = {}
    if not args.no_ceiling:
        for size in sizes:
            lines = read_lines(ensure_corpus(args.data_dir, size, args.seed))
            bounds[size] = kernels_bound(lines, workers, STUDY_MIN_TOKENS)
            del lines
            log.info(f"kernels in memory @{size:,}: {bounds[size].rows_per_second:,.0f} rows/s")
    machine, commit = machine_info(), git_commit()
    catalog = Catalog(args.catalog) if args.catalog else None

    def record(result: RunResult) -> None:
        """Append each repetition as it is measured: a failure later keeps it."""
        if catalog is not None:
            record_results(catalog, f"compare-{stamp}", [result], machine=machine, commit=commit)

    results = run_benchmark(
        plan, data_dir=args.data_dir, work_dir=out / f"work-{stamp}", log=log, on_result=record
    )
    summaries = summarize(results)
    targets = evaluate_targets(summaries, ceilings, args.mid, args.big, args.small)
    charts = write_charts(summaries, out / f"compare-{stamp}")
    report = markdown_report(summaries, machine=machine, commit=commit)
    if ceilings or bounds:  # none with --no-ceiling: no empty tables
        report += (
            "\n### Tokenizer-only ceiling (same rows, same cores)\n\n"
            + ceilings_markdown(ceilings)
            + "\n\n### Where the time goes: tokenizer, the job's kernels, the materialized "
            "pipeline\n\n"
            + "Kernels in memory: JSON lines already in memory, parsed, normalized, tokenized and "
            "length-filtered in batches on the same processes, nothing written (no batching).\n\n"
            + where_time_goes_markdown(summaries, ceilings, bounds)
            + "\n"
        )  # fmt: skip
    report += (
        "\n### Targets\n\n" + targets_markdown(targets) + "\n\nCharts: "
        + ", ".join(str(p) for p in charts.values()) + "\n"
    )  # fmt: skip
    (out / f"compare-{stamp}.md").write_text(report)
    payload = {
        "machine": machine,
        "git_commit": commit,
        "plan": {
            "sizes": sizes,
            "backends": plan.backends,
            "reference": plan.reference_runners,
            "peers": plan.peer_runners,
            "repetitions": plan.repetitions,
            "workers": workers,
        },
        "summaries": [s.median.as_dict() | {"seconds_all": s.seconds_all} for s in summaries],
        "results": [r.as_dict() for r in results],
        "ceilings": {str(k): c.as_dict() for k, c in ceilings.items()},
        "kernels_bounds": {str(k): b.as_dict() for k, b in bounds.items()},
        "targets": targets,
    }
    (out / f"compare-{stamp}.json").write_text(json.dumps(payload, indent=2, default=str))
    print(report)
    print(f"written: {out / f'compare-{stamp}.md'} and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
