"""The filter chain of ``filtered_documents``: every filter of the registry that is on, in
order, on each shard; each drop is a reject with its reason and the measured value."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from llm_assets.kernels.dedup import ExactDedupSpec, NearDedupSpec
from llm_assets.kernels.filters.base import ROW, Filter, SharedWords
from llm_assets.kernels.filters.flagged import FlaggedWordsSpec
from llm_assets.kernels.filters.gopher_quality import QualitySpec
from llm_assets.kernels.filters.gopher_repetition import RepetitionSpec
from llm_assets.kernels.filters.language import LanguageSpec
from llm_assets.kernels.filters.length import LengthFilterSpec
from llm_assets.kernels.filters.registry import plugins, registry
from llm_assets.kernels.schema import INPUT_IDS, StageResult, empty_rejects


def _rebuild(parts: tuple[tuple[str, Any], ...]) -> FilterSpec:
    spec = object.__new__(FilterSpec)
    object.__setattr__(spec, "_parts", parts)
    return spec


class FilterSpec:
    """Every filter's part, by name (``FilterSpec(quality=QualitySpec())``); a part that is
    ``None`` is off, a part not given is the filter's default (token-count bounds on, the rest
    off). Frozen and picklable: workers get it whole."""

    __slots__ = ("_parts",)
    _parts: tuple[tuple[str, Any], ...]

    def __init__(self, **parts: Any) -> None:
        defaults: dict[str, Any] = {}
        for cls in registry():
            defaults.update(cls.default_parts())
        unknown = sorted(set(parts) - set(defaults))
        if unknown:
            raise TypeError(f"FilterSpec: no filter named {unknown} (known: {sorted(defaults)})")
        object.__setattr__(self, "_parts", tuple({**defaults, **parts}.items()))

    @classmethod
    def standard(cls, **overrides: Any) -> FilterSpec:
        """Every filter on with datatrove's defaults (English, Gopher rules, both dedups)."""
        parts: dict[str, Any] = {
            "quality": QualitySpec(),
            "repetition": RepetitionSpec(),
            "flagged": FlaggedWordsSpec(),
            "language": LanguageSpec(),
            "exact_dedup": ExactDedupSpec(),
            "near_dedup": NearDedupSpec(),
        }
        parts.update(overrides)
        return cls(**parts)

    def get(self, name: str) -> Any:
        return dict(self._parts).get(name)

    def __getattr__(self, name: str) -> Any:
        parts = dict(object.__getattribute__(self, "_parts"))
        if name not in parts:
            raise AttributeError(name)
        return parts[name]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("FilterSpec is frozen: use replace()")

    def replace(self, **changes: Any) -> FilterSpec:
        return FilterSpec(**{**dict(self._parts), **changes})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FilterSpec) and dict(self._parts) == dict(other._parts)

    def __hash__(self) -> int:
        return hash(self._parts)

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self._parts if v is not None)
        return f"FilterSpec({shown})"

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (self._parts,)

    @property
    def dedup(self) -> bool:
        """Whether the global deduplication step runs after the per-shard chain."""
        return bool(
            (self.exact_dedup and self.exact_dedup.enabled)
            or (self.near_dedup and self.near_dedup.enabled)
        )

    def steps(self) -> Iterator[Filter]:
        """The filters that are on, in chain order."""
        for cls in registry():
            step = cls.of(self)
            if step is not None:
                yield step

    def stage_config(self) -> dict[str, Any]:
        """The stage's config and fingerprint: each filter's settings; a plugin's with the
        version of its distribution, so that a new release computes again."""
        parts = dict(self._parts)
        versions = plugins()
        config: dict[str, Any] = {}
        for cls in registry():
            part = cls.stage_config(parts)
            if cls in versions and part:
                part = {cls.name: {"settings": part[cls.name], "version": versions[cls]}}
            config.update(part)
        return config


def filter_table(table: pa.Table, spec: FilterSpec | LengthFilterSpec) -> StageResult:
    """Kernel of ``filtered_documents``: run the filter chain, collecting every step's rejects.

    The steps that read words share one split of the text (:class:`SharedWords`); each gives
    what it gives when run alone on the table."""
    if isinstance(spec, LengthFilterSpec):
        spec = FilterSpec(length=spec)
    words = SharedWords()
    steps = list(spec.steps())
    rejects = [empty_rejects()]
    # With more than one step, every row carries its number (ROW) through the chain: it finds
    # the shared words of the rows a step sees, and the token ids. The token ids are the widest
    # column and no filter reads them: set them aside and take the survivors' ids once at the
    # end, instead of copying them at every step that drops rows.
    numbered = len(steps) > 1
    ids = table[INPUT_IDS] if INPUT_IDS in table.column_names and numbered else None
    if ids is not None:
        position, ids_field = table.schema.get_field_index(INPUT_IDS), table.schema.field(INPUT_IDS)
        table = table.drop_columns([INPUT_IDS])
    if numbered:
        table = table.append_column(ROW, pa.array(np.arange(table.num_rows, dtype=np.int64)))
    for step in steps:
        result = step.apply(table, words)
        table = result.kept
        rejects.append(result.rejects)
    if numbered:
        rows = table[ROW]
        table = table.drop_columns([ROW])
        if ids is not None:
            table = table.add_column(position, ids_field, ids.take(rows))
    return StageResult(table, pa.concat_tables(rejects))
