"""The benchmark report's tables, from measured runs built by hand (no pipeline run needed)."""

from __future__ import annotations

from dataclasses import replace

from llm_assets.bench.report import (
    markdown_report,
    ours_table,
    parts_table,
    reference_table,
    study_table,
)
from llm_assets.bench.runner import OURS, REFERENCE, RunResult, summarize
from llm_assets.stages.shard_io import PARTS


def _run(runner: str, backend: str, repetition: int, seconds: float) -> RunResult:
    return RunResult(
        runner=runner,
        backend=backend,
        size=1000,
        repetition=repetition,
        workers=2,
        rows_in=1000,
        rows_out=900,
        tokens=80_000,
        bytes_in=500_000,
        seconds=seconds,
        startup_seconds=0.1,
    )


def _rows(table: str, label: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in table.splitlines()
        if f"| {label} |" in line
    ]


def test_tables_give_the_median_and_every_repetition_in_run_order():
    runs = [
        _run(OURS, "ray", 0, 9.0),  # the warm-up: in no table
        _run(OURS, "ray", 1, 2.5),
        _run(OURS, "ray", 2, 2.0),
        _run(OURS, "ray", 3, 3.0),
        _run(REFERENCE, "single", 1, 20.0),
        _run(REFERENCE, "single", 2, 19.0),
    ]
    summaries = summarize(runs)
    ours = ours_table(summaries)
    header = [c.strip() for c in ours.splitlines()[0].strip("|").split("|")]
    (ray,) = _rows(ours, "ray")
    assert len(ray) == len(header)
    assert ray[header.index("seconds")] == "2.50"  # the median repetition
    assert ray[header.index("each repetition s")] == "2.50, 2.00, 3.00"
    assert ray[header.index("x study single (here)")] == "7.8x"  # 19.50 s (the median) / 2.50 s

    reference = reference_table(summaries)
    header = [c.strip() for c in reference.splitlines()[0].strip("|").split("|")]
    (single,) = _rows(reference, "single process")
    assert len(single) == len(header)
    assert single[header.index("seconds")] == "19.50"  # two repetitions: their mean
    assert single[header.index("each repetition s")] == "20.00, 19.00"


def test_parts_table_splits_each_stage_at_the_largest_size():
    parts = {"read": 0.1, "compute": 0.5, "write": 0.3, "commit": 0.05}
    runs = [
        replace(
            _run(OURS, backend, 1, seconds),
            size=size,
            stage_seconds={"raw_documents": 0.4, "tokenized_documents": 1.0},
            stage_parts={"raw_documents": {**parts, "read": 0.0}, "tokenized_documents": parts},
        )
        for size, backend, seconds in [(1000, "in_process", 1.5), (5000, "in_process", 2.0)]
    ]
    table = parts_table(summarize(runs))
    header = [c.strip() for c in table.splitlines()[0].strip("|").split("|")]
    assert header == ["rows", "backend", "stage", "wall s", *PARTS, "parts summed"]
    rows = _rows(table, "in_process")
    assert [r[0] for r in rows] == ["5,000"] * 3  # only the largest size
    assert rows[1][2:] == ["tokenized_documents", "1.00", "0.10", "0.50", "0.30", "0.05", "0.95"]
    # The totals: every stage's parts summed, beside the whole run's wall time.
    assert rows[2][2:] == [
        "**all stages**",
        "**2.00**",
        "**0.10**",
        "**1.00**",
        "**0.60**",
        "**0.10**",
        "**1.80**",
    ]
    # Runs recorded without a split (the study's runners, older results) leave it out.
    assert parts_table(summarize([_run(REFERENCE, "single", 1, 3.0)])).startswith("_no runs")


# --- the report's tables --------------------------------------------------------------------------
def test_study_table_sets_only_matching_sizes_side_by_side():
    """The study's 32,432 and 1,000 rows are compared only with a size within 10 %: 32,000 and
    1,000 here; a 2,000-row run is not set beside the study's 1,000 (nor 1,000 beside 32,432)."""
    runs = [
        replace(_run(REFERENCE, "single", 1, 4.0), size=2_000, rows_in=2_000),
        replace(_run(REFERENCE, "single", 1, 9.0), size=32_000, rows_in=32_000),
        replace(_run(REFERENCE, "multiprocessing", 1, 2.0), size=1_000),
    ]
    table = study_table(summarize(runs))
    here = {}  # (study rows, runner) -> the re-measured cells
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 9:
            here[(cells[0], cells[1].split(",")[0])] = cells[5:]
    assert here[("32,432", "single process")] == ["32,000", "3,556", "0", "0.95x"]
    assert here[("1,000", "single process")] == ["-", "-", "-", "-"]
    assert here[("32,432", "multiprocessing")] == ["-", "-", "-", "-"]
    assert here[("1,000", "multiprocessing")][0] == "1,000"
    assert "within ±10%" in table


def test_memory_measured_as_rss_is_marked():
    pss = replace(_run(OURS, "multiprocess", 1, 1.0), peak_total_pss_mb=400.0)
    rss = replace(pss, repetition=2, peak_total_pss_mb=500.0, memory_kind="rss")
    marked = summarize([pss, rss])
    (row,) = _rows(ours_table(marked), "multiprocess")
    header = [c.strip() for c in ours_table(marked).splitlines()[0].strip("|").split("|")]
    assert row[header.index("peak PSS MB (all)")] == "450 (RSS)"
    report = markdown_report(marked, machine={"cores": 2, "memory_gb": 24.0})
    assert "(RSS): PSS could not be read" in report

    clean = summarize([pss, replace(pss, repetition=2)])
    (row,) = _rows(ours_table(clean), "multiprocess")
    assert row[header.index("peak PSS MB (all)")] == "400"
    assert "(RSS)" not in markdown_report(clean, machine={"cores": 2, "memory_gb": 24.0})
