"""Backend ``auto``: per (size, backend) its latest measurement on a machine with this machine's
core count, the fastest at the nearest size where two backends or more were measured, else
in_process; and the default setup, where the results live in the catalog a stage holds."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from llm_assets.bench.report import recommendations, winners
from llm_assets.bench.runner import OURS, REFERENCE, RunResult, summarize
from llm_assets.compute.auto import AutoBackend, choose_backend, estimate_rows
from llm_assets.compute.backends import make_backend
from llm_assets.compute.resource import ComputeResource
from llm_assets.compute.testing import ProbeTask, run_probe
from llm_assets.constants import (
    BENCHMARK_JOB,
    BENCHMARK_REPORT,
    CATALOG_FILE,
    DEFAULT_WAREHOUSE_DIR,
    PIPELINE_ASSETS,
    PIPELINE_JOB,
)
from llm_assets.datagen.writers import write_corpus
from llm_assets.machine import machine_cores
from llm_assets.warehouse.benchmarks import read_winners, record_results
from llm_assets.warehouse.catalog import Catalog
from llm_assets_tests.conftest import SAMPLE_DIR, pipeline_run_config

MACHINE = {"cores": machine_cores(), "memory_gb": 24.0}
"""This machine as results record it: auto uses only results of a machine with its core count."""
OTHER_MACHINE = {"cores": machine_cores() + 62, "memory_gb": 512.0, "platform": "bigbox-os"}


def _result(size: int, backend: str, seconds: float, runner: str = OURS, rep: int = 1):
    return RunResult(
        runner=runner, backend=backend, size=size, repetition=rep, workers=2, rows_in=size,
        rows_out=size, tokens=size * 90, bytes_in=size * 500, seconds=seconds,
        startup_seconds=0.0,
    )  # fmt: skip


class Log:
    """A logger that keeps what it was told, by level."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, str]] = []

    def info(self, msg: str) -> None:
        self.messages.append(("info", msg))

    def warning(self, msg: str) -> None:
        self.messages.append(("warning", msg))


FULL = [
    _result(1_000, "in_process", 0.3),
    _result(1_000, "multiprocess", 2.0),
    _result(1_000, "ray", 9.0),
    _result(200_000, "in_process", 40.0),
    _result(200_000, "in_process", 41.0, rep=2),
    _result(200_000, "multiprocess", 25.0),
    _result(200_000, "multiprocess", 90.0, rep=2),  # one slow repetition: the median decides
    _result(200_000, "multiprocess", 26.0, rep=3),
    _result(200_000, "ray", 30.0),
    _result(200_000, "single", 1.0, runner=REFERENCE),  # the study's runners never win
]


def test_median_winner_per_size_each_backend_at_its_latest_run(tmp_path):
    catalog = Catalog(tmp_path / "catalog.duckdb")
    old = [_result(1_000, "ray", 0.1), _result(1_000_000, "ray", 1.0)]
    record_results(catalog, "old", old, machine=MACHINE, recorded_at=1_000.0)
    record_results(catalog, "latest", FULL, machine=MACHINE, recorded_at=2_000.0)
    assert read_winners(catalog.path) == {
        1_000: "in_process",  # ray's 0.1 s is replaced by its later 9.0 s
        200_000: "multiprocess",
        # 1,000,000: only ray was ever measured there, so it won nothing
    }
    old_mp = [_result(1_000_000, "multiprocess", 2.0)]
    record_results(catalog, "old-mp", old_mp, machine=MACHINE, recorded_at=500.0)
    # Measured in an older run than the latest at other sizes: still counts, beside ray's.
    assert read_winners(catalog.path)[1_000_000] == "ray"


def test_a_partial_run_replaces_only_what_it_measured(tmp_path):
    """A later run of Ray alone at one size does not override the other backends' figures there,
    nor any other size; its report recommends nothing (one backend, nothing to compare)."""
    catalog = Catalog(tmp_path / "catalog.duckdb")
    record_results(catalog, "full", FULL, machine=MACHINE, recorded_at=1_000.0)
    partial = [_result(200_000, "ray", 28.0)]  # faster than before, still slower than multiprocess
    record_results(catalog, "ray-only", partial, machine=MACHINE, recorded_at=2_000.0)
    assert read_winners(catalog.path) == {1_000: "in_process", 200_000: "multiprocess"}

    summaries = summarize(partial)
    assert winners(summaries) == {}
    (line,) = recommendations(summaries)
    assert "only `ray` was measured" in line and "no recommendation" in line

    faster = [_result(200_000, "ray", 20.0)]  # now Ray's latest figure beats multiprocess's
    record_results(catalog, "ray-again", faster, machine=MACHINE, recorded_at=3_000.0)
    assert read_winners(catalog.path) == {1_000: "in_process", 200_000: "ray"}


