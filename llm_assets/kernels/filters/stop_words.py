"""The Gopher stop-word rule, a step of its own after language identification.

The rule is English-specific: run before language identification it would reject a French
paragraph as ``too_few_stop_words``; after it, the paragraph is ``wrong_language``. With other
languages kept (``languages: [en, de]``) or only annotated (``[]``), the rule checks only the
documents identified as English
(:func:`~llm_assets.kernels.filters.gopher_quality.stop_word_rows`). The other Gopher rules are
cheap and language-neutral, so they run first and the costly language model sees only the
documents they kept. Its settings are the quality filter's (``quality.min_stop_words``).
"""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from llm_assets.kernels.filters.base import Filter, SharedWords
from llm_assets.kernels.filters.gopher_quality import (
    TOO_FEW_STOP_WORDS,
    GopherQualityFilter,
    QualitySpec,
    quality_filter,
)
from llm_assets.kernels.schema import StageResult

if TYPE_CHECKING:
    from llm_assets.kernels.filters.chain import FilterSpec


class StopWordsFilter(Filter):
    """The stop-word rule of the quality spec, alone."""

    name = "stop_words"
    config_key = None
    spec_type = QualitySpec
    reasons = (TOO_FEW_STOP_WORDS,)
    switch = False

    @classmethod
    def slots(cls) -> tuple[str, ...]:
        return ()

    @classmethod
    def setting_of(cls, reason: str) -> str:
        return GopherQualityFilter.setting_of(reason)

    @classmethod
    def of(cls, spec: FilterSpec) -> Filter | None:
        quality = spec.get(GopherQualityFilter.name)
        if quality is None or quality.min_stop_words is None:
            return None
        only: dict[str, Any] = {f.name: None for f in fields(QualitySpec)}
        only.update(min_stop_words=quality.min_stop_words, stop_words=quality.stop_words)
        return cls(QualitySpec(**only))

    def apply(self, table: pa.Table, words: SharedWords) -> StageResult:
        return quality_filter(table, self.spec, words(table))
