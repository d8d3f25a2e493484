"""The benchmark report's tables, from measured runs built by hand (no pipeline run needed)."""

from __future__ import annotations

from dataclasses import replace

from llm_assets.bench.report import (
    _RESULTS_SQL,
    RESULTS_TABLE,
    ours_table,
    parts_table,
    record_results,
    reference_table,
)
from llm_assets.bench.runner import OURS, REFERENCE, RunResult, summarize
from llm_assets.tasks import PARTS
from llm_assets.warehouse.catalog import Catalog


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


def test_results_table_of_an_older_catalog_gains_the_parts_column(tmp_path):
    """A catalog whose benchmark_results predates stage_parts keeps its rows (the new column is
    null there) and takes new results with their split."""
    catalog = Catalog(tmp_path / "catalog.duckdb")
    older = _RESULTS_SQL.split(";")[0].replace(",\n    stage_parts JSON", "")
    assert "stage_parts" not in older
    with catalog.connect() as con:
        con.execute(older)
        con.execute(f"INSERT INTO {RESULTS_TABLE} (benchmark_run_id, size) VALUES ('old', 1)")
    run = replace(
        _run(OURS, "in_process", 1, 1.0),
        stage_parts={"raw_documents": {"read": 0.0, "compute": 0.5, "write": 0.2, "commit": 0.1}},
    )
    assert record_results(catalog, "new", [run]) == 1
    rows = catalog.query(
        f"SELECT benchmark_run_id, stage_parts->>'$.raw_documents.compute' FROM {RESULTS_TABLE} "
        "ORDER BY benchmark_run_id"
    )
    assert rows == [("new", "0.5"), ("old", None)]