def test_report_and_auto_agree_on_the_median_of_two_repetitions(tmp_path):
    """in_process [1.0, 3.0] has the lower minimum, multiprocess [1.5, 1.6] the lower median
    (2.0 against 1.55): the report and auto both take the true median, so both say multiprocess."""
    runs = [
        _result(1_000, "in_process", 1.0),
        _result(1_000, "in_process", 3.0, rep=2),
        _result(1_000, "multiprocess", 1.5),
        _result(1_000, "multiprocess", 1.6, rep=2),
    ]
    catalog = Catalog(tmp_path / "catalog.duckdb")
    record_results(catalog, "run", runs, machine=MACHINE)
    summaries = summarize(runs)
    assert {s.backend: s.median.seconds for s in summaries} == pytest.approx(
        {"in_process": 2.0, "multiprocess": 1.55}
    )
    assert winners(summaries)[1_000].backend == "multiprocess"
    assert recommendations(summaries)[0].startswith("- **1,000 rows: `multiprocess`**")
    assert read_winners(catalog.path) == {1_000: "multiprocess"}


def _falls_back_in_process(catalog: Catalog | Path, log: Log | None = None) -> str:
    """Run a probe on backend auto over ``catalog`` (or a catalog file's path): it must run
    in-process and warn once; return the warning."""
    log = log or Log()
    path = catalog.path if isinstance(catalog, Catalog) else catalog
    backend = make_backend("auto", benchmark_catalog=str(path), logger=log)
    try:
        assert backend.run(run_probe, [ProbeTask("a", 2)])[0]["value"] == 4
        assert backend.choices == [(None, "in_process")]
    finally:
        backend.close()
    (warning,) = [m for level, m in log.messages if level == "warning"]
    return warning


def test_a_size_where_one_backend_was_measured_has_no_winner(tmp_path):
    """A size where only one backend was measured has no winner: a run of Ray alone at 1,000 rows
    (whose own report says "no recommendation") sends no stage to Ray, and auto says why."""
    catalog = Catalog(tmp_path / "catalog.duckdb")
    record_results(catalog, "ray-only", [_result(1_000, "ray", 3.1)], machine=MACHINE)
    assert read_winners(catalog.path) == {}
    warning = _falls_back_in_process(catalog)
    assert "one backend per size (1,000 rows: ray)" in warning and "using in_process" in warning

    partial = Catalog(tmp_path / "partial.duckdb")
    runs = [
        _result(1_000, "in_process", 0.7),
        _result(1_000, "multiprocess", 1.3),
        _result(200_000, "in_process", 7.3),
        _result(200_000, "multiprocess", 5.1),
        _result(1_000_000, "ray", 40.0),
    ]
    record_results(partial, "a", runs, machine=MACHINE)
    assert read_winners(partial.path) == {1_000: "in_process", 200_000: "multiprocess"}
    assert choose_backend(read_winners(partial.path), 5_000_000) == "multiprocess"


def test_results_of_a_machine_with_another_core_count_are_not_used(tmp_path):
    """Results recorded on a machine with another core count (64 cores) do not choose this
    machine's backend, and auto logs where its figures come from."""
    catalog = Catalog(tmp_path / "catalog.duckdb")
    big = [_result(1_000, "in_process", 0.7), _result(1_000, "multiprocess", 0.4)]
    record_results(catalog, "bigbox", big, machine=OTHER_MACHINE, commit="0000old")
    assert read_winners(catalog.path) == {}
    assert read_winners(catalog.path, cores=OTHER_MACHINE["cores"]) == {1_000: "multiprocess"}
    warning = _falls_back_in_process(catalog)
    assert f"{OTHER_MACHINE['cores']} cores: 2 result(s) from run(s) bigbox" in warning
    assert f"this machine's {machine_cores()} cores" in warning and "using in_process" in warning

    # This machine's own results count, though older than the other machine's at that size.
    here = [_result(1_000, "in_process", 0.5), _result(1_000, "multiprocess", 1.5)]
    record_results(catalog, "here", here, machine=MACHINE, commit="abc123", recorded_at=1_000.0)
    assert read_winners(catalog.path) == {1_000: "in_process"}
    log = Log()
    backend = make_backend("auto", benchmark_catalog=str(catalog.path), logger=log)
    try:
        assert backend.select([ProbeTask("a", 2)]) == "in_process"
    finally:
        backend.close()
    (basis,) = [m for level, m in log.messages if "fastest per size" in m]
    assert "1,000 rows: in_process (compared in_process 0.50 s, multiprocess 1.50 s)" in basis
    assert f"run here (commit abc123, {machine_cores()} cores, 24.0 GB)" in basis
    assert "left out, recorded with another core count" in basis and "bigbox" in basis


def test_nearest_measured_size_on_a_log_scale():
    winners = {1_000: "in_process", 200_000: "multiprocess"}
    assert choose_backend(winners, 500) == "in_process"
    assert choose_backend(winners, 10_000) == "in_process"  # log-nearer to 1K than to 200K
    assert choose_backend(winners, 20_000) == "multiprocess"
    assert choose_backend(winners, 5_000_000) == "multiprocess"
    assert choose_backend({}, 5_000) is None


