"""Token-count bounds: the first step of the chain, always on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from llm_assets.kernels.filters.base import FILTER_STAGE, Filter, SharedWords
from llm_assets.kernels.schema import N_TOKENS, StageResult, drop_rows

TOO_FEW_TOKENS = "too_few_tokens"
TOO_MANY_TOKENS = "too_many_tokens"


@dataclass(frozen=True)
class LengthFilterSpec:
    """Token-count bounds; the study dropped texts under 10 tokens. ``max_tokens`` None = no cap."""

    min_tokens: int = field(
        default=10, metadata={"doc": "Drop documents with fewer tokens (study: 10)"}
    )
    max_tokens: int | None = field(
        default=None, metadata={"doc": "Drop documents with more tokens"}
    )

    def __post_init__(self) -> None:
        if self.min_tokens < 0:
            raise ValueError(f"min_tokens must be >= 0, got {self.min_tokens}")
        if self.max_tokens is not None and self.max_tokens < self.min_tokens:
            raise ValueError(
                f"max_tokens ({self.max_tokens}) must be >= min_tokens ({self.min_tokens})"
            )


def filter_length(table: pa.Table, spec: LengthFilterSpec) -> StageResult:
    """Keep documents whose ``n_tokens`` lies within the bounds; reject the rest with the count."""
    counts = table[N_TOKENS]
    too_few = pc.less(counts, spec.min_tokens)
    dropped = (
        pc.or_(too_few, pc.greater(counts, spec.max_tokens))
        if spec.max_tokens is not None
        else too_few
    )
    counts_gone = table.filter(dropped)[N_TOKENS].to_pylist()
    return drop_rows(
        table,
        dropped,
        stage=FILTER_STAGE,
        reasons=[TOO_FEW_TOKENS if n < spec.min_tokens else TOO_MANY_TOKENS for n in counts_gone],
        values=[str(n) for n in counts_gone],
    )


class LengthFilter(Filter):
    """``min_tokens`` and ``max_tokens`` at the top of ``filtered_documents.config``."""

    name = "length"
    config_key = None
    spec_type = LengthFilterSpec
    reasons = (TOO_FEW_TOKENS, TOO_MANY_TOKENS)
    switch = False
    recorded_when_off = True

    @classmethod
    def default_parts(cls) -> dict[str, Any]:
        return {cls.name: LengthFilterSpec()}

    @classmethod
    def setting_of(cls, reason: str) -> str:
        return "min_tokens" if reason == TOO_FEW_TOKENS else "max_tokens"

    def apply(self, table: pa.Table, words: SharedWords) -> StageResult:
        return filter_length(table, self.spec)
