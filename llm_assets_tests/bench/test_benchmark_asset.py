"""benchmark_report, materialized for real on tiny generated corpora."""

from __future__ import annotations

import dagster as dg
import pytest

from llm_assets.assets.benchmark import benchmark_report
from llm_assets.constants import BENCHMARK_JOB, BENCHMARK_REPORT, PIPELINE_JOB
from llm_assets.warehouse.benchmarks import HISTORY_SQL, RESULTS_TABLE
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.bench.test_plan import TOO_MANY_WORKERS


def _materialize(root, backends, include_reference=True, **overrides):
    config = {
        "sizes": [200, 1000],
        "backends": backends,
        "repetitions": 1,
        "workers": 2,
        "include_reference": include_reference,
        "include_peers": False,  # the peers' own tests: llm_assets_tests/bench/test_peers.py
        "reference_ray_max_rows": 0,  # the study's Ray runner: see the slow test
        "warmup": False,
        **overrides,
    }
    return dg.materialize(
        [benchmark_report],
        resources={"warehouse": WarehouseResource(root=str(root))},
        run_config={"ops": {BENCHMARK_REPORT: {"config": config}}},
        raise_on_error=False,
    )


def _failure(result) -> str:
    """The message of the failed step's error (with its causes)."""
    (event,) = [e for e in result.all_events if e.is_step_failure]
    error = event.step_failure_data.error
    messages = []
    while error is not None:
        messages.append(error.message)
        error = error.cause
    return "\n".join(messages)


def _metadata(result):
    (event,) = result.get_asset_materialization_events()
    return event.step_materialization_data.materialization.metadata


def test_benchmark_report_records_rows_and_markdown(tmp_path):
    result = _materialize(tmp_path, ["in_process", "multiprocess"])
    assert result.success
    catalog = WarehouseResource(root=str(tmp_path)).catalog()
    rows = catalog.query(
        f"SELECT size, runner, backend, rows_in, seconds, peak_total_pss_mb, cpu_seconds "
        f"FROM {RESULTS_TABLE} ORDER BY size, runner, backend"
    )
    assert [(r[0], r[1], r[2]) for r in rows] == [
        (size, runner, backend)
        for size in (200, 1000)
        for runner, backend in [
            ("ours", "in_process"),
            ("ours", "multiprocess"),
            ("reference", "multiprocessing"),
            ("reference", "single"),
        ]
    ]
    assert all(r[3] == r[0] for r in rows)  # every generated row was read
    assert all(r[4] > 0 and r[5] > 0 and r[6] > 0 for r in rows)
    # Ours and the study's runners count the same thing: the kept documents and their tokens.
    counted = catalog.query(
        f"SELECT size, runner, backend, rows_out, tokens FROM {RESULTS_TABLE} "
        "WHERE backend IN ('in_process', 'single') ORDER BY size, runner"
    )
    for ours, study in zip(counted[::2], counted[1::2], strict=True):
        assert (ours[1], study[1]) == ("ours", "reference")
        assert ours[3:] == study[3:] and ours[3] < ours[0]  # some rows are dropped
    metadata = _metadata(result)
    assert next(iter(metadata)) == "summary"  # the UI shows the metadata in this order
    assert metadata["summary"].value.startswith("#### Fastest backend per corpus size")
    assert "- **1,000 rows**: " in metadata["summary"].value
    report = metadata["report"].value
    assert "### Our pipeline" in report
    assert "| 1,000 | multiprocess |" in report
    assert "re-measured here" in report and "| 32,432 | Ray, 4 actors |" in report
    assert "Recommendation" in report
    assert "### Where each stage's time goes" in report
    assert "| 1,000 | multiprocess | tokenized_documents |" in report
    parts = catalog.query(
        f"SELECT DISTINCT json_keys(stage_parts->'$.filtered_documents') FROM {RESULTS_TABLE} "
        "WHERE runner = 'ours'"
    )
    assert parts == [(["commit", "compute", "read", "write"],)]  # stored with sorted keys
    assert metadata["throughput_chart"].value.startswith("![")
    assert "data:image/png;base64," in metadata["memory_chart"].value
    assert metadata["rows_recorded"].value == 8
    assert set(metadata["winners"].value) == {"200", "1000"}
    assert HISTORY_SQL in metadata["query"].value


def test_a_failure_midway_keeps_what_was_measured_and_fails_the_run(tmp_path):
    """The 1,000-row corpus cannot be read (a folder where its file should be): the run fails
    with that error, and the 200-row repetitions measured before it are in benchmark_results."""
    blocker = tmp_path / BENCHMARK_REPORT / "data" / "seed-0" / "rows-1000" / "corpus.jsonl"
    blocker.mkdir(parents=True)
    result = _materialize(tmp_path, ["in_process"], include_reference=False, repetitions=2)
    assert not result.success
    assert "holds no input files" in _failure(result)
    rows = (
        WarehouseResource(root=str(tmp_path))
        .catalog()
        .query(f"SELECT size, backend, repetition FROM {RESULTS_TABLE} ORDER BY repetition")
    )
    assert rows == [(200, "in_process", 1), (200, "in_process", 2)]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"backends": [], "include_reference": False}, "nothing to measure"),
        ({"workers": -1}, "workers must be >= 0"),
        # Refused by the plan, before any corpus is generated.
        ({"workers": TOO_MANY_WORKERS}, f"workers {TOO_MANY_WORKERS} is more than"),
    ],
)
def test_a_plan_that_cannot_run_is_refused_before_any_work(tmp_path, overrides, message):
    result = _materialize(tmp_path, **{"backends": ["in_process"], **overrides})
    assert not result.success
    assert message in _failure(result)
    assert not (tmp_path / BENCHMARK_REPORT / "data").exists()  # no corpus generated


def test_benchmark_is_its_own_job_not_in_the_pipeline():
    from llm_assets.definitions import defs

    pipeline = defs.resolve_job_def(PIPELINE_JOB)
    benchmark = defs.resolve_job_def(BENCHMARK_JOB)
    assert BENCHMARK_REPORT not in {n.name for n in pipeline.graph.node_defs}
    assert [n.name for n in benchmark.graph.node_defs] == [BENCHMARK_REPORT]


@pytest.mark.slow
def test_benchmark_report_with_ray(tmp_path):
    result = _materialize(tmp_path, ["ray"], include_reference=False)
    assert result.success
    rows = (
        WarehouseResource(root=str(tmp_path))
        .catalog()
        .query(f"SELECT backend, startup_seconds, peak_processes FROM {RESULTS_TABLE}")
    )
    assert len(rows) == 2
    assert all(r[0] == "ray" and r[1] > 0.5 and r[2] > 3 for r in rows)
