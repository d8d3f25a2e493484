"""benchmark_report, materialized for real on tiny generated corpora."""

from __future__ import annotations

import dagster as dg
import pytest

from llm_assets.assets.benchmark import benchmark_report
from llm_assets.bench.report import RESULTS_TABLE
from llm_assets.constants import BENCHMARK_JOB, BENCHMARK_REPORT, PIPELINE_JOB
from llm_assets.warehouse.resource import WarehouseResource


def _materialize(root, backends, include_reference=True):
    config = {
        "sizes": [200, 1000],
        "backends": backends,
        "repetitions": 1,
        "workers": 2,
        "include_reference": include_reference,
        "reference_ray_max_rows": 0,  # the study's Ray runner: see the slow test
        "warmup": False,
    }
    return dg.materialize(
        [benchmark_report],
        resources={"warehouse": WarehouseResource(root=str(root))},
        run_config={"ops": {BENCHMARK_REPORT: {"config": config}}},
    )


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
    metadata = _metadata(result)
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
