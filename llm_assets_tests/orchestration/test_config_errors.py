"""A run config that does not fit the pipeline job, described a line per mistake against the
job's real schema; the hook prints only those errors and leaves the rest to the hook before."""

from __future__ import annotations

import sys

import dagster as dg
import pytest

from llm_assets.constants import PIPELINE_JOB
from llm_assets.definitions import defs
from llm_assets.orchestration.config_errors import (
    describe_config_error,
    install_config_error_hook,
)


def _config_error(run_config: dict) -> dg.DagsterInvalidConfigError:
    job = defs.resolve_job_def(PIPELINE_JOB)
    with pytest.raises(dg.DagsterInvalidConfigError) as info:
        job.execute_in_process(run_config=run_config)
    return info.value


def _schema():
    return defs.resolve_job_def(PIPELINE_JOB).run_config_schema.config_type


def test_a_misspelt_key_is_named_with_the_key_it_meant():
    error = _config_error({"ops": {"training_batches": {"config": {"seq_lenn": 512}}}})
    assert describe_config_error(error, _schema()) == [
        "ops.training_batches.config: unknown key 'seq_lenn': did you mean 'seq_len'?"
    ]


def test_a_key_like_none_lists_the_keys_there_and_a_wrong_type_says_so():
    error = _config_error(
        {"ops": {"raw_documents": {"config": {"zzz": 1, "rows_per_shard": "many"}}}}
    )
    lines = describe_config_error(error, _schema())
    assert len(lines) == 2 and all("Expected:" not in line for line in lines)
    unknown = next(line for line in lines if "zzz" in line)
    assert unknown.startswith("ops.raw_documents.config: unknown key 'zzz'; the keys here are ")
    assert "input_dir" in unknown and "text_field" in unknown
    assert any("rows_per_shard" in line and '"many"' in line for line in lines)


def test_the_hook_prints_config_errors_short_and_passes_on_the_rest(monkeypatch, capsys):
    passed = []
    monkeypatch.setattr(sys, "excepthook", lambda *args: passed.append(args[1]))
    install_config_error_hook(defs)
    install_config_error_hook(defs)  # once only
    error = _config_error({"ops": {"training_batches": {"config": {"seq_lenn": 512}}}})
    sys.excepthook(type(error), error, None)
    assert capsys.readouterr().err.splitlines() == [
        "Error: the run config does not fit the job:",
        "  ops.training_batches.config: unknown key 'seq_lenn': did you mean 'seq_len'?",
    ]
    other = ValueError("not a config error")
    sys.excepthook(ValueError, other, None)
    assert passed == [other]
