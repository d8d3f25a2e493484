"""The per-shard half of deduplication as the chain's last step: every kept document is
annotated with its hashes (:func:`~llm_assets.kernels.dedup.dedup_annotate`); the stage's global
step then decides the duplicates (:mod:`llm_assets.kernels.dedup`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from llm_assets.kernels.dedup import (
    EXACT_DUPLICATE,
    NEAR_DUPLICATE,
    ExactDedupSpec,
    NearDedupSpec,
    dedup_annotate,
)
from llm_assets.kernels.filters.base import Filter, Inputs, Setting, SharedWords
from llm_assets.kernels.schema import StageResult

if TYPE_CHECKING:
    from llm_assets.kernels.filters.chain import FilterSpec


class DedupAnnotation(Filter):
    """``dedup``: exact and near duplicates, two specs (``exact_dedup``, ``near_dedup``)."""

    name = "dedup"
    config_key = "dedup"
    spec_type = NearDedupSpec
    reasons = (EXACT_DUPLICATE, NEAR_DUPLICATE)
    switch = False
    recorded_when_off = True

    def __init__(self, spec: tuple[ExactDedupSpec, NearDedupSpec]) -> None:
        super().__init__(spec)

    @classmethod
    def slots(cls) -> tuple[str, ...]:
        return ("exact_dedup", "near_dedup")

    @classmethod
    def of(cls, spec: FilterSpec) -> Filter | None:
        if not spec.dedup:
            return None
        exact = spec.exact_dedup or ExactDedupSpec(enabled=False)
        near = spec.near_dedup or NearDedupSpec(enabled=False)
        return cls((exact, near))

    @classmethod
    def settings(cls) -> tuple[Setting, ...]:
        near = NearDedupSpec()
        return (
            Setting("exact", bool, True, "Drop exact duplicates (SHA-256 of the text)"),
            Setting("near", bool, True, "Drop near duplicates (MinHash LSH)"),
            Setting("ngram", int, near.ngram, "Words per shingle"),
            Setting("num_perm", int, near.num_perm, "MinHash permutations"),
            Setting("bands", int, near.bands, "LSH bands (num_perm must be a multiple)"),
            Setting(
                "threshold", float, near.threshold, "Estimated Jaccard at which documents cluster"
            ),
        )

    @classmethod
    def from_config(cls, values: Mapping[str, Any], inputs: Inputs) -> dict[str, Any]:
        near = {k: values[k] for k in ("ngram", "num_perm", "bands", "threshold") if k in values}
        return {
            "exact_dedup": ExactDedupSpec() if values.get("exact", True) else None,
            "near_dedup": NearDedupSpec(**near) if values.get("near", True) else None,
        }

    @classmethod
    def setting_of(cls, reason: str) -> str:
        return "dedup.exact" if reason == EXACT_DUPLICATE else "dedup.near"

    def apply(self, table: pa.Table, words: SharedWords) -> StageResult:
        exact, near = self.spec
        return dedup_annotate(table, exact, near, words(table) if near.enabled else None)
