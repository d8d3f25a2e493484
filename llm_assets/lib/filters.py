"""Document filters: each drop is a reject with its reason and the measured value."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from llm_assets.lib.schema import (
    DOC_ID,
    N_TOKENS,
    SAMPLE_CHARS,
    SOURCE_FILE,
    SOURCE_LINE,
    TEXT,
    StageResult,
    rejects_table,
)

FILTER_STAGE = "filter"
TOO_FEW_TOKENS = "too_few_tokens"
TOO_MANY_TOKENS = "too_many_tokens"


@dataclass(frozen=True)
class LengthFilterSpec:
    """Token-count bounds; the study dropped texts under 10 tokens. ``max_tokens`` None = no cap."""

    min_tokens: int = 10
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.min_tokens < 0:
            raise ValueError(f"min_tokens must be >= 0, got {self.min_tokens}")
        if self.max_tokens is not None and self.max_tokens < self.min_tokens:
            raise ValueError(
                f"max_tokens ({self.max_tokens}) must be >= min_tokens ({self.min_tokens})"
            )


def filter_table(table: pa.Table, spec: LengthFilterSpec) -> StageResult:
    """Keep documents whose ``n_tokens`` lies within the bounds; reject the rest with the count."""
    counts = table[N_TOKENS]
    too_few = pc.less(counts, spec.min_tokens)
    dropped = (
        pc.or_(too_few, pc.greater(counts, spec.max_tokens))
        if spec.max_tokens is not None
        else too_few
    )
    kept = table.filter(pc.invert(dropped))
    gone = table.filter(dropped)
    counts_gone = gone[N_TOKENS].to_pylist()
    reasons = [TOO_FEW_TOKENS if n < spec.min_tokens else TOO_MANY_TOKENS for n in counts_gone]
    rejects = rejects_table(
        doc_ids=gone[DOC_ID].to_pylist(),
        source_files=gone[SOURCE_FILE].to_pylist(),
        source_lines=gone[SOURCE_LINE].to_pylist(),
        stage=FILTER_STAGE,
        reasons=reasons,
        values=[str(n) for n in counts_gone],
        samples=pc.utf8_slice_codeunits(gone[TEXT], 0, SAMPLE_CHARS).to_pylist(),
    )
    return StageResult(kept, rejects)
