"""The peers (HF datasets, datatrove) do our job on the same rows, or are skipped with a line."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from llm_assets.bench import peers
from llm_assets.bench.ceiling import run_kernels
from llm_assets.bench.reference import STUDY_MIN_TOKENS, run_single
from llm_assets.bench.report import peers_table
from llm_assets.bench.runner import OURS, PEER, BenchmarkPlan, ensure_corpus, read_lines, summarize
from llm_assets.warehouse.benchmarks import RESULTS_TABLE
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets_tests.bench.test_benchmark_asset import _materialize, _metadata
from llm_assets_tests.bench.test_compare_study import TINY, _compare_study
from llm_assets_tests.bench.test_report import _rows, _run

ROWS = 200


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_corpus(tmp_path_factory.mktemp("peers-data"), ROWS)


@pytest.fixture(scope="module")
def ours(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, int]:
    """Rows kept by our kernels, and the tokens of the kept rows (the study's runner, whose
    kept rows the pipeline's tests already match)."""
    _, kept = run_kernels(read_lines(corpus), STUDY_MIN_TOKENS)
    single = run_single(corpus, tmp_path_factory.mktemp("single") / "out.jsonl")
    assert single.rows_out == kept
    return kept, single.tokens


@pytest.mark.parametrize("runner", peers.PEER_RUNNERS)
def test_a_peer_keeps_the_rows_and_tokens_ours_keep(runner, corpus, ours, tmp_path, monkeypatch):
    """Each installed peer reads every row and keeps the same rows and tokens as our kernels."""
    pytest.importorskip(peers.PEER_PACKAGES[runner])
    for key in peers.OFFLINE_ENV:  # the run sets them; restored after the test
        monkeypatch.setenv(key, "1")
    result = peers.run_peer(runner, corpus, tmp_path / "work", workers=2)
    assert (result.runner, result.workers, result.rows_in) == (runner, 2, ROWS)
    assert (result.rows_out, result.tokens) == ours
    assert 0 < result.rows_out < ROWS  # some rows are short: the filter was exercised


def test_a_missing_package_gives_the_skip_line(monkeypatch):
    monkeypatch.setitem(peers.PEER_PACKAGES, peers.DATATROVE, "no_such_package_llm_assets")
    said: list[str] = []
    kept = peers.installed_peers(peers.PEER_RUNNERS, said.append)
    assert peers.DATATROVE not in kept
    assert said == [
        "peer datatrove: skipped, package 'no_such_package_llm_assets' is not installed "
        "(pip install -e '.[peers]')"
    ]


def test_unknown_peers_are_refused():
    with pytest.raises(ValueError, match="unknown peer 'dask'"):
        peers.installed_peers(["dask"])
    with pytest.raises(ValueError, match="unknown peer 'dask'"):
        BenchmarkPlan(sizes=(10,), backends=(), peer_runners=("dask",))


def test_compare_study_prints_the_skip_line_and_runs_on(tmp_path, capsys, monkeypatch):
    """compare_study with a peer whose package is missing prints the skip line and measures the
    rest, instead of failing."""
    for runner in peers.PEER_RUNNERS:
        monkeypatch.setitem(peers.PEER_PACKAGES, runner, f"no_such_package_{runner}")
    script = _compare_study()
    args = [*TINY, "--peers", "hf_datasets,datatrove"]
    assert script.main([*args, "--data-dir", str(tmp_path / "d"), "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "peer hf_datasets: skipped, package 'no_such_package_hf_datasets'" in printed
    assert "peer datatrove: skipped, package 'no_such_package_datatrove'" in printed
    assert "| 200 | in_process |" in printed
    assert "_not run (no peer" in printed


def test_peers_table_sets_each_peer_beside_each_backend():
    runs = [
        replace(_run(OURS, "in_process", 1, 2.0), peak_total_pss_mb=300.0, cpu_seconds=3.0),
        replace(_run(PEER, "hf_datasets", 1, 8.0), peak_total_pss_mb=600.0, cpu_seconds=12.0),
        replace(_run(PEER, "datatrove", 1, 4.0), rows_out=899),
    ]
    table = peers_table(summarize(runs))
    (hf,) = _rows(table, "hf_datasets")
    assert hf[-6:] == ["in_process", "2.00", "900", "0.25", "0.50", "0.25"]
    (dt,) = _rows(table, "datatrove")
    assert dt[-4] == "900 **differs**"  # a peer that kept other rows did another job


def test_the_benchmark_asset_runs_the_installed_peers(tmp_path):
    """benchmark_report with include_peers: each peer's repetition is recorded beside ours, and
    its report's peers table shows both kept the same rows."""
    for package in peers.PEER_PACKAGES.values():
        pytest.importorskip(package)
    result = _materialize(
        tmp_path, ["in_process"], include_reference=False, include_peers=True, sizes=[ROWS]
    )
    assert result.success
    catalog = WarehouseResource(root=str(tmp_path)).catalog()
    recorded = catalog.query(
        f"SELECT runner, backend, rows_out, tokens FROM {RESULTS_TABLE} ORDER BY runner, backend"
    )
    assert [r[:2] for r in recorded] == [
        ("ours", "in_process"), ("peer", "datatrove"), ("peer", "hf_datasets")
    ]  # fmt: skip
    assert len({r[2:] for r in recorded}) == 1  # the same rows and tokens kept by all
    report = _metadata(result)["report"].value
    assert "### Peers on the same rows" in report and "**differs**" not in report
    assert "| 200 | hf_datasets | 2 |" in report and "| 200 | datatrove | 2 |" in report
