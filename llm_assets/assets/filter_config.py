"""The run config of ``filtered_documents``, built from the filter registry with the stages'
builder (:func:`~llm_assets.assets.config.config_class`): each filter's block is made from its
spec (its :attr:`~llm_assets.kernels.filters.base.Filter.spec_type`, the shape its class
declares and its ``enabled`` switch) under its ``config_key``, plugins included, so nothing is
declared twice."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import dagster as dg
from pydantic import Field, create_model

from llm_assets.assets.config import config_class, to_spec
from llm_assets.kernels.filters.base import Filter, Inputs
from llm_assets.kernels.filters.chain import FilterSpec
from llm_assets.kernels.filters.registry import registry
from llm_assets.stages.raw_documents import list_input_files


@functools.cache
def _section(cls: type[Filter]) -> type[dg.Config]:
    """The config class of one filter's settings (its block under ``config_key``, or top-level
    keys when it has none)."""
    return config_class(
        cls.spec_type,
        f"{cls.__name__}Config",
        exclude=cls.exclude,
        keys=cls.keys,
        flatten=cls.flatten,
        forms=cls.forms,
        switch=cls.on_by_default if cls.switch else None,
        doc=(cls.__doc__ or "").strip(),
    )


def _configured() -> tuple[type[Filter], ...]:
    """The filters that have settings: those with a part in :class:`FilterSpec`."""
    return tuple(cls for cls in registry() if cls.slots())


def _filter_config() -> type[dg.Config]:
    fields: dict[str, Any] = {}
    for cls in _configured():
        section = _section(cls)
        if cls.config_key is None:
            fields.update({key: (f.annotation, f) for key, f in section.model_fields.items()})
        else:
            fields[cls.config_key] = (section, Field(default_factory=section))
    return create_model("FilterConfig", __base__=dg.Config, **fields)


FilterConfig = _filter_config()


def filter_spec(config: dg.Config, data_root: Path) -> FilterSpec:
    """The filter chain of ``filtered_documents`` from its run config: each filter turns its
    block into its parts, whose specs refuse bad settings. Paths are read where they are; a link
    in a folder of them must lead inside that folder or ``data_root`` (:mod:`llm_assets.paths`)."""
    inputs = Inputs(
        resolve=lambda path, setting: Path(path).expanduser().resolve(),
        input_files=lambda folder: list_input_files(folder, data_root),
    )
    parts: dict[str, Any] = {}
    for cls in _configured():
        section = _section(cls)
        if cls.config_key is None:
            block = section(**{key: getattr(config, key) for key in section.model_fields})
        else:
            block = getattr(config, cls.config_key)
        parts.update(cls.from_config(block, to_spec, inputs))
    return FilterSpec(**parts)