def test_no_results_falls_back_to_in_process(tmp_path):
    log = Log()
    backend = make_backend("auto", benchmark_catalog=str(tmp_path / "none.duckdb"), logger=log)
    assert isinstance(backend, AutoBackend)
    results = backend.run(run_probe, [ProbeTask("a", 3)])
    assert results[0]["value"] == 9
    assert backend.choices == [(None, "in_process")]
    assert any(level == "info" and "no benchmark results" in m for level, m in log.messages)
    backend.close()


def test_a_catalog_that_cannot_be_read_is_logged_as_an_error_not_as_no_results(tmp_path):
    broken = tmp_path / "catalog.duckdb"
    broken.write_bytes(b"not a duckdb file " * 512)
    log = Log()
    warning = _falls_back_in_process(broken, log)
    assert "cannot read the benchmark results" in warning and str(broken) in warning
    assert "using in_process" in warning
    assert not any("no benchmark results" in m for _, m in log.messages)


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


def test_estimate_rows_of_compressed_inputs_from_their_uncompressed_size(tmp_path):
    """A 2,000-row corpus is estimated near 2,000 rows whether plain, gzip (ISIZE trailer),
    zstd with its content size in the frame header, or streamed zstd (no size: the ratio)."""
    plain = write_corpus(tmp_path / "plain" / "c.jsonl", 2_000)
    gz = write_corpus(tmp_path / "gz" / "c.jsonl.gz", 2_000)
    streamed = write_corpus(tmp_path / "zst" / "c.jsonl.zst", 2_000)
    sized = tmp_path / "sized" / "c.jsonl.zst"
    sized.parent.mkdir()
    sized.write_bytes(zstandard.ZstdCompressor().compress(plain.read_bytes()))
    assert zstandard.frame_content_size(sized.read_bytes()) == plain.stat().st_size
    assert gzip.decompress(gz.read_bytes()) == plain.read_bytes()

    class Ingest:
        byte_range = None

        def __init__(self, path: Path) -> None:
            self.path = str(path)

    exact = estimate_rows([Ingest(plain)])
    assert exact == pytest.approx(2_000, rel=0.1)
    assert estimate_rows([Ingest(gz)]) == exact
    assert estimate_rows([Ingest(sized)]) == exact
    assert estimate_rows([Ingest(streamed)]) == pytest.approx(2_000, rel=0.25)


def test_resource_auto_picks_the_winner_per_stage_size(tmp_path):
    catalog = Catalog(tmp_path / "catalog.duckdb")
    record_results(catalog, "latest", FULL, machine=MACHINE)
    resource = ComputeResource(backend="auto", workers=2, benchmark_catalog=str(catalog.path))
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
        assert resource.take_backend_choices() == [(150_000, "multiprocess")] * 3
        assert resource.take_backend_choices() == []  # each choice reported once
    finally:
        resource.close()


def test_default_setup_auto_runs_the_pipeline_on_the_benchmarks_winner(tmp_path, monkeypatch):
    """The default setup, as a user runs it: both jobs with the definitions' own resources (the
    warehouse at data/warehouse, auto reading data/warehouse/catalog.duckdb); first the benchmark,
    then llm_pipeline with backend auto, whose stages hold that same catalog open while auto reads
    the results. Only multiprocess is measured for real, beside an in_process figure far slower
    recorded by hand (auto needs two backends at a size): a fallback to in_process cannot pass."""
    from llm_assets.definitions import defs

    monkeypatch.chdir(tmp_path)
    shutil.copytree(SAMPLE_DIR, tmp_path / "input")
    benchmark_config = {
        "sizes": [200], "backends": ["multiprocess"], "repetitions": 1, "workers": 2,
        "include_reference": False, "include_peers": False, "warmup": False,
    }  # fmt: skip
    benchmark = defs.resolve_job_def(BENCHMARK_JOB).execute_in_process(
        run_config={"ops": {BENCHMARK_REPORT: {"config": benchmark_config}}}
    )
    assert benchmark.success
    catalog_path = tmp_path / DEFAULT_WAREHOUSE_DIR / CATALOG_FILE
    slow = [_result(200, "in_process", 1_000.0)]
    record_results(Catalog(catalog_path), "slow-in-process", slow, machine=MACHINE)
    assert read_winners(catalog_path) == {200: "multiprocess"}

    run_config = pipeline_run_config(tmp_path / "input")
    run_config["resources"] = {"compute": {"config": {"backend": "auto", "workers": 2}}}
    pipeline = defs.resolve_job_def(PIPELINE_JOB).execute_in_process(run_config=run_config)
    assert pipeline.success
    metadata = {
        event.asset_key.to_user_string(): event.step_materialization_data.materialization.metadata
        for event in pipeline.get_asset_materialization_events()
    }
    assert set(metadata) == set(PIPELINE_ASSETS)
    for asset, meta in metadata.items():
        assert meta["compute_backend"].value == "multiprocess", asset
        choices = meta["compute_backend_choices"].value
        assert choices and all(c["backend"] == "multiprocess" for c in choices), asset
