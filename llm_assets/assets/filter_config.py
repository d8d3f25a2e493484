"""The run config of ``filtered_documents``, built from the filter registry: each filter's
settings (:meth:`~llm_assets.kernels.filters.base.Filter.settings`, declared once on its spec)
under its key, plugins included, so nothing is declared twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field, create_model

from llm_assets.kernels.filters.base import Filter, Inputs, Setting
from llm_assets.kernels.filters.chain import FilterSpec
from llm_assets.kernels.filters.registry import registry
from llm_assets.stages.raw_documents import list_input_files


def _field(setting: Setting) -> tuple[Any, Any]:
    return setting.type, Field(setting.default, description=setting.help or None)


def _section(cls: type[Filter]) -> type[dg.Config]:
    """The config class of one filter's settings (its block under ``config_key``)."""
    fields = {s.name: _field(s) for s in cls.settings()}
    doc = (cls.__doc__ or "").strip()
    return create_model(f"{cls.__name__}Config", __base__=dg.Config, __doc__=doc, **fields)


def _filter_config() -> type[dg.Config]:
    fields: dict[str, Any] = {}
    for cls in registry():
        if cls.config_key is None:
            fields.update({s.name: _field(s) for s in cls.settings()})
        else:
            section = _section(cls)
            fields[cls.config_key] = (section, Field(default_factory=section))
    return create_model("FilterConfig", __base__=dg.Config, **fields)


FilterConfig = _filter_config()


def filter_spec(config: dg.Config, data_root: Path) -> FilterSpec:
    """The filter chain of ``filtered_documents`` from its run config: each filter turns its
    settings into its spec, which refuses bad ones. Paths are read where they are; a link in a
    folder of them must lead inside that folder or ``data_root`` (:mod:`llm_assets.paths`)."""
    inputs = Inputs(
        resolve=lambda path, setting: Path(path).expanduser().resolve(),
        input_files=lambda folder: list_input_files(folder, data_root),
    )
    values = config.model_dump()
    parts: dict[str, Any] = {}
    for cls in registry():
        if cls.config_key is None:
            given = {s.name: values[s.name] for s in cls.settings()}
        else:
            given = values[cls.config_key]
        parts.update(cls.from_config(given, inputs))
    return FilterSpec(**parts)
