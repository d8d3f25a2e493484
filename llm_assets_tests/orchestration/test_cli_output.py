"""What `dagster job execute` prints, run as a user runs it (a fresh process, its own working
directory): a run ends with its summary and the batches' folder; a missing folder and a misspelt
key end with one short message naming the path or the key, without a stack."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llm_assets.constants import PIPELINE_JOB
from llm_assets_tests.conftest import REPO, SAMPLE_DIR


def _execute(tmp_path: Path, run_config: dict) -> tuple[int, list[str]]:
    """(exit code, output lines) of the pipeline job run in ``tmp_path`` with ``run_config``."""
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(run_config))
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    shutil.copy(REPO / "dagster.yaml", home)  # as DAGSTER_HOME=<repository> has it
    command = [sys.executable, "-m", "dagster", "job", "execute", "-m", "llm_assets.definitions"]
    done = subprocess.run(
        [*command, "-j", PIPELINE_JOB, "-c", str(config)],
        cwd=tmp_path,
        env={**os.environ, "DAGSTER_HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    # stderr (warnings, Dagster's logs, the final error) and stdout, as a terminal shows them.
    return done.returncode, (done.stdout + done.stderr).splitlines()


def _input(folder: str) -> dict:
    return {"ops": {"raw_documents": {"config": {"input_dir": folder}}}}


@pytest.mark.slow
def test_a_run_ends_with_its_summary_and_the_batches_folder(tmp_path):
    shutil.copytree(SAMPLE_DIR, tmp_path / "sample")
    code, lines = _execute(tmp_path, {**_input("sample"), "resources": {}})
    assert code == 0, "\n".join(lines[-40:])
    # 89 lines with Dagster's 41 DEBUG events; now 62: a line per shard and stage, the summary.
    assert len(lines) < 70, "\n".join(lines)
    assert not [line for line in lines if " - DEBUG - " in line]
    start = max(i for i, line in enumerate(lines) if line.endswith(" - Run summary"))
    assert " - training_batches - " in lines[start]  # logged by the run's last step
    summary = lines[start:]
    assert summary[-1].strip() == (
        f'ds = TokenBatchDataset.from_warehouse("{tmp_path / "data" / "warehouse"}", split="train")'
    )
    (batches,) = [line.removeprefix("Batches: ") for line in summary if line.startswith("Batches")]
    assert Path(batches).is_dir() and (Path(batches) / "_COMPLETE.json").is_file()
    filtered = next(line for line in summary if line.lstrip().startswith("filtered_documents"))
    assert "too_few_tokens" in filtered and "%" in filtered


@pytest.mark.slow
def test_a_missing_folder_ends_with_its_absolute_path_and_no_stack(tmp_path):
    code, lines = _execute(tmp_path, _input("no_such_folder"))
    assert code != 0
    assert len(lines) <= 20, "\n".join(lines)  # 115 with the stacks and DEBUG events
    assert not [line for line in lines if "Stack Trace" in line or "File " in line]
    message = lines[-2]
    assert "no_such_folder" in message and "does not exist" in message
    assert str(tmp_path) in message  # the working directory it was resolved against
    assert lines[-1].startswith("Error: Run ") and lines[-1].endswith(" resulted in failure.")


def test_a_misspelt_key_ends_with_the_key_it_meant(tmp_path):
    code, lines = _execute(
        tmp_path,
        {
            "ops": {"training_batches": {"config": {"seq_lenn": 512}}, "raw_documentz": {}},
            "loggers": {"console": {"config": {"log_levl": "DEBUG"}}},
        },
    )
    assert code != 0
    assert len(lines) <= 8, "\n".join(lines)  # 69, with a 1,050-character schema, before
    assert not [line for line in lines if "Traceback" in line or "Expected:" in line]
    assert lines[-4] == "Error: the run config does not fit the job:"
    assert lines[-3:] == [
        "  loggers.console.config: unknown key 'log_levl': did you mean 'log_level'?",
        "  ops: unknown key 'raw_documentz': did you mean 'raw_documents'?",
        "  ops.training_batches.config: unknown key 'seq_lenn': did you mean 'seq_len'?",
    ]


@pytest.mark.slow
def test_a_bad_setting_ends_with_the_setting_and_its_range(tmp_path):
    code, lines = _execute(tmp_path, {"ops": {"training_batches": {"config": {"seq_len": 0}}}})
    assert code != 0
    assert len(lines) <= 20, "\n".join(lines)
    assert lines[-2] == "training_batches: seq_len must be an int in [2, 16777216], got 0"
