"""Backend ``auto``: the winner of the latest benchmark at the nearest size, else in_process."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from llm_assets.bench.auto import AutoBackend, choose_backend, estimate_rows, latest_winners
from llm_assets.bench.report import record_results
from llm_assets.bench.runner import OURS, REFERENCE, RunResult
from llm_assets.compute.backends import make_backend
from llm_assets.compute.resource import ComputeResource
from llm_assets.compute.testing import ProbeTask, run_probe
from llm_assets.warehouse.catalog import Catalog

MACHINE = {"cores": 2, "memory_gb": 24.0}


def _result(size: int, backend: str, seconds: float, runner: str = OURS, rep: int = 1):
    return RunResult(
        runner=runner, backend=backend, size=size, repetition=rep, workers=2, rows_in=size,
        rows_out=size, tokens=size * 90, bytes_in=size * 500, seconds=seconds,
        startup_seconds=0.0,
    )  # fmt: skip


def _synthetic(catalog_path: Path) -> None:
    catalog = Catalog(catalog_path)
    old = [_result(1_000, "ray", 0.1), _result(1_000_000, "ray", 1.0)]
    record_results(catalog, "old", old, machine=MACHINE, recorded_at=1_000.0)
    latest = [
        _result(1_000, "in_process", 0.3),
        _result(1_000, "multiprocess", 2.0),
        _result(1_000, "ray", 9.0),
        _result(200_000, "in_process", 40.0),
        _result(200_000, "in_process", 41.0, rep=2),
        _result(200_000, "multiprocess", 25.0),
        _result(200_000, "multiprocess", 90.0, rep=2),  # one slow repetition: median decides
        _result(200_000, "multiprocess", 26.0, rep=3),
        _result(200_000, "ray", 30.0),
        _result(200_000, "single", 1.0, runner=REFERENCE),  # the study's runners never win
    ]
    record_results(catalog, "latest", latest, machine=MACHINE, recorded_at=2_000.0)


def test_latest_run_median_winner_per_size(tmp_path):
    _synthetic(tmp_path / "catalog.duckdb")
    assert latest_winners(tmp_path / "catalog.duckdb") == {
        1_000: "in_process",
        200_000: "multiprocess",
    }


def test_nearest_measured_size_on_a_log_scale():
    winners = {1_000: "in_process", 200_000: "multiprocess"}
    assert choose_backend(winners, 500) == "in_process"
    assert choose_backend(winners, 10_000) == "in_process"  # log-nearer to 1K than to 200K
    assert choose_backend(winners, 20_000) == "multiprocess"
    assert choose_backend(winners, 5_000_000) == "multiprocess"
    assert choose_backend({}, 5_000) is None


def test_no_results_falls_back_to_in_process(tmp_path):
    messages = []

    class Log:
        def info(self, msg):
            messages.append(msg)

        def warning(self, msg):
            messages.append(msg)

    backend = make_backend("auto", benchmark_catalog=str(tmp_path / "none.duckdb"), logger=Log())
    assert isinstance(backend, AutoBackend)
    results = backend.run(run_probe, [ProbeTask("a", 3)])
    assert results[0]["value"] == 9
    assert backend.choices == [(None, "in_process")]
    assert any("no benchmark results" in m for m in messages)
    backend.close()


def test_estimate_rows_from_shard_footers(tmp_path):
    paths = []
    for i, n in enumerate((3, 5)):
        path = tmp_path / f"part-{i}.parquet"
        pq.write_table(pa.table({"x": list(range(n))}), path)
        paths.append(str(path))

    class Task:
        def __init__(self, input_path):
            self.input_path = input_path

    assert estimate_rows([Task(p) for p in paths]) == 8
    assert estimate_rows([ProbeTask("a", 1)]) is None


def test_resource_auto_picks_the_winner_per_stage_size(tmp_path):
    _synthetic(tmp_path / "catalog.duckdb")
    resource = ComputeResource(
        backend="auto", workers=2, benchmark_catalog=str(tmp_path / "catalog.duckdb")
    )
    backend = resource.get_backend()
    try:
        big = tmp_path / "big.parquet"
        pq.write_table(pa.table({"x": list(range(150_000))}), big)

        class Task:
            input_path = str(big)

        assert backend.select([Task()]) == "multiprocess"
        small = [ProbeTask("a", 2)]  # no size of its own: keeps the previous estimate
        assert backend.select(small) == "multiprocess"
        assert resource.run(run_probe, small)[0]["value"] == 4
        assert backend.choices[-1] == (150_000, "multiprocess")
    finally:
        resource.close()
