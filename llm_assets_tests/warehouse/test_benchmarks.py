"""The benchmark history table: recording measured runs and the queries that read them back."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from llm_assets.bench.runner import OURS, REFERENCE, summarize
from llm_assets.warehouse.benchmarks import (
    _RESULTS_SQL,
    HISTORY_SQL,
    RESULTS_TABLE,
    read_winners,
    record_results,
)
from llm_assets.warehouse.catalog import Catalog
from llm_assets_tests.bench.test_report import _run
from llm_assets_tests.conftest import REPO


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


def _record_in_time_zone(
    catalog: Path, run_id: str, when: float, tz: str, seconds: dict[str, float]
) -> None:
    """record_results in a process of its own whose local time zone is ``tz``."""
    runs = [_run(OURS, backend, 1, s) for backend, s in sorted(seconds.items())]
    code = (
        "import pickle, sys; from llm_assets.warehouse.benchmarks import record_results; "
        "from llm_assets.warehouse.catalog import Catalog; "
        "runs = pickle.loads(sys.stdin.buffer.read()); "
        f"record_results(Catalog({str(catalog)!r}), {run_id!r}, runs, recorded_at={when!r}, "
        "machine={'cores': 2, 'memory_gb': 1.0})"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        input=pickle.dumps(runs),
        env={**os.environ, "TZ": tz},
        check=True,
    )


def test_recorded_at_is_utc_whatever_the_recorders_time_zone(tmp_path):
    """recorded_at is UTC: in the recorder's local time a run recorded at 08:00 UTC from Tokyo
    (17:00 there) would sort after one recorded two hours later from New York (05:00 there), and
    auto would take the older run's figures as the latest."""
    path = tmp_path / "catalog.duckdb"
    earlier = 1_800_000_000.0
    later = earlier + 7_200
    _record_in_time_zone(
        path, "A-earlier", earlier, "Asia/Tokyo", {"in_process": 0.7, "multiprocess": 1.3}
    )
    _record_in_time_zone(
        path, "B-later", later, "America/New_York", {"in_process": 0.9, "multiprocess": 0.5}
    )
    rows = Catalog(path).query(
        f"SELECT DISTINCT benchmark_run_id, recorded_at FROM {RESULTS_TABLE} ORDER BY 1"
    )
    utc = [datetime.fromtimestamp(t, UTC).replace(tzinfo=None) for t in (earlier, later)]
    assert rows == [("A-earlier", utc[0]), ("B-later", utc[1])]
    assert read_winners(path, cores=2) == {1000: "multiprocess"}  # B's: the later run
    history = Catalog(path).query(HISTORY_SQL)
    assert [row[0] for row in history] == ["A-earlier"] * 2 + ["B-later"] * 2


def test_history_rows_per_second_is_the_reports_figure(tmp_path):
    """The history query (the asset's ``query``) divides the rows by the median seconds, as the
    report does, not the median of each repetition's rows/s: with two repetitions of 1 s and
    3 s on 1,000 rows both say 500 rows/s (the other median would say 667)."""
    runs = [_run(OURS, "in_process", 1, 1.0), _run(OURS, "in_process", 2, 3.0)]
    runs += [_run(REFERENCE, "single", rep, s) for rep, s in ((1, 2.0), (2, 5.0), (3, 4.0))]
    catalog = Catalog(tmp_path / "catalog.duckdb")
    record_results(catalog, "run", runs)
    report = {(s.runner, s.backend): s.median.rows_per_second for s in summarize(runs)}
    assert report[(OURS, "in_process")] == 500.0
    history = {(row[3], row[4]): row[6] for row in catalog.query(HISTORY_SQL)}
    assert history == report


def _readme_history_statements() -> list[str]:
    """Every SQL statement of the "History in SQL" block of benchmarks/README.md, as written."""
    text = (REPO / "benchmarks" / "README.md").read_text()
    section = text.split("## History in SQL", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sql", 1)[1].split("```", 1)[0]
    return [statement.strip() for statement in block.split(";") if statement.strip()]


def _without_comments(sql: str) -> str:
    lines = [line for line in sql.splitlines() if not line.strip().startswith("--")]
    return " ".join(" ".join(lines).split()).rstrip(";")


def test_readme_history_queries_run_and_list_runs_in_time_order(tmp_path):
    """The README's queries run on a real catalog, newest run last although its id sorts first;
    the first is the benchmark asset's own ``query`` (HISTORY_SQL), word for word."""
    catalog = Catalog(tmp_path / "catalog.duckdb")
    parts = {"raw_documents": {"read": 0.0, "compute": 0.5, "write": 0.2, "commit": 0.1}}
    for run_id, when in (("ffff-older", 1_000.0), ("0000-newer", 2_000.0)):
        runs = [
            replace(_run(OURS, backend, rep, seconds), size=size, stage_parts=parts)
            for size in (1000, 200)
            for backend, seconds in (("in_process", 1.0), ("multiprocess", 2.0))
            for rep in (1, 2)
        ]
        record_results(catalog, run_id, runs, recorded_at=when)
    statements = _readme_history_statements()
    assert len(statements) == 2
    assert _without_comments(statements[0]) == _without_comments(HISTORY_SQL)
    for statement in statements:
        rows = catalog.query(statement)
        run_ids = [row[0] for row in rows]
        assert run_ids == ["ffff-older"] * (len(rows) // 2) + ["0000-newer"] * (len(rows) // 2)
