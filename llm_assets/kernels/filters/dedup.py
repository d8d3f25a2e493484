"""The per-shard half of deduplication as the chain's last step: every kept document is
annotated with its hashes (:func:`~llm_assets.kernels.dedup.dedup_annotate`); the stage's global
step then decides the duplicates (:mod:`llm_assets.kernels.dedup`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import pyarrow as pa

from llm_assets.kernels.dedup import (
    EXACT_DUPLICATE,
    NEAR_DUPLICATE,
    ExactDedupSpec,
    NearDedupSpec,
    dedup_annotate,
)
from llm_assets.kernels.filters.base import Build, Filter, Inputs, SharedWords
from llm_assets.kernels.schema import StageResult

if TYPE_CHECKING:
    from llm_assets.kernels.filters.chain import FilterSpec


@dataclass(frozen=True)
class DedupSpecs:
    """The ``dedup`` block of the run config: both specs, each on when its ``enabled`` is."""

    exact: ExactDedupSpec = field(default_factory=ExactDedupSpec)
    near: NearDedupSpec = field(default_factory=NearDedupSpec)


class DedupAnnotation(Filter):
    """``dedup``: exact and near duplicates, two specs (``exact_dedup``, ``near_dedup``)."""

    name = "dedup"
    config_key = "dedup"
    spec_type = DedupSpecs
    flatten = ("exact", "near")
    keys: ClassVar[Mapping[str, str]] = {
        "exact.enabled": "exact",
        "near.enabled": "near",
        **{f"near.{name}": name for name in ("ngram", "num_perm", "bands", "threshold")},
    }
    exclude = ("near.seed",)
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
    def from_config(cls, config: Any, build: Build, inputs: Inputs) -> dict[str, Any]:
        """Both specs; near-dedup's other settings are not checked when it is off."""
        both = build(config) if config.near else build(config, near=NearDedupSpec(enabled=False))
        return {
            "exact_dedup": both.exact if both.exact.enabled else None,
            "near_dedup": both.near if both.near.enabled else None,
        }

    @classmethod
    def setting_of(cls, reason: str) -> str:
        return "dedup.exact" if reason == EXACT_DUPLICATE else "dedup.near"

    def apply(self, table: pa.Table, words: SharedWords) -> StageResult:
        exact, near = self.spec
        return dedup_annotate(table, exact, near, words(table) if near.enabled else None)
