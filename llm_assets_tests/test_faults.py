"""Faults a team meets when the pipeline runs unattended: a full disk, an unwritable warehouse,
two runs at once, and worker processes killed in the middle of a shard."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import psutil
import pytest
import yaml

from llm_assets.assets.pipeline import PIPELINE_ASSET_DEFS
from llm_assets.compute.resource import ComputeResource
from llm_assets.constants import PIPELINE_ASSETS
from llm_assets.datagen.writers import write_corpus
from llm_assets.warehouse.catalog import Catalog
from llm_assets.warehouse.resource import WarehouseResource
from llm_assets.warehouse.shards import file_checksum
from llm_assets_tests.assets.test_cli import _env, _job_command, _write_config
from llm_assets_tests.assets.test_pipeline import _failure_message, output_checksums
from llm_assets_tests.conftest import REPO, SAMPLE_DIR, pipeline_run_config


def _materialize(input_dir: Path, root: Path, backend: str = "in_process"):
    return dg.materialize(
        PIPELINE_ASSET_DEFS,
        resources={
            "compute": ComputeResource(backend=backend, workers=2),
            "warehouse": WarehouseResource(root=str(root)),
        },
        run_config=pipeline_run_config(input_dir),
        raise_on_error=False,
    )


@pytest.fixture(scope="module")
def clean_sample_checksums(tmp_path_factory) -> dict[str, list[str]]:
    """Asset -> checksums of a clean in-process run on the shipped sample (the run config of
    ``pipeline_run_config``): the reference the tests below compare their runs with, computed
    once (outputs do not depend on the input folder's path or on the backend)."""
    base = tmp_path_factory.mktemp("clean_sample")
    shutil.copytree(SAMPLE_DIR, base / "input")
    assert _materialize(base / "input", base / "warehouse").success
    return _checksums(base / "warehouse")


def _checksums(root: Path) -> dict[str, list[str]]:
    """Asset -> the checksums of its current output and rejects files, in catalog order."""
    return {asset: [s for _, s in files] for asset, files in output_checksums(root).items()}


def _assert_catalog_only_holds_complete_shards(root: Path) -> None:
    """Every shard the catalog records exists with its recorded checksum; no temporary file is
    visible anywhere in the warehouse."""
    catalog = Catalog(root / "catalog.duckdb")
    if catalog.path.exists():
        for path, checksum in catalog.query("SELECT path, checksum FROM shards"):
            assert Path(path).exists(), path
            assert file_checksum(path) == checksum, path
    assert not [p for p in root.rglob("*") if ".tmp" in p.name], "temporary files left behind"


def test_warehouse_that_is_not_a_folder_fails_naming_it(sample_input, tmp_path):
    root = tmp_path / "warehouse"
    root.write_text("a file, not a folder")
    result = _materialize(sample_input, root)
    assert not result.success
    message = _failure_message(result)
    assert "warehouse" in message and str(root) in message, message


def _mount_tmpfs(path: Path, megabytes: int) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(path)],
        capture_output=True,
    )
    return done.returncode == 0


@pytest.fixture
def small_disk(tmp_path):
    """A 24 MB tmpfs to fill up (needs root, as in CI); unmounted afterwards."""
    mount = tmp_path / "disk"
    if os.geteuid() != 0 or not _mount_tmpfs(mount, 24):
        pytest.skip("mounting a small tmpfs needs root with CAP_SYS_ADMIN")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


def test_full_disk_fails_clearly_records_nothing_partial_and_resumes(small_disk, tmp_path):
    input_dir = small_disk / "input"
    input_dir.mkdir()
    write_corpus(input_dir / "corpus.jsonl", 8_000, seed=3)
    root = small_disk / "warehouse"
    filler = small_disk / "filler.bin"
    # Leave ~3 MB free: enough for the first stage or two, not for the whole run.
    free = shutil.disk_usage(small_disk).free
    filler.write_bytes(b"\0" * max(free - 3 * 1024 * 1024, 0))
    result = _materialize(input_dir, root)
    assert not result.success
    message = _failure_message(result)
    assert "No space left on device" in message or "not writable" in message, message
    assert str(root) in message, message
    _assert_catalog_only_holds_complete_shards(root)

    filler.unlink()  # free the space: the next run finishes, reusing what was complete
    again = _materialize(input_dir, root)
    assert again.success
    _assert_catalog_only_holds_complete_shards(root)


