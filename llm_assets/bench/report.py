"""Benchmark results as a reader sees them: the Markdown report, its tables and the charts.

The history table they are recorded in is :mod:`llm_assets.warehouse.benchmarks`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llm_assets.bench.reference import STUDY_RESULTS, StudyRow
from llm_assets.bench.runner import OURS, PEER, REFERENCE, STARTUP, RunResult, Summary
from llm_assets.machine import machine_info
from llm_assets.stages.shard_io import PARTS, add_parts

SIZE_MATCH = 0.10
"""The study's published row is set beside a re-measured size only within this share of its rows
(32,000 for the study's 32,432): at other sizes start-up weighs differently, and a ratio would
compare unlike things."""

STUDY_LABELS = {"single": "single process", "multiprocessing": "multiprocessing", "ray": "Ray"}


# --- Markdown -------------------------------------------------------------------------------------
def _n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def _by_size(summaries: Sequence[Summary], runner: str) -> list[Summary]:
    return sorted((s for s in summaries if s.runner == runner), key=lambda s: (s.size, s.backend))


def _reference_single(summaries: Sequence[Summary], size: int) -> Summary | None:
    return next(
        (
            s
            for s in summaries
            if s.runner == REFERENCE and s.backend == "single" and s.size == size
        ),
        None,
    )


def _memory(result: RunResult) -> str:
    """Peak memory in MB, marked ``(RSS)`` when PSS could not be read for some process in some
    repetition: RSS counts shared pages once per process, so it overstates the sum."""
    return _n(result.peak_total_pss_mb) + (" (RSS)" if result.memory_kind == "rss" else "")


def memory_note(summaries: Sequence[Summary]) -> str:
    """A line under the tables when a figure is marked (RSS); empty otherwise."""
    if not any(s.median.memory_kind == "rss" for s in summaries):
        return ""
    return (
        "_(RSS): PSS could not be read for some process in at least one repetition; its RSS "
        "was summed instead, which counts shared pages once per process (an overestimate)._"
    )


def _each(summary: Summary) -> str:
    """Every repetition's seconds, in the order they ran: the spread around the median shows
    whether a figure the median reaches is also reached by the slowest repetition."""
    return ", ".join(f"{seconds:.2f}" for seconds in summary.seconds_all)


def ours_table(summaries: Sequence[Summary]) -> str:
    """Our pipeline per size and backend (medians, and every repetition's seconds), with the
    speed-up over the study's single process re-measured here on the same rows."""
    lines = [
        "| rows | backend | seconds | each repetition s | start-up s | rows/s | tokens/s | MB/s "
        "| peak PSS MB (all) | peak driver RSS MB | CPU s | x study single (here) |",
        "|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in _by_size(summaries, OURS):
        m = s.median
        ref = _reference_single(summaries, s.size)
        ratio = f"{m.rows_per_second / ref.median.rows_per_second:.1f}x" if ref else "-"
        lines.append(
            f"| {_n(s.size)} | {s.backend} | {m.seconds:.2f} | {_each(s)} | "
            f"{m.startup_seconds:.2f} | "
            f"{_n(m.rows_per_second)} | {_n(m.tokens_per_second)} | {m.mb_per_second:.2f} | "
            f"{_memory(m)} | {_n(m.peak_driver_rss_mb)} | {m.cpu_seconds:.1f} | "
            f"{ratio} |"
        )
    return "\n".join(lines)


def reference_table(summaries: Sequence[Summary]) -> str:
    """The study's runners re-measured on this machine."""
    rows = _by_size(summaries, REFERENCE)
    if not rows:
        return "_not run (include_reference is off)_"
    lines = [
        "| rows | runner | workers | seconds | each repetition s | start-up s | rows/s "
        "| peak PSS MB (all) | peak driver RSS MB | CPU s |",
        "|---:|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for s in rows:
        m = s.median
        lines.append(
            f"| {_n(s.size)} | {STUDY_LABELS.get(s.backend, s.backend)} | {m.workers} | "
            f"{m.seconds:.2f} | {_each(s)} | {m.startup_seconds:.2f} | {_n(m.rows_per_second)} | "
            f"{_memory(m)} | {_n(m.peak_driver_rss_mb)} | {m.cpu_seconds:.1f} |"
        )
    return "\n".join(lines)


def peers_table(summaries: Sequence[Summary]) -> str:
    """Each peer beside each of our backends at the same size: wall seconds and peak PSS, and
    ours / peer for both and for CPU seconds (below 1: ours is faster, smaller or cheaper; CPU
    seconds move less than wall time when other work shares the cores), with the rows and tokens
    each kept (equal when both did the same job; marked when not)."""
    peers = _by_size(summaries, PEER)
    if not peers:
        return "_not run (no peer, or its package is not installed: pip install -e '.[peers]')_"
    lines = [
        "| rows | peer | workers | peer s | each repetition s | peer peak PSS MB | peer rows kept "
        "| peer tokens kept | our backend | our s | our rows kept | wall ours / peer "
        "| PSS ours / peer | CPU ours / peer |",
        "|---:|---|---:|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for p in peers:
        m = p.median
        head = (
            f"| {_n(p.size)} | {p.backend} | {m.workers} | {m.seconds:.2f} | {_each(p)} | "
            f"{_memory(m)} | {_n(m.rows_out)} | {_n(m.tokens)} |"
        )
        ours = [s for s in _by_size(summaries, OURS) if s.size == p.size]
        if not ours:
            lines.append(f"{head} - | - | - | - | - | - |")
        for s in ours:
            o = s.median
            same = "" if (o.rows_out, o.tokens) == (m.rows_out, m.tokens) else " **differs**"
            pss = o.peak_total_pss_mb / m.peak_total_pss_mb if m.peak_total_pss_mb else 0.0
            cpu = o.cpu_seconds / m.cpu_seconds if m.cpu_seconds else 0.0
            lines.append(
                f"{head} {s.backend} | {o.seconds:.2f} | {_n(o.rows_out)}{same} | "
                f"{o.seconds / max(m.seconds, 1e-9):.2f} | {pss:.2f} | {cpu:.2f} |"
            )
    return "\n".join(lines)


def study_table(summaries: Sequence[Summary], study: Sequence[StudyRow] = STUDY_RESULTS) -> str:
    """The study's published figures next to the same runner re-measured here at a matching size
    (within :data:`SIZE_MATCH`; the nearest of those), else ``-``."""
    lines = [
        "| rows (study) | runner (study) | seconds | rows/s | peak MB (driver) "
        "| re-measured here: rows | rows/s | driver RSS MB | here / study |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    refs = _by_size(summaries, REFERENCE)
    for row in study:
        same = [
            s
            for s in refs
            if s.backend == row.runner and abs(s.size - row.rows) <= SIZE_MATCH * row.rows
        ]
        here = min(same, key=lambda s: abs(s.size - row.rows), default=None)
        if here is None:
            tail = "- | - | - | - |"
        else:
            m = here.median
            tail = (
                f"{_n(here.size)} | {_n(m.rows_per_second)} | {_n(m.peak_driver_rss_mb)} | "
                f"{m.rows_per_second / row.rows_per_second:.2f}x |"
            )
        lines.append(
            f"| {_n(row.rows)} | {row.detail} | {row.seconds:.2f} | {_n(row.rows_per_second)} | "
            f"{_n(row.peak_driver_mb)} | {tail}"
        )
    lines += [
        "",
        f"_`-`: the runner was not re-measured here at a size within ±{SIZE_MATCH:.0%} of the "
        "study's rows; a ratio across sizes would mix start-up with throughput._",
    ]
    return "\n".join(lines)


def stage_table(summaries: Sequence[Summary]) -> str:
    """Seconds per stage of our pipeline (median repetition)."""
    ours = _by_size(summaries, OURS)
    if not ours:
        return "_no runs_"
    stages = list(ours[0].median.stage_seconds)
    for s in ours:
        stages += [k for k in s.median.stage_seconds if k not in stages]
    stages = [STARTUP, *[k for k in stages if k != STARTUP]]
    lines = [
        "| rows | backend | " + " | ".join(stages) + " |",
        "|---:|---|" + "---:|" * len(stages),
    ]
    for s in ours:
        cells = " | ".join(f"{s.median.stage_seconds.get(k, 0.0):.2f}" for k in stages)
        lines.append(f"| {_n(s.size)} | {s.backend} | {cells} |")
    return "\n".join(lines)


def parts_table(summaries: Sequence[Summary]) -> str:
    """Per backend at the largest size measured: each stage's wall time and its shard tasks'
    seconds per part (read, compute, write, commit), summed over shards and processes."""
    ours = [s for s in _by_size(summaries, OURS) if s.median.stage_parts]
    if not ours:
        return "_no runs with a split by part_"
    largest = max(s.size for s in ours)
    lines = [
        "| rows | backend | stage | wall s | " + " | ".join(PARTS) + " | parts summed |",
        "|---:|---|---|---:|" + "---:|" * (len(PARTS) + 1),
    ]
    for s in (s for s in ours if s.size == largest):
        totals: dict[str, float] = {}
        for stage, parts in s.median.stage_parts.items():
            totals = add_parts(totals, parts)
            cells = " | ".join(f"{parts.get(k, 0.0):.2f}" for k in PARTS)
            wall = s.median.stage_seconds.get(stage, 0.0)
            lines.append(
                f"| {_n(s.size)} | {s.backend} | {stage} | {wall:.2f} | {cells} | "
                f"{sum(parts.values()):.2f} |"
            )
        cells = " | ".join(f"**{totals.get(k, 0.0):.2f}**" for k in PARTS)
        lines.append(
            f"| {_n(s.size)} | {s.backend} | **all stages** | **{s.median.seconds:.2f}** | "
            f"{cells} | **{sum(totals.values()):.2f}** |"
        )
    return "\n".join(lines)


def winners(summaries: Sequence[Summary]) -> dict[int, Summary]:
    """The fastest of our backends (lowest median wall time; by name on a tie, as backend
    ``auto`` breaks it) at each size where this run measured at least two of them."""
    by_size: dict[int, list[Summary]] = {}
    for s in _by_size(summaries, OURS):
        by_size.setdefault(s.size, []).append(s)
    return {
        size: min(measured, key=lambda s: (s.median.seconds, s.backend))
        for size, measured in by_size.items()
        if len(measured) > 1
    }


def recommendations(summaries: Sequence[Summary]) -> list[str]:
    """One line per size: which backend to use on this machine, and by how much it wins; only
    among the backends this run measured, and no recommendation where it measured one."""
    ours = _by_size(summaries, OURS)
    best_by_size = winners(summaries)
    lines = []
    for size in sorted({s.size for s in ours}):
        measured = [s for s in ours if s.size == size]
        best = best_by_size.get(size)
        if best is None:
            (only,) = measured
            lines.append(
                f"- **{_n(size)} rows:** only `{only.backend}` was measured in this run "
                f"({only.median.seconds:.2f} s): nothing to compare it with, no recommendation"
            )
            continue
        others = sorted(
            (s for s in measured if s is not best), key=lambda s: (s.median.seconds, s.backend)
        )
        versus = ", ".join(
            f"{s.backend} {s.median.seconds / best.median.seconds:.2f}x slower" for s in others
        )
        lines.append(
            f"- **{_n(size)} rows: `{best.backend}`** ({best.median.seconds:.2f} s, "
            f"{_n(best.median.rows_per_second)} rows/s; {versus})"
        )
    return lines


def markdown_report(
    summaries: Sequence[Summary],
    *,
    machine: dict[str, Any] | None = None,
    commit: str | None = None,
    images: dict[str, str] | None = None,
) -> str:
    """The whole report: recommendation, our table, the study side by side, stages, charts."""
    machine = machine or machine_info()
    parts = [
        "## Benchmark: the study's workload on every backend",
        f"Machine: {machine['cores']} cores, {machine['memory_gb']} GB "
        f"({machine.get('platform', '')}); commit `{commit or 'unknown'}`. Workload: normalize "
        "`ascii_lower`, GPT-2, drop < 10 tokens, pack batches. Every figure is the median of "
        "the repetitions, taken figure by figure (the mean of the middle two for an even "
        "count: the `median()` backend `auto` uses); rows/s, tokens/s and MB/s divide by the "
        "median seconds. Seconds include backend start-up (worker spawn, local Ray start; the "
        "driver works on shards while Ray starts, so Ray's start-up overlaps processing); "
        "tokens count the documents kept (10 tokens or more), ours and the study's alike; "
        "memory is the peak sum of PSS over the driver and all its descendant processes.",
        "### Recommendation (fastest backend per size on this machine)",
        "\n".join(recommendations(summaries)) or "_no runs_",
        "### Our pipeline",
        ours_table(summaries),
        "### The study's runners, re-measured here",
        reference_table(summaries),
        *([note] if (note := memory_note(summaries)) else []),
        "### Peers on the same rows (HF datasets, datatrove)",
        "The same job (`ascii_lower`, GPT-2, drop < 10 tokens, pack into blocks, write) written "
        "with each tool as its documentation does it, on the same cores "
        "(`llm_assets.bench.peers`).",
        peers_table(summaries),
        "### The study's published table, side by side",
        study_table(summaries),
        "### Seconds per stage (our pipeline)",
        "`training_batches` includes its scatter phase, also shown alone.",
        stage_table(summaries),
        "### Where each stage's time goes (our pipeline, largest size)",
        "Seconds each stage's shard tasks spent reading their input (Parquet, or the shuffle's "
        "Arrow IPC), computing (the kernel; for `raw_documents` that includes reading and "
        "parsing the input file), writing (encoding and compressing the output) and committing "
        "(close, fsync, checksum, rename), summed over the shards and over the processes that "
        "ran them: on parallel backends they add up to more than the wall time. In-process, "
        "the wall time beyond them is the driver's share: planning, the catalog, the SQL views.",
        parts_table(summaries),
    ]
    for title, markdown in (images or {}).items():
        parts += [f"### {title}", markdown]
    return "\n\n".join(parts) + "\n"


# --- charts ---------------------------------------------------------------------------------------
def _series(summaries: Sequence[Summary], value: str) -> dict[str, tuple[list[int], list[float]]]:
    series: dict[str, tuple[list[int], list[float]]] = {}
    for s in sorted(summaries, key=lambda s: s.size):
        xs, ys = series.setdefault(s.label, ([], []))
        xs.append(s.size)
        ys.append(getattr(s.median, value))
    return series


def write_charts(summaries: Sequence[Summary], out_dir: str | Path) -> dict[str, Path]:
    """Throughput and memory against rows (log x) per runner/backend, as PNG files."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    charts = {
        "throughput": ("rows_per_second", "rows per second", "Throughput vs corpus size"),
        "memory": ("peak_total_pss_mb", "peak PSS of all processes (MB)", "Peak memory"),
    }
    paths = {}
    for name, (value, ylabel, title) in charts.items():
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
        for label, (xs, ys) in sorted(_series(summaries, value).items()):
            style = {REFERENCE: "--", PEER: ":"}.get(label.split("/")[0], "-")
            ax.plot(xs, ys, style, marker="o", label=label)
        ax.set_xscale("log")
        ax.set_xlabel("rows (log scale)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"{name}.png"
        fig.savefig(path)
        plt.close(fig)
        paths[name] = path
    return paths
