"""The benchmark report's tables, from measured runs built by hand (no pipeline run needed)."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from llm_assets.bench.report import (
    _RESULTS_SQL,
    HISTORY_SQL,
    RESULTS_TABLE,
    git_commit,
    markdown_report,
    ours_table,
    parts_table,
    record_results,
    reference_table,
    study_table,
)
from llm_assets.bench.runner import OURS, REFERENCE, RunResult, summarize
from llm_assets.stages.shard_io import PARTS
from llm_assets.warehouse.catalog import Catalog
from llm_assets_tests.conftest import REPO


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
        "import pickle, sys; from llm_assets.bench.report import record_results; "
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
    """Before, recorded_at was the recording process's local time: a run recorded at 08:00 UTC
    from Tokyo (17:00 there) sorted after one recorded two hours later from New York (05:00
    there), so auto took the older run's figures as the latest and the history listed the runs
    in the wrong order."""
    from llm_assets.bench.auto import read_winners

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
    """Before, the history query (the asset's ``query``) took the median of each repetition's
    rows/s while the report divides the rows by the median seconds: with two repetitions of
    1 s and 3 s on 1,000 rows the report said 500 rows/s and the history 667."""
    runs = [_run(OURS, "in_process", 1, 1.0), _run(OURS, "in_process", 2, 3.0)]
    runs += [_run(REFERENCE, "single", rep, s) for rep, s in ((1, 2.0), (2, 5.0), (3, 4.0))]
    catalog = Catalog(tmp_path / "catalog.duckdb")
    record_results(catalog, "run", runs)
    report = {(s.runner, s.backend): s.median.rows_per_second for s in summarize(runs)}
    assert report[(OURS, "in_process")] == 500.0
    history = {(row[3], row[4]): row[6] for row in catalog.query(HISTORY_SQL)}
    assert history == report


# --- history in SQL -------------------------------------------------------------------------------
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


# --- the recorded commit --------------------------------------------------------------------------
def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_git_commit_marks_uncommitted_changes(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "code.py").write_text("x = 1\n")
    _git(repo, "add", "code.py")
    _git(repo, "commit", "-q", "-m", "first")
    head = _git(repo, "rev-parse", "HEAD")
    assert git_commit(repo) == head
    (repo / "notes.txt").write_text("untracked files do not count\n")
    assert git_commit(repo) == head
    (repo / "code.py").write_text("x = 2\n")
    assert git_commit(repo) == f"{head}-dirty"
    _git(repo, "add", "code.py")  # staged but not committed: still dirty
    assert git_commit(repo) == f"{head}-dirty"
    outside = tmp_path / "not-a-checkout"
    outside.mkdir()
    assert git_commit(outside) is None
