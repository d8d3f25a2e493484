"""``$LLM_ASSETS_RUN_CONFIG``: the settings of the runs the sensor and the schedules start."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from llm_assets.orchestration.run_config import (
    INPUT_DIR_ENV,
    RUN_CONFIG_ENV,
    AutomationConfigError,
    pipeline_run_config,
    watched_folder,
)
from llm_assets.orchestration.schedules import nightly_pipeline
from llm_assets.orchestration.sensors import build_input_folder_sensor
from llm_assets_tests.orchestration.test_sensors import _aged, _evaluate, _run


def test_automatic_runs_use_the_run_config_file(tmp_path, monkeypatch):
    """``$LLM_ASSETS_RUN_CONFIG`` gives the sensor's and the schedule's runs the settings of the
    user's data (with ``input_dir`` alone, data whose text is not in ``text`` would be rejected
    whole, run after run). Its ``input_dir`` is the watched folder unless
    ``$LLM_ASSETS_INPUT_DIR`` names another; the run produces documents from the ``content``
    field."""
    data = tmp_path / "in"
    data.mkdir()
    # Three long generated paragraphs, which the default filters keep, under "content".
    from llm_assets.datagen.corpus import generate_records

    texts = sorted((r["text"] for r in generate_records(60, seed=1)), key=len)[-3:]
    (data / "a.jsonl").write_text("\n".join(json.dumps({"content": t}) for t in texts) + "\n")
    _aged(data / "a.jsonl")
    config_file = tmp_path / "mine.yaml"
    config_file.write_text(
        f"ops:\n  raw_documents:\n    config: {{input_dir: {data}, text_field: content}}\n"
        "  training_batches: {config: {seq_len: 64}}\n"
    )
    monkeypatch.delenv(INPUT_DIR_ENV, raising=False)
    monkeypatch.setenv(RUN_CONFIG_ENV, str(config_file))
    assert watched_folder() == str(data)
    request = _evaluate(build_input_folder_sensor(), None).run_requests[0]
    assert request.run_config["ops"]["raw_documents"]["config"] == {
        "input_dir": str(data),
        "text_field": "content",
    }
    result = _run(request, tmp_path / "warehouse")
    assert result.success
    raw = result.asset_materializations_for_node("raw_documents")[0].metadata
    assert raw["rows_out"].value == 3
    nightly = nightly_pipeline(dg.build_schedule_context()).run_config
    assert nightly == request.run_config
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.setenv(INPUT_DIR_ENV, str(other))
    config = pipeline_run_config(watched_folder())["ops"]["raw_documents"]["config"]
    assert config == {"input_dir": str(other), "text_field": "content"}


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read"), ("ops: [unclosed", "not valid YAML"), ("- a\n- b\n", "got list")],
)
def test_a_bad_run_config_file_fails_the_tick_naming_it(tmp_path, monkeypatch, content, message):
    """A missing, non-YAML or non-mapping ``$LLM_ASSETS_RUN_CONFIG`` fails the sensor's tick and
    the schedule's, naming the file, instead of starting runs without the settings."""
    path = tmp_path / "run.yaml"
    if content is not None:
        path.write_text(content)
    monkeypatch.setenv(RUN_CONFIG_ENV, str(path))
    (tmp_path / "in").mkdir()
    monkeypatch.setenv(INPUT_DIR_ENV, str(tmp_path / "in"))
    with pytest.raises(AutomationConfigError, match=message) as raised:
        nightly_pipeline(dg.build_schedule_context())
    assert str(path) in str(raised.value)
    with pytest.raises(Exception, match=message):
        _evaluate(build_input_folder_sensor(), None)
