"""The run config of the runs that start themselves (sensor and schedules).

``$LLM_ASSETS_RUN_CONFIG`` names a YAML run config, ``$LLM_ASSETS_INPUT_DIR`` the folder they
read; both are read at every evaluation, so an edit applies to the next run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from llm_assets.constants import DEFAULT_INPUT_DIR, RAW_DOCUMENTS

INPUT_DIR_ENV = "LLM_ASSETS_INPUT_DIR"
"""Environment variable naming the folder the sensor and the nightly schedule read (default
``data/sample``; an empty value counts as unset)."""
RUN_CONFIG_ENV = "LLM_ASSETS_RUN_CONFIG"
"""Environment variable naming a YAML run config, in the format of ``dagster job execute -c``,
that every run the sensor and the nightly schedule start uses: the settings a dataset needs
(``text_field``, filters, layout, warehouse root) apply to automatic runs too. Its
``raw_documents`` ``input_dir`` is the watched folder when ``$LLM_ASSETS_INPUT_DIR`` is unset.
Read at every evaluation, so an edit applies to the next run; an unset or empty value means none."""


class AutomationConfigError(ValueError):
    """``$LLM_ASSETS_RUN_CONFIG`` names a file that cannot be read or is not a run config."""


def automation_run_config() -> dict[str, Any]:
    """The run config in the file ``$LLM_ASSETS_RUN_CONFIG`` names (:data:`RUN_CONFIG_ENV`), or
    ``{}`` when it is unset. A file that is missing, not YAML or not a mapping is an
    :class:`AutomationConfigError` naming it: the sensor's tick or the schedule's fails with it,
    rather than starting runs that silently ignore the settings the user meant them to have.
    Whether the settings themselves are valid Dagster checks when the run is requested."""
    path = os.environ.get(RUN_CONFIG_ENV)
    if not path:
        return {}
    where = f"${RUN_CONFIG_ENV}={path!r}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise AutomationConfigError(f"{where}: cannot read the run config file ({err})") from err
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise AutomationConfigError(f"{where}: not valid YAML ({err})") from err
    if config is None:
        return {}
    if not isinstance(config, dict) or not isinstance(config.get("ops", {}), dict):
        raise AutomationConfigError(
            f"{where}: a run config is a mapping like {{ops: {{raw_documents: {{config: "
            f"{{text_field: content}}}}}}}} (as for dagster job execute -c), got "
            f"{type(config).__name__}"
        )
    return config


def _config_input_dir(config: dict[str, Any]) -> str | None:
    value = config.get("ops", {}).get(RAW_DOCUMENTS, {}).get("config", {}).get("input_dir")
    return str(value) if value else None


def watched_folder(input_dir: str | Path | None = None) -> str:
    """The input folder of the sensor and the nightly schedule: ``input_dir``, else
    ``$LLM_ASSETS_INPUT_DIR``, else the ``input_dir`` of ``$LLM_ASSETS_RUN_CONFIG``'s
    ``raw_documents``, else ``data/sample``."""
    return str(
        input_dir
        or os.environ.get(INPUT_DIR_ENV)
        or _config_input_dir(automation_run_config())
        or DEFAULT_INPUT_DIR
    )


def pipeline_run_config(folder: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run config of a run the automation starts: ``$LLM_ASSETS_RUN_CONFIG``'s
    (:func:`automation_run_config`), with ``raw_documents`` reading ``folder``, then ``extra``
    merged in at every depth (so extra settings of ``raw_documents`` keep the folder)."""
    base = _deep_merge(
        automation_run_config(), {"ops": {RAW_DOCUMENTS: {"config": {"input_dir": folder}}}}
    )
    return _deep_merge(base, extra or {})


def _deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
