"""The benchmark report's tables, from measured runs built by hand (no pipeline run needed)."""

from __future__ import annotations

from llm_assets.bench.report import ours_table, reference_table
from llm_assets.bench.runner import OURS, REFERENCE, RunResult, summarize


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
    assert ray[header.index("x study single (here)")] == "7.6x"  # 19.00 s (median_low) / 2.50 s

    reference = reference_table(summaries)
    header = [c.strip() for c in reference.splitlines()[0].strip("|").split("|")]
    (single,) = _rows(reference, "single process")
    assert len(single) == len(header)
    assert single[header.index("seconds")] == "19.00"
    assert single[header.index("each repetition s")] == "20.00, 19.00"
