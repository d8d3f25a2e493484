"""The job as users run it: `dagster job execute` in a fresh process (outside the repository, so
only the installed package is importable), the shipped per-backend configs, and a run killed with
SIGKILL half-way and run again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from llm_assets.constants import PIPELINE_ASSETS, PIPELINE_JOB
from llm_assets.datagen.writers import write_corpus
from llm_assets.definitions import defs
from llm_assets_tests.assets.test_pipeline import output_checksums
from llm_assets_tests.conftest import REPO, pipeline_run_config


def test_definitions_load_and_every_job_resolves():
    dg.Definitions.validate_loadable(defs)
    job = defs.resolve_job_def(PIPELINE_JOB)
    assert {k.to_user_string() for k in job.asset_layer.executable_asset_keys} >= set(
        PIPELINE_ASSETS
    )
    for config_file in (REPO / "configs").glob("*.yaml"):
        assert yaml.safe_load(config_file.read_text()), config_file


def _job_command(config_files: list[Path]) -> list[str]:
    command = [sys.executable, "-m", "dagster", "job", "execute"]
    command += ["-m", "llm_assets.definitions", "-j", PIPELINE_JOB]
    for config_file in config_files:
        command += ["-c", str(config_file)]
    return command


def _write_config(tmp_path: Path, input_dir: Path, root: Path, rows_per_shard: int) -> Path:
    config = pipeline_run_config(input_dir, rows_per_shard=rows_per_shard)
    config["resources"] = {"warehouse": {"config": {"root": str(root)}}}
    path = tmp_path / f"run-{root.name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    return {**os.environ, "DAGSTER_HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0"}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["multiprocess", "ray"])
def test_dagster_job_execute_with_the_shipped_backend_config(sample_input, tmp_path, backend):
    root = tmp_path / "warehouse"
    run_config = _write_config(tmp_path, sample_input, root, 1000)
    done = subprocess.run(
        _job_command([REPO / "configs" / f"{backend}.yaml", run_config]),
        cwd=tmp_path,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Run summary" in done.stdout + done.stderr
    assert f"on {backend}" in done.stdout + done.stderr
    assert all(output_checksums(root)[asset] for asset in PIPELINE_ASSETS)


@pytest.mark.slow
def test_run_killed_midway_finishes_the_rest_byte_identical(tmp_path):
    input_dir = tmp_path / "input"
    input_dir.mkdir()
    write_corpus(input_dir / "corpus.jsonl", 6_000, seed=7)  # 30 shards of 200 rows
    env = _env(tmp_path)
    killed_root, clean_root = tmp_path / "killed", tmp_path / "clean"
    killed_config = _write_config(tmp_path, input_dir, killed_root, 200)
    clean_config = _write_config(tmp_path, input_dir, clean_root, 200)

    process = subprocess.Popen(
        _job_command([killed_config]),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    tokenized = killed_root / "tokenized_documents"
    while time.monotonic() < deadline and process.poll() is None:
        if len(list(tokenized.glob("*/part-*.parquet"))) >= 5:
            break
        time.sleep(0.02)
    assert process.poll() is None, "the run finished before it could be killed"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    partial = len(list(tokenized.glob("*/part-*.parquet")))
    assert 0 < partial < 30

    # The rerun and a clean run at once, each with a Dagster home of its own.
    clean_home = tmp_path / "clean_home"
    clean_home.mkdir()
    runs = {
        name: subprocess.Popen(
            _job_command([config]),
            cwd=tmp_path,
            env=run_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for name, config, run_env in (
            ("killed", killed_config, env),
            ("clean", clean_config, _env(clean_home)),
        )
    }
    logs = {name: run.communicate(timeout=600)[0] for name, run in runs.items()}
    for name, run in runs.items():
        assert run.returncode == 0, logs[name][-6000:]
    assert "already complete, reused" in logs["killed"]
    assert "already complete, reused" not in logs["clean"]
    killed, clean = output_checksums(killed_root), output_checksums(clean_root)
    for asset in PIPELINE_ASSETS:
        assert [s for _, s in killed[asset]] == [s for _, s in clean[asset]], asset


def test_the_docs_sensor_command_reaches_the_location_dagster_dev_loads(tmp_path, monkeypatch):
    """docs/operations.md starts sensors and schedules from the command line for the daemon of
    ``dagster dev``, which loads the code location named in pyproject.toml (``llm_assets``):
    ``-m llm_assets.definitions`` would key the state under a location of that name, which the
    daemon never sees as started."""
    import re

    from dagster._core.scheduler.instigation import InstigatorStatus

    operations = (REPO / "docs" / "operations.md").read_text()
    commands = re.findall(r"^(dagster (?:sensor|schedule) start .*?)\s+#", operations, re.MULTILINE)
    assert len(commands) == 3
    env = _env(tmp_path)
    home = Path(env["DAGSTER_HOME"])
    (home / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    sensor = next(c for c in commands if "sensor start" in c)
    dagster = Path(sys.executable).with_name("dagster")
    done = subprocess.run(
        [str(dagster), *sensor.split()[1:]],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # What dagster dev loads: workspace.yaml's location (pyproject.toml names the same).
    (entry,) = yaml.safe_load((REPO / "workspace.yaml").read_text())["load_from"]
    location = entry["python_module"]["location_name"]
    assert f'code_location_name = "{location}"' in (REPO / "pyproject.toml").read_text()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get() as instance:
        states = {
            (s.name, s.origin.repository_origin.code_location_origin.location_name): s.status
            for s in instance.all_instigator_state()
        }
    assert states == {("input_folder_sensor", location): InstigatorStatus.RUNNING}


def test_the_study_config_is_the_benchmarks_workload(tmp_path):
    """``configs/study.yaml`` gives the specs the benchmark runs as the study's workload."""
    from llm_assets.assets import pipeline
    from llm_assets.assets.config import to_spec
    from llm_assets.bench.runner import Workload
    from llm_assets.kernels.filters.chain import FilterSpec

    ops = yaml.safe_load((REPO / "configs" / "study.yaml").read_text())["ops"]
    workload = Workload()
    normalize = pipeline.NormalizeConfig(**ops["normalized_documents"]["config"])
    assert to_spec(normalize) == workload.normalize
    filters = pipeline.FilterConfig(**ops["filtered_documents"]["config"])
    assert pipeline.filter_spec(filters, tmp_path) == FilterSpec(length=workload.filter)
