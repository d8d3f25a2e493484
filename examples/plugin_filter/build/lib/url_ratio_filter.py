"""A filter plugin for llm-assets: reject documents whose share of characters in URLs exceeds
``max_url_char_ratio`` (link lists, spam, navigation), with reason ``url_ratio``.

Installed, it is configured under ``filtered_documents.config.url_ratio`` like a built-in
filter (off until ``enabled: true``), and its rejects land in ``filtered_documents_rejects``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from llm_assets.kernels.filters.base import FILTER_STAGE, Filter, SharedWords
from llm_assets.kernels.schema import TEXT, StageResult, drop_rows

URL_RATIO = "url_ratio"
URL_PATTERN = r"(?:https?://|www\.)[^\s<>\"']+"


@dataclass(frozen=True)
class UrlRatioSpec:
    max_url_char_ratio: float = field(
        default=0.2, metadata={"doc": "Highest share of a document's characters in URLs"}
    )

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_url_char_ratio <= 1.0:
            raise ValueError(
                f"url_ratio.max_url_char_ratio must be within [0, 1], got {self.max_url_char_ratio}"
            )


class UrlRatioFilter(Filter):
    """Reject documents mostly made of URLs."""

    name = "url_ratio"
    config_key = "url_ratio"
    spec_type = UrlRatioSpec
    reasons = (URL_RATIO,)
    hint = "url_ratio.max_url_char_ratio (or enabled: false)"

    def apply(self, table: pa.Table, words: SharedWords) -> StageResult:
        texts = pc.fill_null(table[TEXT], "")
        chars = pc.utf8_length(texts).to_numpy(zero_copy_only=False).astype(np.int64)
        without = pc.replace_substring_regex(texts, URL_PATTERN, "")
        left = pc.utf8_length(without).to_numpy(zero_copy_only=False).astype(np.int64)
        share = np.divide(chars - left, chars, out=np.zeros(len(chars)), where=chars > 0)
        dropped = share > self.spec.max_url_char_ratio
        values = [f"{share[i]:.3f}" for i in np.flatnonzero(dropped)]
        return drop_rows(
            table,
            pa.array(dropped, pa.bool_()),
            stage=FILTER_STAGE,
            reasons=[URL_RATIO] * len(values),
            values=values,
        )
