"""The registry: the built-ins in chain order, plugins from the entry-point group, and the
plugins it refuses."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pyarrow as pa
import pytest

from llm_assets.kernels.filters import registry
from llm_assets.kernels.filters.base import Filter, SharedWords
from llm_assets.kernels.filters.length import LengthFilterSpec
from llm_assets.kernels.schema import StageResult


class Clash(Filter):
    name = "quality"
    config_key = "quality"
    spec_type = LengthFilterSpec

    def apply(self, table: pa.Table, words: SharedWords) -> StageResult:
        raise NotImplementedError


NOT_A_FILTER = object()


@pytest.fixture
def entry_points(monkeypatch):
    def use(*values: str) -> None:
        points = [EntryPoint(f"p{i}", v, registry.ENTRY_POINT_GROUP) for i, v in enumerate(values)]
        monkeypatch.setattr(registry, "entry_points", lambda group: points)
        registry.plugins.cache_clear()
        registry.registry.cache_clear()

    yield use
    registry.plugins.cache_clear()
    registry.registry.cache_clear()


def test_the_builtins_in_chain_order():
    names = [f.name for f in registry.BUILTINS + registry.LAST]
    assert names == [
        "length",
        "label",
        "quality",
        "repetition",
        "flagged",
        "language",
        "stop_words",
        "decontam",
        "dedup",
    ]


def test_a_plugin_with_a_taken_name_is_refused(entry_points):
    entry_points(f"{__name__}:Clash")
    with pytest.raises(ValueError, match="must be set and not those of another filter"):
        registry.plugins()


def test_an_entry_point_that_is_no_filter_is_refused(entry_points):
    entry_points(f"{__name__}:NOT_A_FILTER")
    with pytest.raises(TypeError, match="not a Filter class"):
        registry.plugins()