@pytest.mark.slow
def test_two_runs_at_once_both_succeed_and_the_catalog_stays_whole(
    sample_input, tmp_path, clean_sample_checksums
):
    """A sensor run and a manual run on one warehouse: the instance's concurrency pool (as in the
    shipped dagster.yaml) makes the second wait; neither corrupts the catalog."""
    root = tmp_path / "warehouse"
    env = _env(tmp_path)
    shutil.copy(REPO / "dagster.yaml", Path(env["DAGSTER_HOME"]) / "dagster.yaml")
    config = _write_config(tmp_path, sample_input, root, 1000)
    # The instance exists before two runs can overlap (a sensor needs a running daemon); creating
    # its SQLite tables from two processes at once is a race inside Dagster, not ours.
    migrate = [sys.executable, "-m", "dagster", "instance", "migrate"]
    subprocess.run(migrate, cwd=tmp_path, env=env, check=True, capture_output=True, timeout=300)
    runs = [
        subprocess.Popen(
            _job_command([config]),
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [run.communicate(timeout=600)[0] for run in runs]
    for run, output in zip(runs, outputs, strict=True):
        assert run.returncode == 0, output[-3000:]
    _assert_catalog_only_holds_complete_shards(root)
    catalog = Catalog(root / "catalog.duckdb")
    for asset in PIPELINE_ASSETS:
        assert catalog.query(f"SELECT count(*) FROM {asset}")[0][0] > 0
    ours = _checksums(root)
    for asset in PIPELINE_ASSETS:
        assert ours[asset] == clean_sample_checksums[asset], asset


def _worker_processes(parent: psutil.Process, backend: str) -> list[psutil.Process]:
    found = []
    for child in parent.children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
        except psutil.Error:
            continue
        ray_worker = cmdline.startswith("ray::shard_task")  # a worker running a shard task
        pool_worker = "spawn_main" in cmdline
        if ray_worker if backend == "ray" else pool_worker:
            found.append(child)
    return found


KILLED_CORPUS_ROWS = 20_000
"""Twenty shards of 1000 rows: workers are still busy after the first tokenized shard is written."""


@pytest.fixture(scope="module")
def killed_corpus(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    """The input folder of the worker-killing tests and the checksums of a clean in-process run
    on it (the reference both backends' runs must equal), made once for the module."""
    base = tmp_path_factory.mktemp("killed_corpus")
    input_dir = base / "input"
    input_dir.mkdir()
    write_corpus(input_dir / "corpus.jsonl", KILLED_CORPUS_ROWS, seed=5)
    assert _materialize(input_dir, base / "clean").success
    return input_dir, _checksums(base / "clean")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["multiprocess", "ray"])
def test_worker_killed_mid_shard_is_retried_and_the_output_is_identical(
    tmp_path, backend, killed_corpus
):
    input_dir, reference = killed_corpus
    env = _env(tmp_path)
    root = tmp_path / "killed"
    path = _write_config(tmp_path, input_dir, root, 1000)
    config = yaml.safe_load(path.read_text())
    compute = {"backend": backend, "workers": 2}
    if backend == "ray":
        # Every shard in a Ray worker: a driver that works while Ray starts can finish a loaded
        # machine's whole run before any worker exists to kill.
        compute["ray_work_while_starting"] = False
    config["resources"]["compute"] = {"config": compute}
    path.write_text(yaml.safe_dump(config))

    process = subprocess.Popen(
        _job_command([path]),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    driver = psutil.Process(process.pid)
    tokenized = root / "tokenized_documents"
    killed = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None and killed is None:
        if list(tokenized.glob("*/part-*.parquet")):
            workers = _worker_processes(driver, backend)
            if workers:
                killed = workers[0]
                killed.send_signal(signal.SIGKILL)
                break
        time.sleep(0.01)
    output = process.communicate(timeout=600)[0]
    assert killed is not None, "no worker found to kill:\n" + output[-3000:]
    assert process.returncode == 0, output[-3000:]
    ours = _checksums(root)
    for asset in PIPELINE_ASSETS:
        assert ours[asset] == reference[asset], asset
    _assert_catalog_only_holds_complete_shards(root)


def _pipeline_job():
    """The shipped pipeline job (module level: ``dg.reconstructable`` needs it by name)."""
    from llm_assets.constants import PIPELINE_JOB
    from llm_assets.definitions import defs

    return defs.resolve_job_def(PIPELINE_JOB)


def test_reexecute_from_failure_runs_only_the_failed_steps(
    sample_input, tmp_path, clean_sample_checksums
):
    """A run fails at tokenization (its output folder is blocked); once fixed, Dagster's
    re-execute-from-failure runs tokenization and what follows, and the output equals a clean
    run's."""
    root = tmp_path / "warehouse"
    (root).mkdir()
    blocker = root / "tokenized_documents"
    blocker.write_text("in the way")
    run_config = pipeline_run_config(sample_input)
    run_config["resources"] = {"warehouse": {"config": {"root": str(root)}}}
    with dg.instance_for_test() as instance:
        job = dg.reconstructable(_pipeline_job)
        first = dg.execute_job(job, instance=instance, run_config=run_config)
        assert not first.success
        failed = [e.step_key for e in first.all_events if e.event_type_value == "STEP_FAILURE"]
        assert failed == ["tokenized_documents"]
        blocker.unlink()
        again = dg.execute_job(
            job,
            instance=instance,
            reexecution_options=dg.ReexecutionOptions.from_failure(first.run_id, instance),
        )
        assert again.success
        ran = {e.step_key for e in again.all_events if e.event_type_value == "STEP_SUCCESS"}
        assert ran == {"tokenized_documents", "filtered_documents", "training_batches"}
    ours = _checksums(root)
    for asset in PIPELINE_ASSETS:
        assert ours[asset] == clean_sample_checksums[asset], asset
